"""Records of the numeric per-user client stage (``transforms.numeric_clients``) that cross stages or lie in state.

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


class NumericReport(NamedTuple):
    """One user's perturbed report for one slot, in ``[0, 1]`` units of the declared interval (CAPP's may lie
    slightly outside), and what it cost its sender (budget units): the only thing the client stage lets out."""

    stream: str
    slot: int
    report: float
    units: int
