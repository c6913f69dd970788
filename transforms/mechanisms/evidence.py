"""What a release was computed from, and the least charge that implies.

A ledger that reads a mechanism's own bookkeeping (its cohort table, waiting
list, projections) is fooled by the same bug as the mechanism.  So every
release carries its :class:`Evidence`: for each noisy statistic it computed
(the dissimilarity of Part_DC, the published histogram) the noise's exact
scale and sensitivity and, for every user, the probability with which their
report could enter it.  The mechanism builds its cells from exactly that
list (``groups`` is the array the cells were counted from), so a user who is
not on it cannot influence the release.

From the evidence alone the ledger derives each user's least charge: a
statistic with discrete Laplace noise of scale ``b`` and L1 sensitivity
``Δ`` is ``Δ/b``-DP, and a report that enters it with probability ``p`` (an
exact coin, ``p = threshold / 2**32``) costs ``ln(1 + p·(e^{Δ/b} - 1))``
(amplification by subsampling); :class:`Draws` of a selection whose law
bounds its own log-ratio (DPI's exponential-mechanism draws) cost their
stated units each; a :class:`LocalReport` (a randomized
response a user sent, local DP) costs ``ln(keep/other)``, the log of its
largest ratio of output probabilities, whatever the collector does with it;
statistics of one slot add up.  The value is
bounded from above with outward-rounded decimal arithmetic and rounded up to
whole budget units, so a charge that passes covers the true cost.
"""

from __future__ import annotations

import decimal
import functools
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from transforms.mechanisms.budget import UNITS_PER_EPSILON
from transforms.mechanisms.certified import log_ratio_units

CERTAIN = 1 << 32
"""The coin threshold of a report that always enters a statistic."""

_PRECISION = 50
_SLACK = decimal.Decimal(10) ** -40  # far above the working precision's error, far below one budget unit


class Statistic(NamedTuple):
    """One noisy statistic of a slot and who could enter it.

    ``thresholds[g]`` is the coin threshold of group ``g`` (``CERTAIN``: always
    included, 0: never); every coordinate gets discrete Laplace noise of scale
    ``noise_scale``; ``sensitivity`` bounds the L1 change one user's report
    makes.  A plain tuple: a slot makes one or two, and the cheapest
    mechanisms take about 30 µs a slot.
    """

    name: str
    noise_scale: Fraction
    sensitivity: int
    thresholds: np.ndarray

    def least_units(self) -> np.ndarray:
        """Least charge of a member of each group, in budget units."""
        return _least_units_of(np.asarray(self.thresholds, np.uint64).tobytes(), self.noise_scale, self.sensitivity)


class LocalReport(NamedTuple):
    """Reports users sent through a local randomizer (local DP) and who sent one.

    ``keep/other`` is the randomizer's largest ratio of one output's
    probabilities under two inputs (exact integers, e.g. GRR's ``P/Q``); a
    member of group ``g`` sent one such report when ``thresholds[g] > 0``
    (``CERTAIN``), none when it is 0.  The report itself is what the
    collector sees, so it costs ``ln(keep/other)`` in full: no coin of the
    collector's amplifies it.
    """

    name: str
    keep: int
    other: int
    thresholds: np.ndarray

    def least_units(self) -> np.ndarray:
        """Least charge of a member of each group, in budget units."""
        return np.where(np.asarray(self.thresholds) > 0, _ratio_units(self.keep, self.other), 0).astype(np.int64)


class Draws(NamedTuple):
    """Draws of an ``epsilon``-DP selection each member of a group entered (e.g. the exponential mechanism).

    Each of the ``draws`` draws is ``units_per_draw``-DP (in budget units, exact: the mechanism's law is
    known exactly, or ``units_per_draw`` bounds its log-ratio from above); a member of group ``g`` entered
    them all when ``thresholds[g] > 0`` (``CERTAIN``), none when it is 0.  Draws compose: the least charge
    is ``draws * units_per_draw``.
    """

    name: str
    units_per_draw: int
    draws: int
    thresholds: np.ndarray

    def least_units(self) -> np.ndarray:
        """Least charge of a member of each group, in budget units."""
        return np.where(np.asarray(self.thresholds) > 0, self.units_per_draw * self.draws, 0).astype(np.int64)


