"""Each user's requirement in force, from their declarations alone.

The ledgers check windows against what users *declared*, under the public
rules every mechanism announces, never against a mechanism's own view of it
(its cohort table, waiting list or projections):

* a user's first row registers them with its requirement (or the
  mechanism's public default requirement when the row carries none);
* fixed ``(w, E) -> (w', E')`` declared at ``t`` takes effect at
  ``t + w' - 1``; until then ``(w, E)`` stays in force, and declaring
  ``(w, E)`` again cancels the change (population/__init__.py states why this is
  private);
* a dynamic declaration ``(w_B, E_B, w_F, E_F)``, or a lifetime budget
  ``E``, is in force from its slot until the user declares again.  A
  backward ``E_B`` below what the window already spent is projected
  (spec §1.6); the ledgers compute that projection themselves, from the
  charges they recorded.
"""

from __future__ import annotations

import io

import numpy as np

from transforms.mechanisms.requirements import (DynamicRequirements, FixedRequirements, LifetimeRequirements,
                                                Requirements)

KINDS = {"fixed": FixedRequirements, "dynamic": DynamicRequirements, "lifetime": LifetimeRequirements}
"""Each requirement kind by the name checkpoints store."""

NOTHING_ALLOWED = {FixedRequirements: np.array([1, 0], np.int64), DynamicRequirements: np.array([1, 0, 1, 0], np.int64),
                   LifetimeRequirements: np.array([0], np.int64)}
"""Per kind, the requirement checked for a user charged without a declaration: nothing may be charged."""


