"""The numeric per-user client stage's state row and per-slot sums (``transforms.numeric_clients``).

Plain NamedTuples; their coders are in ``transforms.coders`` (versioned, no pickle).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

REPORT_SCALE = 1 << 64
"""Every report is a dyadic rational with a denominator below this: ``report·REPORT_SCALE`` is an exact integer
(the stage sums reports as such)."""


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


class SampledRow(NamedTuple):
    """One user's PP-S / APP-S / CAPP-S / Sampling state: the base client's ``ClientRow`` fields (its age counts
    samples), the open segment (``segment`` its index, -1: none), the sum and count of its grid values in
    ``[0, 1]`` (exact: dyadic rationals) and the requirement row of its latest value (what its report is charged
    under)."""

    deviations: np.ndarray
    accumulated: float
    age: int
    segment: int
    total: float
    count: int
    requirement: tuple


class AbsorptionRow(NamedTuple):
    """One user's BA-SW state (``transforms.mechanisms.numeric.baselines.AbsorptionState`` for one user): the last
    publication, its slot in the user's own count (-1: none), its budget in shares ``e1``, the user's next slot."""

    published: float
    last_slot: int
    shares: int
    slot: int


class NumericCharges(NamedTuple):
    """One user's reports over some slots for the numeric ledger stage (``transforms.numeric_ledger``): per report
    its slot, its charge per part, the budget each part was made at, then the requirement row in force (of
    ``kind``: "fixed" ``(w, E)``, "dynamic" or "lifetime"); ``final`` at the end of a bounded run, ``complete`` when
    the chunk holds the user's whole stream.  No least charge: the ledger derives it from the public schedule."""

    key: str
    table: np.ndarray
    kind: str
    final: bool
    complete: bool
