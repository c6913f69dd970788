"""The numeric per-user client stage's state row and per-slot sums (``transforms.numeric_clients``).

Plain NamedTuples; their coders are in ``transforms.coders`` (versioned, no pickle).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class ClientRow(NamedTuple):
    """One user's client state (``transforms.mechanisms.numeric.perturbation.ClientState`` for one user).

    ``deviations``: the ring of remembered deviations (float64, ``h`` cells; none for SW-direct), ``accumulated``:
    their sum ``D`` (exact: dyadic rationals), ``age``: the reports the user has sent.
    """

    deviations: np.ndarray
    accumulated: float
    age: int


class SlotSum(NamedTuple):
    """A slot's reports, summed (or some of them): how many, their sum times ``2**64`` (an exact integer: every
    report is a dyadic rational with a smaller denominator) and the units one report costs."""

    count: int
    total: int
    units: int
