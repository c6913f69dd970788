"""Turning declared requirements into the rows a mechanism takes, or into a reason to refuse them.

A declaration is ``("fixed", w, ε)``, ``("dynamic", w_B, ε_B, w_F, ε_F)`` or
``("level", name)`` (a named level the operator maps to one of the others).
A fixed ``(w, E)`` given to a dynamic mechanism means the same constraint in
both directions, ``(w, E, w, E)``; a dynamic declaration cannot be honoured
by a fixed-requirement mechanism.  A user with no declaration gets the
configured default.  Refusals are reasons for a dead letter, never
exceptions: one bad declaration must not stop the stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from transforms.mechanisms import (NO_VALUE, DynamicRequirement, DynamicRequirements, FixedRequirement,
                                   FixedRequirements, Mechanism, SlotBatch)


@dataclass(frozen=True)
class RequirementPolicy:
    """How declarations are read: named levels, and the default for users who declare nothing."""

    levels: dict = field(default_factory=dict)
    default: FixedRequirement | DynamicRequirement | None = None

    def __post_init__(self):
        for name, level in self.levels.items():
            if not isinstance(level, (FixedRequirement, DynamicRequirement)):
                raise ValueError(f"level {name!r} must map to a FixedRequirement or DynamicRequirement")
        if self.default is not None and not isinstance(self.default, (FixedRequirement, DynamicRequirement)):
            raise ValueError("default must be a FixedRequirement or DynamicRequirement")


def _as_requirement(declaration):
    kind = declaration[0]
    if kind == "fixed":
        return FixedRequirement(window=int(declaration[1]), epsilon=declaration[2])
    if kind == "dynamic":
        return DynamicRequirement(int(declaration[1]), declaration[2], int(declaration[3]), declaration[4])
    raise ValueError(f"unknown requirement kind {kind!r}")


class DeclarationTranslator:
    """Validates and converts declarations for one mechanism, caching each distinct one."""

    def __init__(self, mechanism: Mechanism, policy: RequirementPolicy):
        self.mechanism = mechanism
        self.policy = policy
        self.dynamic = mechanism.requirement_kind is DynamicRequirements
        self._cache: dict = {}

    def row(self, declaration) -> tuple[tuple | None, str | None]:
        """``(row, None)`` with the mechanism's requirement row, or ``(None, reason)``."""
        if declaration not in self._cache:
            self._cache[declaration] = self._translate(declaration)
        return self._cache[declaration]

    def _translate(self, declaration):
        try:
            if declaration is None:
                if self.policy.default is None:
                    return None, "no requirement declared and no default configured"
                requirement = self.policy.default
            elif declaration[0] == "level":
                if declaration[1] not in self.policy.levels:
                    return None, f"unknown requirement level {declaration[1]!r}"
                requirement = self.policy.levels[declaration[1]]
            else:
                requirement = _as_requirement(declaration)
            columns = self._columns(requirement)
            self.mechanism.check_requirements(SlotBatch.of([0], [NO_VALUE], columns))
        except ValueError as error:
            return None, f"requirement refused: {error}"
        if self.dynamic:
            return (int(columns.backward_window[0]), int(columns.backward_units[0]),
                    int(columns.forward_window[0]), int(columns.forward_units[0])), None
        return (int(columns.window[0]), int(columns.epsilon_units[0])), None

    def _columns(self, requirement):
        if isinstance(requirement, DynamicRequirement):
            if not self.dynamic:
                raise ValueError(f"{self.mechanism.name} takes fixed (w, epsilon) requirements, not dynamic ones")
            return DynamicRequirements.uniform(requirement, 1)
        fixed = FixedRequirements.uniform(requirement, 1)
        if self.dynamic:
            return DynamicRequirements(fixed.window, fixed.epsilon_units, fixed.window, fixed.epsilon_units)
        return fixed

    def columns(self, rows: list):
        """Requirement columns for accepted rows (in the mechanism's kind)."""
        matrix = np.array(rows, dtype=np.int64).reshape(len(rows), 4 if self.dynamic else 2)
        if self.dynamic:
            return DynamicRequirements(*(matrix[:, k].copy() for k in range(4)))
        return FixedRequirements(matrix[:, 0].copy(), matrix[:, 1].copy())
