"""Turning declared requirements into the rows a mechanism takes, or into a reason to refuse them.

A declaration is ``("fixed", w, ε)``, ``("dynamic", w_B, ε_B, w_F, ε_F)``,
``("lifetime", ε)`` or ``("level", name)`` (a named level the operator maps
to one of the others).  A fixed ``(w, E)`` given to a dynamic mechanism means
the same constraint in both directions, ``(w, E, w, E)``; a dynamic
declaration cannot be honoured by a fixed-requirement mechanism; a lifetime
budget (at most ε over every slot, forever) is neither windowed form, so only
a mechanism whose requirements are lifetime budgets takes one, and such a
mechanism takes nothing else.  A user with no declaration gets the
configured default, or with ``level_shares`` a named level assigned by a
hash of their id.

A user's own declaration always wins over the operator's assignment: the
assignment is only a default for users who declared nothing, never a
replacement (the operator must not weaken, or silently change, what a user
asked for; the operator's bounds ``min_epsilon``/``max_epsilon``/``max_window``
still refuse a declaration outright, as a dead letter with its reason).  The
ledger then checks each user against the requirement the mechanism used,
which is their own declaration when they made one.  Refusals are reasons for
a dead letter, never exceptions: one bad declaration must not stop the stream.
"""

from __future__ import annotations

import hashlib
import typing
from dataclasses import dataclass, field

import numpy as np

from transforms.mechanisms import DynamicRequirement, FixedRequirement, LifetimeRequirement, Mechanism
from transforms.mechanisms.requirements import Requirements

REQUIREMENT_TYPES = (FixedRequirement, DynamicRequirement, LifetimeRequirement)


@dataclass(frozen=True)
class RequirementPolicy:
    """How declarations are read: named levels, the default for users who declare nothing (one ``default`` for
    all, or a level assigned by ``level_shares``, ``((name, fraction), ...)``), and the operator's bounds (every
    budget in ``[min_epsilon, max_epsilon]``, every window ``<= max_window``)."""

    levels: dict = field(default_factory=dict)
    default: FixedRequirement | DynamicRequirement | LifetimeRequirement | None = None
    min_epsilon: float | None = None
    max_epsilon: float | None = None
    max_window: int | None = None
    level_shares: tuple = ()

    def __post_init__(self):
        for name in ("min_epsilon", "max_epsilon"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < float("inf")):
                raise ValueError(f"{name} must be a positive finite number, got {value!r}")
        if self.min_epsilon and self.max_epsilon and self.min_epsilon > self.max_epsilon:
            raise ValueError("min_epsilon must not exceed max_epsilon")
        if self.max_window is not None and (not isinstance(self.max_window, int) or self.max_window < 1):
            raise ValueError(f"max_window must be an integer >= 1, got {self.max_window!r}")
        for name, level in self.levels.items():
            if not isinstance(level, REQUIREMENT_TYPES):
                raise ValueError(f"level {name!r} must map to a FixedRequirement, DynamicRequirement or "
                                 f"LifetimeRequirement")
        if self.default is not None and not isinstance(self.default, REQUIREMENT_TYPES):
            raise ValueError("default must be a FixedRequirement, DynamicRequirement or LifetimeRequirement")
        if self.level_shares:
            if self.default is not None:
                raise ValueError("give either a default requirement for all or level shares, not both")
            unknown = [name for name, _ in self.level_shares if name not in self.levels]
            if unknown:
                raise ValueError(f"level shares name unknown level {unknown[0]!r}")
            shares = [share for _, share in self.level_shares]
            if any(not 0 <= share <= 1 for share in shares) or abs(sum(shares) - 1) > 1e-9:
                raise ValueError("level ratios must be non-negative and sum to 1")

    def assigned(self, user: str) -> tuple | None:
        """The ``("level", name)`` the operator assigns ``user`` when they declare nothing (a hash of the id, so
        the same user always gets the same level); None without ``level_shares``."""
        if not self.level_shares:
            return None
        draw = int.from_bytes(hashlib.sha256(user.encode("utf-8", "surrogatepass")).digest()[:8], "big") / 2**64
        cumulative = 0.0
        for name, share in self.level_shares:
            cumulative += share
            if draw < cumulative:
                return ("level", name)
        return ("level", self.level_shares[-1][0])


def _as_requirement(declaration):
    kind = declaration[0]
    if kind == "fixed":
        return FixedRequirement(window=int(declaration[1]), epsilon=declaration[2])
    if kind == "dynamic":
        return DynamicRequirement(int(declaration[1]), declaration[2], int(declaration[3]), declaration[4])
    if kind == "lifetime":
        return LifetimeRequirement(epsilon=declaration[1])
    raise ValueError(f"unknown requirement kind {kind!r}")


class DeclarationTranslator:
    """Validates and converts declarations for one mechanism, caching each distinct one."""

    def __init__(self, mechanism: Mechanism, policy: RequirementPolicy):
        self.mechanism = mechanism
        self.policy = policy
        self.kind: type[Requirements] = typing.cast("type[Requirements]", mechanism.requirement_kind)
        self.width = self.kind.width
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
            self._check_bounds(requirement)
            columns = self.mechanism.validate_requirement(requirement)
        except ValueError as error:
            return None, f"requirement refused: {error}"
        return tuple(int(x) for x in columns.as_matrix()[0]), None

    def _check_bounds(self, requirement) -> None:
        """The operator's bounds, applied to every window and budget of the declaration."""
        policy = self.policy
        if isinstance(requirement, FixedRequirement):
            windows, epsilons = [requirement.window], [requirement.epsilon]
        elif isinstance(requirement, LifetimeRequirement):
            windows, epsilons = [], [requirement.epsilon]
        else:
            windows = [requirement.backward_window, requirement.forward_window]
            epsilons = [requirement.backward_epsilon, requirement.forward_epsilon]
        if policy.max_window is not None and windows and max(windows) > policy.max_window:
            raise ValueError(f"window {max(windows)} exceeds the operator's maximum {policy.max_window}")
        if policy.min_epsilon is not None and min(float(e) for e in epsilons) < policy.min_epsilon:
            raise ValueError(f"epsilon {min(float(e) for e in epsilons)} is below the operator's minimum "
                             f"{policy.min_epsilon}")
        if policy.max_epsilon is not None and max(float(e) for e in epsilons) > policy.max_epsilon:
            raise ValueError(f"epsilon {max(float(e) for e in epsilons)} exceeds the operator's maximum "
                             f"{policy.max_epsilon}")

    def columns(self, rows):
        """Requirement columns for accepted rows (a list of them, or their matrix) in the mechanism's kind."""
        matrix = np.array(rows, dtype=np.int64).reshape(len(rows), self.width)
        return self.kind(*(matrix[:, k].copy() for k in range(self.width)))
