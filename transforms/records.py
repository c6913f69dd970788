"""Records that cross stage boundaries in the Beam graph.

Between stages the pipeline moves small tuples (cheap to encode); at its
edges (sinks, dead letters) it writes dicts that follow the Avro schemas in
``schemas/``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from transforms.encoding import CONTRIBUTION_ROWS
from transforms.mechanisms.domain import TrustModel
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.requirements import LifetimeRequirements

NO_VALUE = -1
"""``Event.value`` of a record that only declares a requirement."""

KEY_SEPARATOR = "\x1f"
"""Joins a stream and a user into one state key downstream, so stream names may not contain it."""

# A requirement declaration is one of these tuples:
#   ("fixed", window, epsilon_text)
#   ("dynamic", backward_window, backward_epsilon_text, forward_window, forward_epsilon_text)
#   ("lifetime", epsilon_text)
#   ("level", name)   -- mapped to one of the others by the operator's configuration


class Event(NamedTuple):
    """One valid input record after parsing and validation."""

    stream: str
    user: str
    time: float              # event time, seconds since the Unix epoch
    value: int               # histogram bin in [0, d), or NO_VALUE for a declaration-only record
    requirement: tuple | None  # a declaration (see above), in force from ``time`` on
    raw: str                 # the original record as text, kept for dead letters


class Contribution(NamedTuple):
    """A user's one contribution to one slot, after the per-slot rule and lateness."""

    slot: int                # absolute slot index: floor((time - origin) / slot_seconds)
    user: str
    value: int               # bin, or NO_VALUE (declaration only)
    requirement: tuple | None  # the user's declaration in force at this slot (None: none yet)
    raws: tuple              # text of every input record it uses (the report first), for dead letters

    @property
    def records(self) -> int:
        """How many input records this contribution uses."""
        return len(self.raws)


class ReleaseRecord(dict):
    """A slot's release record (``schemas/release.avsc``): a dict whose type names its coder
    (``transforms.coders``)."""

    @classmethod
    def of(cls, release, stream: str, slot: int, clock, mechanism: str) -> "ReleaseRecord":
        """The record of a mechanism's ``release`` for ``stream``'s absolute ``slot`` (``clock`` gives its times)."""
        error = release.predicted_error
        return cls({
            "stream": stream, "slot": slot, "slot_start": clock.start(slot), "slot_end": clock.end(slot),
            "mechanism": mechanism, "mechanism_slot": release.slot,
            "histogram": [int(x) for x in release.histogram], "kind": release.kind.value,
            "epsilon": units_to_decimal_string(release.epsilon_units),
            "predicted_error": float(error) if math.isfinite(error) else None,
            **published_users(release), "statistic": release.estimates.value,
            "estimate": release.estimate.tolist(), "trust": release.trust.value,
            "figures": {name: float(value) for name, value in release.figures.items()}})


def published_users(release) -> dict:
    """A release's ``registered_users`` and ``reporters`` fields, each None where it is not published.

    Registered users are public under the windowed models (registrations are configuration; the neighbours differ
    by one user's values, never by whether the user exists), but not under a lifetime budget: DPI's neighbours
    differ by all of one user's records, so a count of registered users would say with certainty whether a user
    exists.  Reporters (the users charged at the slot: those who sent a report) are public under the local
    models, where the collector sees who reports (and ``predicted_error = V(epsilon, n')`` states it anyway); the
    central mechanisms have none."""
    charges = release.charges
    lifetime = issubclass(charges.requirement_kind, LifetimeRequirements)
    return {"registered_users": None if lifetime else int(charges.users.size),
            "reporters": None if release.trust is TrustModel.CENTRAL else int(np.count_nonzero(charges.units))}


class DeadLetterRecord(dict):
    """A dead letter (``schemas/dead_letter.avsc``): a dict whose type names its coder (``transforms.coders``)."""


def dead_letter(reason: str, raw: str, stage: str, stream: str | None = None,
                user: str | None = None) -> DeadLetterRecord:
    """A dead-letter record (schemas/dead_letter.avsc)."""
    return DeadLetterRecord(stream=stream, user=user, stage=stage, reason=reason, record=raw)


def pack_contributions(contributions: list) -> bytes:
    """Contribution tuples as they travel from the per-user stage to the release stage and lie in its state.

    Encoded once here, by columns (``transforms.encoding.CONTRIBUTION_ROWS``,
    versioned, no pickle), and kept as bytes in the release stage's bag: as
    tuples, Beam would encode every one and the state cache measure every one.
    """
    return CONTRIBUTION_ROWS.encode(contributions)


def unpack_contributions(packed: bytes) -> list:
    """Inverse of :func:`pack_contributions`: plain tuples in ``Contribution`` field order."""
    return CONTRIBUTION_ROWS.decode(packed)