_ROW_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def rows_differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(a != b).any(axis=1)`` for two ``(n, width)`` arrays, reading each row's verdicts as one word when
    ``width`` allows (a reduction over a short axis is slow in numpy)."""
    unequal = np.not_equal(a, b)
    word = _ROW_WORDS.get(unequal.shape[1]) if unequal.ndim == 2 else None
    if word is None or not unequal.flags.c_contiguous:
        return unequal.any(axis=1)
    return unequal.view(word).reshape(-1) != 0


def kind_name(kind: type) -> str:
    """The name checkpoints store for a requirement kind."""
    return next(name for name, known in KINDS.items() if known is kind)


def kind_of_arrays(arrays: dict, prefix: str = "") -> type:
    """The requirement kind saved in ``arrays`` (``kind``; payloads written before lifetime kept ``dynamic``)."""
    if f"{prefix}kind" in arrays:
        return KINDS[str(arrays[f"{prefix}kind"])]
    return DynamicRequirements if bool(arrays[f"{prefix}dynamic"]) else FixedRequirements


class DeclaredRequirements:
    """Per user index: registered?, the requirement in force and (fixed) a pending change."""

    def __init__(self, kind: type):
        if kind not in NOTHING_ALLOWED:
            raise ValueError(f"unknown requirement kind {kind!r}")
        self.kind = kind
        self.nothing_allowed = NOTHING_ALLOWED[kind]
        self.width = kind.width
        self.registered = np.zeros(0, bool)
        self.in_force = np.zeros((0, self.width), np.int64)
        self.pending = np.zeros((0, 2), np.int64)
        self.pending_from = np.zeros(0, np.int64)  # slot a pending fixed change takes effect (0: none)
        self.version = 0  # changes whenever some user's requirement in force changes (pending changes do not)

    def declare(self, slot: int, users: np.ndarray, requirements: Requirements | None,
                default: Requirements | None) -> None:
        """Apply slot ``slot``'s rows: ``users`` with their ``requirements`` (None: none declared)."""
        users = np.asarray(users, np.int64)
        if users.size and users.max() >= self.registered.size:
            self._grow(int(users.max()) + 1)
        self._activate(slot)
        if requirements is not None and len(requirements):
            declared = requirements.as_matrix()
        else:
            users = users[~self.registered[users]]  # only new users declare: the default
            if users.size == 0 or default is None:
                return
            declared = np.repeat(default.as_matrix()[:1], users.size, axis=0)
        if self.kind is not FixedRequirements and self._all_registered_prefix(users):
            # the usual slot: users 0..n-1, all known, declare again; rows compared in place, no gathers
            if rows_differ(self.in_force[:users.size], declared).any():
                self.in_force[:users.size] = declared
                self.version += 1
            return
        new = ~self.registered[users]
        if new.any():
            self.registered[users[new]] = True
            self.in_force[users[new]] = declared[new]
            self.version += 1
        known, declared = users[~new], declared[~new]
        if self.kind is not FixedRequirements:  # dynamic and lifetime: in force from the declaring slot
            differs = rows_differ(self.in_force[known], declared)
            if differs.any():
                self.in_force[known[differs]] = declared[differs]
                self.version += 1
        elif known.size:
            same = (self.in_force[known] == declared).all(axis=1)
            self.pending_from[known[same]] = 0  # declaring the requirement in force cancels a change
            changed = ~same & ~((self.pending_from[known] > 0) & (self.pending[known] == declared).all(axis=1))
            who = known[changed]
            self.pending[who] = declared[changed]
            self.pending_from[who] = slot + declared[changed, 0] - 1
            self._activate(slot)  # w' = 1 takes effect at once

    def knows(self, users: np.ndarray) -> np.ndarray:
        """Whether each of ``users`` has declared (or been given the default) already."""
        users = np.asarray(users, np.int64)
        known = np.zeros(users.size, bool)
        inside = users < self.registered.size
        known[inside] = self.registered[users[inside]]
        return known

    def matrix_of(self, users: np.ndarray) -> np.ndarray:
        """Each of ``users``' requirement in force as a row; one never declared allows no charge (E=0)."""
        users = np.asarray(users, np.int64)
        if self._all_registered_prefix(users):
            return self.in_force[:users.size].copy()
        if users.size and users.max() >= self.registered.size:
            self._grow(int(users.max()) + 1)
        return np.where(self.registered[users][:, None], self.in_force[users], self.nothing_allowed)

    def requirements_of(self, users: np.ndarray) -> Requirements:
        """:meth:`matrix_of` as requirement columns."""
        return self.kind(*self.matrix_of(users).T)

    def _all_registered_prefix(self, users: np.ndarray) -> bool:
        """Whether ``users`` is exactly ``0, 1, ..., n-1`` (n >= 1) and every one of them is registered."""
        n = users.size
        return (0 < n <= self.registered.size and users[0] == 0 and users[-1] == n - 1
                and (n == 1 or bool((users[1:] > users[:-1]).all())) and bool(self.registered[:n].all()))

    def _activate(self, slot: int) -> None:
        due = np.flatnonzero((self.pending_from > 0) & (self.pending_from <= slot))
        if due.size:
            self.in_force[due] = self.pending[due]
            self.pending_from[due] = 0
            self.version += 1

    def to_bytes(self) -> bytes:
        """The register as an ``.npz`` payload (checkpoints)."""
        buffer = io.BytesIO()
        np.savez(buffer, kind=np.array(kind_name(self.kind)), **self.state_arrays())
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, payload: bytes) -> "DeclaredRequirements":
        with np.load(io.BytesIO(payload), allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        register = cls(kind_of_arrays(arrays))
        register.load_state_arrays({k: v for k, v in arrays.items() if k not in ("kind", "dynamic")})
        return register

    def _grow(self, size: int) -> None:
        extra = max(size, 2 * self.registered.size) - self.registered.size
        self.registered = np.concatenate([self.registered, np.zeros(extra, bool)])
        self.in_force = np.concatenate([self.in_force, np.zeros((extra, self.width), np.int64)])
        self.pending = np.concatenate([self.pending, np.zeros((extra, 2), np.int64)])
        self.pending_from = np.concatenate([self.pending_from, np.zeros(extra, np.int64)])

    # -- checkpoints --------------------------------------------------------------
    def state_arrays(self) -> dict[str, np.ndarray]:
        return {"registered": self.registered, "in_force": self.in_force, "pending": self.pending,
                "pending_from": self.pending_from}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.registered = np.array(arrays["registered"], bool)
        self.in_force = np.array(arrays["in_force"], np.int64).reshape(-1, self.width)
        self.pending = np.array(arrays["pending"], np.int64).reshape(-1, 2)
        self.pending_from = np.array(arrays["pending_from"], np.int64)
        self.version += 1