@functools.lru_cache(maxsize=4096)
def _ratio_units(keep: int, other: int) -> int:
    if not 0 < other <= keep:
        raise ValueError(f"a local report needs 0 < other <= keep, got keep={keep}, other={other}")
    return log_ratio_units(keep, other)


class Evidence(NamedTuple):
    """Every statistic of a slot, and the group of each user index (negative: in none)."""

    groups: np.ndarray
    statistics: tuple[Statistic | LocalReport | Draws, ...] = ()

    def least_units_per_group(self) -> np.ndarray:
        """Least charge of a member of each group, in budget units (summed over the statistics)."""
        rows = max((s.thresholds.size for s in self.statistics), default=0)
        least = np.zeros(rows, np.int64)
        for statistic in self.statistics:
            least[:statistic.thresholds.size] += statistic.least_units()
        return least

    def least_units(self, users: np.ndarray) -> np.ndarray:
        """Least charge of each of ``users`` (user indices), in budget units."""
        users = np.asarray(users, np.int64)
        groups = np.full(users.size, -1, np.int64)
        known = users < self.groups.size
        groups[known] = self.groups[users[known]]
        return of_groups(self.least_units_per_group(), groups)


def of_groups(per_group: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """``per_group[g]`` for each group ``g`` (0 for a negative one or one no statistic covers)."""
    inside = (groups >= 0) & (groups < per_group.size)
    if per_group.size == 0 or not inside.any():
        return np.zeros(groups.size, np.int64)
    return np.where(inside, per_group[np.where(inside, groups, 0)], 0)


def no_statistics(groups: np.ndarray) -> Evidence:
    """The evidence of a slot that computed nothing from the data."""
    return Evidence(groups)


def every_member_certain(rows: int) -> np.ndarray:
    """Thresholds of a statistic that every member of every group enters."""
    return _certain(rows)


@functools.lru_cache(maxsize=256)
def _certain(rows: int) -> np.ndarray:
    thresholds = np.full(rows, CERTAIN, np.uint64)
    thresholds.flags.writeable = False
    return thresholds


@functools.lru_cache(maxsize=1024)
def _least_units_of(thresholds: bytes, noise_scale: Fraction, sensitivity: int) -> np.ndarray:
    """Per threshold, the least charge in units (cached: a cohort's thresholds repeat from slot to slot)."""
    values = np.frombuffer(thresholds, np.uint64)
    distinct, inverse = np.unique(values, return_inverse=True)
    least = np.array([least_charge_units(int(t), noise_scale, sensitivity) for t in distinct], np.int64)
    result = least[inverse.reshape(-1)]
    result.flags.writeable = False
    return result


@functools.lru_cache(maxsize=65536)
def least_charge_units(threshold: int, noise_scale: Fraction, sensitivity: int) -> int:
    """Budget units that cover entering, with probability ``threshold/2**32``, a ``Δ/b``-DP statistic.

    Exact when the coin is certain (``Δ/b`` itself, rounded up to units); otherwise an upper
    bound of ``ln(1 + p·(e^{Δ/b} - 1))`` from decimal arithmetic with a margin far above its
    rounding error, rounded up to units.
    """
    if threshold <= 0:
        return 0
    epsilon = Fraction(sensitivity) / Fraction(noise_scale)
    if threshold >= CERTAIN:
        return -(-epsilon.numerator * UNITS_PER_EPSILON // epsilon.denominator)
    with decimal.localcontext() as context:
        context.prec = _PRECISION
        context.rounding = decimal.ROUND_CEILING
        growth = (decimal.Decimal(epsilon.numerator) / decimal.Decimal(epsilon.denominator)).exp() - 1
        amplified = (1 + decimal.Decimal(threshold) / CERTAIN * growth * (1 + _SLACK)).ln() * (1 + _SLACK)
        return int((amplified * UNITS_PER_EPSILON).to_integral_value(rounding=decimal.ROUND_CEILING))
