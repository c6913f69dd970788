"""Requirement assignments of the papers' experiments (spec/pwsm.md §5.2; reference_impl §6.3-6.4).

Users are split into ``types`` contiguous blocks that share a requirement:

* fixed: each type draws ``E_k`` uniformly from the grid values ``>= E`` and
  ``w_k`` from the grid values ``<= w``;
* dynamic: each type draws its forward requirement from
  ``{E_k, ..., 1.0}`` x ``{40, ..., w_k}``; the backward requirement is
  ``(w_B = 1, E_B = 10)``, which never binds (as in the papers).  How often
  a type redraws is the *requirement scenario*: ``redrawn`` at every slot
  (the authors' code; the papers' text does not say), ``held`` once for the
  whole run, ``drifting`` every K slots;
* homogeneous baselines run with ``(min E_k, max w_k) = (E, w)``.

``two_types`` builds the user-type ratio experiment of §6.5.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transforms.mechanisms.budget import to_units, to_units_array
from transforms.mechanisms.requirements import DynamicRequirements, FixedRequirements

EPSILON_GRID = (0.2, 0.4, 0.6, 0.8, 1.0)
WINDOW_GRID = (40, 80, 120, 160, 200)
BACKWARD_EPSILON = 10.0
SCENARIOS = ("redrawn", "held", "drifting")
"""Requirement scenarios of the dynamic mechanisms: how often each type redraws its forward requirement."""


def redraw_every(scenario: str, drift_every: int) -> int | None:
    """Slots between two forward draws of a type under ``scenario`` (``None``: never after the first)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown requirement scenario {scenario!r}; choose from {', '.join(SCENARIOS)}")
    if isinstance(drift_every, bool) or not isinstance(drift_every, (int, np.integer)) or drift_every < 1:
        raise ValueError(f"drift_every must be an integer >= 1, got {drift_every!r}")
    return {"redrawn": 1, "held": None, "drifting": int(drift_every)}[scenario]


@dataclass(frozen=True)
class PaperSetup:
    """The papers' personalized requirements for ``users`` users around a static ``(E, w)``."""

    users: int
    epsilon: float = 0.6
    window: int = 120
    types: int = 10
    epsilon_grid: tuple[float, ...] = EPSILON_GRID
    window_grid: tuple[int, ...] = WINDOW_GRID

    def __post_init__(self):
        if self.users < 1:
            raise ValueError(f"users must be >= 1, got {self.users}")
        if not 1 <= self.types:
            raise ValueError(f"types must be >= 1, got {self.types}")
        if not self._epsilons() or not self._windows():
            raise ValueError(f"(epsilon={self.epsilon}, window={self.window}) leaves no candidate on the grids")

    def _epsilons(self) -> list[float]:
        return [e for e in self.epsilon_grid if e >= self.epsilon]

    def _windows(self) -> list[int]:
        return [w for w in self.window_grid if w <= self.window]

    def user_types(self) -> np.ndarray:
        """Type of each user: contiguous blocks of ``ceil(users / types)``."""
        block = -(-self.users // self.types)
        return np.arange(self.users) // block

    def type_requirements(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``(E_k, w_k)`` per type."""
        return (rng.choice(self._epsilons(), self.types), rng.choice(self._windows(), self.types))

    def fixed(self, rng: np.random.Generator) -> FixedRequirements:
        """Every user's fixed ``(w_i, E_i)``."""
        epsilons, windows = self.type_requirements(rng)
        types = self.user_types()
        return FixedRequirements.of(windows[types], epsilons[types])

    def dynamic_declarations(self, rng: np.random.Generator, slots: int, every: int | None = 1):
        """Yield, per slot, every user's declaration; each type redraws its forward requirement
        every ``every`` slots (``None``: drawn once), starting at the first slot."""
        if every is not None and (isinstance(every, bool) or not isinstance(every, (int, np.integer))
                                  or every < 1):
            raise ValueError(f"every must be an integer >= 1 or None, got {every!r}")
        epsilons, windows = self.type_requirements(rng)
        type_sizes = np.bincount(self.user_types(), minlength=self.types)  # types are contiguous blocks
        # each type's candidates, padded to the longest list; a draw picks index < its count
        eps_choices = [[e for e in self.epsilon_grid if e >= ek] for ek in epsilons]
        win_choices = [[w for w in self.window_grid if w <= wk] for wk in windows]
        eps_table = _padded([to_units_array(c) for c in eps_choices])
        win_table = _padded([np.asarray(c, np.int64) for c in win_choices])
        eps_counts = np.array([len(c) for c in eps_choices])
        win_counts = np.array([len(c) for c in win_choices])
        by_type = np.arange(self.types)
        backward_window = np.ones(self.users, np.int64)
        backward_units = np.full(self.users, to_units(BACKWARD_EPSILON), np.int64)
        declaration = None
        for t in range(slots):
            if declaration is None or (every is not None and t % every == 0):
                forward_units = eps_table[by_type, rng.integers(0, eps_counts)]
                forward_window = win_table[by_type, rng.integers(0, win_counts)]
                declaration = DynamicRequirements(backward_window, backward_units,
                                                  np.repeat(forward_window, type_sizes),
                                                  np.repeat(forward_units, type_sizes))
            yield declaration

    @property
    def max_window(self) -> int:
        return max(self._windows())


def _padded(rows: list[np.ndarray]) -> np.ndarray:
    table = np.zeros((len(rows), max(r.size for r in rows)), np.int64)
    for i, row in enumerate(rows):
        table[i, :row.size] = row
    return table


def two_types(users: int, ratio: float, first: tuple[int, float], second: tuple[int, float]) -> FixedRequirements:
    """A fraction ``ratio`` of users (the first block) with ``first = (w, E)``, the rest with ``second``."""
    if not 0 <= ratio <= 1:
        raise ValueError(f"ratio must be in [0, 1], got {ratio}")
    split = int(round(users * ratio))
    windows = np.where(np.arange(users) < split, first[0], second[0])
    epsilons = np.where(np.arange(users) < split, first[1], second[1])
    return FixedRequirements.of(windows, epsilons)
