"""Users' privacy requirements, as validated columns of exact budget units.

Three forms exist (spec/pwsm.md §1.4-1.5, spec/dpi.md §2.10):

* **fixed** ``(w, E)``: at most ``E`` over any ``w`` consecutive slots;
* **dynamic** ``(w_B, E_B, w_F, E_F)`` declared at a slot ``t``: at most ``E_B``
  over the backward window ``[t-w_B+1, t]`` and at most ``E_F`` over the
  forward window ``[t, t+w_F-1]``;
* **lifetime** ``E``: at most ``E`` over every slot since the user's first,
  forever (a declaration is in force from its slot until the user declares
  again, like a dynamic one).

Requirements travel as columns aligned with a slot batch, so a million users
are validated with a handful of numpy operations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from transforms.mechanisms.budget import to_units, to_units_array

MAX_WINDOW = 1_000_000
"""Largest accepted window length, in slots."""


def _windows(values, name: str, length: int | None = None) -> np.ndarray:
    raw = np.asarray(values)
    if raw.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {raw.shape}")
    if raw.dtype.kind == "f":
        if not np.all(np.isfinite(raw)) or np.any(raw != np.round(raw)):
            raise ValueError(f"{name} must hold whole numbers of slots")
    elif raw.dtype.kind not in "iu" and raw.size:
        raise ValueError(f"{name} must hold integers, got dtype {raw.dtype}")
    windows = raw.astype(np.int64)
    if windows.size and (windows.min() < 1 or windows.max() > MAX_WINDOW):
        raise ValueError(f"{name} must be in [1, {MAX_WINDOW}] slots")
    if length is not None and windows.size != length:
        raise ValueError(f"{name} has {windows.size} entries, expected {length}")
    return windows


def _budgets(values, name: str, length: int) -> np.ndarray:
    units = to_units_array(values, name)
    if units.size != length:
        raise ValueError(f"{name} has {units.size} entries, expected {length}")
    return units


@dataclass(frozen=True)
class FixedRequirement:
    """One user's fixed requirement: at most ``epsilon`` in any ``window`` slots."""

    window: int
    epsilon: float

    def __post_init__(self):
        _windows([self.window], "window")
        to_units(self.epsilon, "epsilon")

    @property
    def epsilon_units(self) -> int:
        return to_units(self.epsilon, "epsilon")


@dataclass(frozen=True)
class DynamicRequirement:
    """One user's dynamic declaration (backward and forward windows and budgets)."""

    backward_window: int
    backward_epsilon: float
    forward_window: int
    forward_epsilon: float

    def __post_init__(self):
        _windows([self.backward_window], "backward_window")
        _windows([self.forward_window], "forward_window")
        to_units(self.backward_epsilon, "backward_epsilon")
        to_units(self.forward_epsilon, "forward_epsilon")


@dataclass(frozen=True)
class FixedRequirements:
    """Columns of fixed requirements: ``window`` slots and ``epsilon_units``."""

    width: ClassVar[int] = 2  # columns of :meth:`as_matrix`
    window: np.ndarray
    epsilon_units: np.ndarray

    @classmethod
    def of(cls, window, epsilon) -> "FixedRequirements":
        """Validate and convert (``epsilon`` in epsilon, not units)."""
        windows = _windows(window, "window")
        return cls(windows, _budgets(epsilon, "epsilon", windows.size))

    @classmethod
    def uniform(cls, requirement: FixedRequirement, count: int) -> "FixedRequirements":
        return cls(np.full(count, requirement.window, np.int64),
                   np.full(count, requirement.epsilon_units, np.int64))

    def __len__(self) -> int:
        return self.window.size

    def take(self, index) -> "FixedRequirements":
        return FixedRequirements(self.window[index], self.epsilon_units[index])

    def as_matrix(self) -> np.ndarray:
        """``(window, epsilon_units)`` side by side (rows compare as whole requirements)."""
        return np.stack([self.window, self.epsilon_units], axis=1)


@dataclass(frozen=True)
class DynamicRequirements:
    """Columns of dynamic declarations, budgets in units."""

    width: ClassVar[int] = 4
    backward_window: np.ndarray
    backward_units: np.ndarray
    forward_window: np.ndarray
    forward_units: np.ndarray

    @classmethod
    def of(cls, backward_window, backward_epsilon, forward_window, forward_epsilon) -> "DynamicRequirements":
        """Validate and convert (budgets in epsilon, not units)."""
        wb = _windows(backward_window, "backward_window")
        n = wb.size
        return cls(wb, _budgets(backward_epsilon, "backward_epsilon", n),
                   _windows(forward_window, "forward_window", n),
                   _budgets(forward_epsilon, "forward_epsilon", n))

    @classmethod
    def uniform(cls, requirement: DynamicRequirement, count: int) -> "DynamicRequirements":
        return cls.of(np.full(count, requirement.backward_window),
                      np.full(count, requirement.backward_epsilon),
                      np.full(count, requirement.forward_window),
                      np.full(count, requirement.forward_epsilon))

    @classmethod
    def from_fixed(cls, fixed: FixedRequirements, backward_units: int | None = None) -> "DynamicRequirements":
        """Forward ``(w, E)`` with a backward requirement that never binds (``w_B = 1``).

        This is how the papers run DPBD/DPBA against fixed requirements
        (spec §5.2: ``E_B = 10, w_B = 1``); with it DPBD equals PBD exactly.
        """
        n = len(fixed)
        big = backward_units if backward_units is not None else 2 * int(fixed.epsilon_units.max(initial=1))
        return cls(np.ones(n, np.int64), np.full(n, big, np.int64),
                   fixed.window.copy(), fixed.epsilon_units.copy())

    def __len__(self) -> int:
        return self.backward_window.size

    def take(self, index) -> "DynamicRequirements":
        return DynamicRequirements(self.backward_window[index], self.backward_units[index],
                                   self.forward_window[index], self.forward_units[index])

    def as_matrix(self) -> np.ndarray:
        """The four columns side by side (rows compare as whole declarations)."""
        return np.stack([self.backward_window, self.backward_units,
                         self.forward_window, self.forward_units], axis=1)


@dataclass(frozen=True)
class LifetimeRequirement:
    """One user's lifetime budget: at most ``epsilon`` over all slots since their first."""

    epsilon: float

    def __post_init__(self):
        to_units(self.epsilon, "epsilon")

    @property
    def epsilon_units(self) -> int:
        return to_units(self.epsilon, "epsilon")


@dataclass(frozen=True)
class LifetimeRequirements:
    """Columns of lifetime budgets, in units."""

    width: ClassVar[int] = 1
    epsilon_units: np.ndarray

    @classmethod
    def of(cls, epsilon) -> "LifetimeRequirements":
        """Validate and convert (``epsilon`` in epsilon, not units)."""
        return cls(to_units_array(epsilon, "epsilon"))

    @classmethod
    def uniform(cls, requirement: LifetimeRequirement, count: int) -> "LifetimeRequirements":
        return cls(np.full(count, requirement.epsilon_units, np.int64))

    def __len__(self) -> int:
        return self.epsilon_units.size

    def take(self, index) -> "LifetimeRequirements":
        return LifetimeRequirements(self.epsilon_units[index])

    def as_matrix(self) -> np.ndarray:
        """One column, ``epsilon_units``."""
        return self.epsilon_units.reshape(-1, 1)


Requirements = FixedRequirements | DynamicRequirements | LifetimeRequirements
