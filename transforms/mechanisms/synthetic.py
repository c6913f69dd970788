"""Synthetic binary streams of the papers' experiments (spec section 5.1).

Each of ``N`` users holds a value in ``{0, 1}`` at every slot ``t = 1..T``;
the value is 1 with probability ``p_t``, so the true histogram of a slot is
``[#zeros, #ones]`` (``d = 2`` bins).  Three probability paths are used:

* **Sin**:  ``p_t = A sin(w t) + h`` with ``A = 0.05, w = 0.01, h = 0.075``.
* **Log**:  ``p_t = A / (1 + exp(-b t))`` with ``A = 0.25, b = 0.01``.
* **TLNS**: ``p_t = p_{t-1} + N(0, sigma^2)`` with ``sigma = 0.0025`` and
  ``p_0 = 0.05``, clipped to ``[0, 1]`` after every step; the clipped value is
  what the next step starts from.

The authors' reference code rounds every ``p_t`` to two decimals and starts
TLNS at ``p_0 = 0.5``; ``round_to_cents=True`` (and ``initial=0.5``) reproduce
that variant.  The defaults follow the paper.

LDP-IDS (spec ``ldp_ids.md`` §8.1, TV-10) uses the same three paths with two
differences: its **LNS** is the walk redrawn, not clipped, until every
``p_t`` lies above a floor (:func:`lns_probabilities`, trap T14), and a slot
holds *exactly* ``round(p_t N)`` ones on an independent uniform subset of
the users (:func:`exact_count_stream`).

This is data generation, not privacy noise, so all randomness comes from the
caller's :class:`numpy.random.Generator` and is reproducible per seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from numbers import Integral, Real
from types import MappingProxyType

import numpy as np

StreamGenerator = Callable[[int, np.random.Generator], np.ndarray]
"""Maps ``(slots, rng)`` to a float64 array of per-slot probabilities."""


@dataclass(frozen=True)
class TlnsPath:
    """A TLNS probability path and how many of its slots had to be clipped.

    ``clipped_slots`` counts the slots ``t`` whose unclipped value
    ``p_{t-1} + noise`` fell outside ``[0, 1]``.
    """

    probabilities: np.ndarray
    clipped_slots: int


def sin_probabilities(
    slots: int,
    amplitude: float = 0.05,
    frequency: float = 0.01,
    offset: float = 0.075,
    round_to_cents: bool = False,
) -> np.ndarray:
    """Return ``p_t = amplitude * sin(frequency * t) + offset`` for ``t = 1..slots``.

    Index 0 of the result is ``t = 1``.  With ``round_to_cents`` every value
    is rounded to two decimals, as in the authors' reference code.
    """
    slots = _require_positive_int(slots, "slots")
    amplitude = _require_finite(amplitude, "amplitude")
    frequency = _require_finite(frequency, "frequency")
    offset = _require_finite(offset, "offset")
    times = np.arange(1, slots + 1, dtype=np.float64)
    probabilities = amplitude * np.sin(frequency * times) + offset
    if not np.all((probabilities >= 0.0) & (probabilities <= 1.0)):
        raise ValueError(
            f"amplitude={amplitude!r} and offset={offset!r} must keep every probability "
            f"in [0, 1], got range [{float(probabilities.min())!r}, "
            f"{float(probabilities.max())!r}]"
        )
    return _maybe_round(probabilities, round_to_cents)


def log_probabilities(
    slots: int,
    amplitude: float = 0.25,
    rate: float = 0.01,
    round_to_cents: bool = False,
) -> np.ndarray:
    """Return the logistic path ``p_t = amplitude / (1 + exp(-rate * t))``.

    Index 0 of the result is ``t = 1``.  With ``round_to_cents`` every value
    is rounded to two decimals, as in the authors' reference code.
    """
    slots = _require_positive_int(slots, "slots")
    amplitude = _require_finite(amplitude, "amplitude")
    rate = _require_finite(rate, "rate")
    if not 0.0 <= amplitude <= 1.0:
        raise ValueError(f"amplitude must be in [0, 1], got {amplitude!r}")
    times = np.arange(1, slots + 1, dtype=np.float64)
    # 1/(1+e^{-x}) written as 0.5(1+tanh(x/2)): no overflow for any x
    probabilities = amplitude * 0.5 * (1.0 + np.tanh(0.5 * rate * times))
    return _maybe_round(probabilities, round_to_cents)


def tlns_probabilities(
    slots: int,
    rng: np.random.Generator,
    initial: float = 0.05,
    sigma: float = 0.0025,
    round_to_cents: bool = False,
) -> TlnsPath:
    """Return a clipped Gaussian random walk ``p_t = clip(p_{t-1} + N(0, sigma^2))``.

    The walk starts at ``p_0 = initial`` (the paper uses 0.05, the reference
    code 0.5) and index 0 of the result is ``t = 1``.  The walk itself always
    evolves on unrounded values; ``round_to_cents`` only rounds the returned
    probabilities to two decimals, so ``clipped_slots`` does not depend on it.
    """
    slots = _require_positive_int(slots, "slots")
    _require_generator(rng)
    initial = _require_finite(initial, "initial")
    sigma = _require_finite(sigma, "sigma")
    if not 0.0 <= initial <= 1.0:
        raise ValueError(f"initial must be in [0, 1], got {initial!r}")
    if sigma < 0.0:
        raise ValueError(f"sigma must be non-negative, got {sigma!r}")

    increments = rng.normal(0.0, sigma, size=slots)
    probabilities = np.empty(slots, dtype=np.float64)
    clipped_slots = 0
    current = initial
    # Sequential on purpose: each clip changes where the next step starts.
    for index, increment in enumerate(increments.tolist()):
        current += increment
        if current < 0.0:
            current = 0.0
            clipped_slots += 1
        elif current > 1.0:
            current = 1.0
            clipped_slots += 1
        probabilities[index] = current
    return TlnsPath(_maybe_round(probabilities, round_to_cents), clipped_slots)


def binary_stream(
    probabilities: np.ndarray, users: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    """Yield, per slot, an int64 array of every user's value (0 or 1).

    Each user's value at slot ``t`` is drawn independently with
    ``P(1) = probabilities[t]``.  Arguments are validated immediately, before
    the first slot is requested.  Uniforms are drawn a block of slots at a
    time (the same numbers, in the same order, as one draw per slot), so the
    stream runs ahead of the slots yielded: ``rng`` is the stream's own.
    """
    checked = _require_probability_path(probabilities)
    users = _require_positive_int(users, "users")
    _require_generator(rng)
    return _draw_slots(checked, users, rng)


_BLOCK_VALUES = 1 << 19
"""About how many values one block of slots draws (a few MB): fewer, larger draws are faster."""


def _draw_slots(
    probabilities: np.ndarray, users: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    block = max(1, _BLOCK_VALUES // users)
    for first in range(0, probabilities.size, block):
        chunk = probabilities[first:first + block]
        # rng.random is in [0, 1): p = 0 never yields 1 and p = 1 always does.
        yield from (rng.random((chunk.size, users)) < chunk[:, None]).astype(np.int64)


@dataclass(frozen=True)
class LnsPath:
    """An LDP-IDS LNS path: the first walk of ``attempts`` drawn that stayed in ``(floor, 1)``."""

    probabilities: np.ndarray
    attempts: int
    floor: float


def lns_probabilities(
    slots: int,
    rng: np.random.Generator,
    initial: float = 0.05,
    sigma: float = 0.0025,
    floor: float = 0.01,
    max_attempts: int = 10_000,
) -> LnsPath:
    """LDP-IDS's LNS (spec ``ldp_ids.md`` §8.1, trap T14): the random walk of :func:`tlns_probabilities`, redrawn
    from ``rng`` until every ``p_t`` lies strictly between ``floor`` and 1 (no slot clipped).

    Near-zero ``p_t`` makes relative errors explode, and about half the paper's walks (``sigma = 0.0025``, 800
    slots) leave ``[0, 1]``; redrawing keeps the walk's law conditioned on staying above the floor.  The caller
    records ``rng``'s seed; ``attempts`` says how many walks it took.
    """
    floor = _require_finite(floor, "floor")
    if not 0.0 <= floor < initial:
        raise ValueError(f"floor must lie in [0, initial={initial!r}), got {floor!r}")
    max_attempts = _require_positive_int(max_attempts, "max_attempts")
    for attempt in range(1, max_attempts + 1):
        path = tlns_probabilities(slots, rng, initial, sigma)
        if path.clipped_slots == 0 and path.probabilities.min() > floor and path.probabilities.max() < 1.0:
            return LnsPath(path.probabilities, attempt, floor)
    raise ValueError(f"no LNS walk of {slots} slots with sigma={sigma!r} stayed above floor={floor!r} in "
                     f"{max_attempts} attempts; lower the floor or sigma")


def exact_count_stream(
    probabilities: np.ndarray, users: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    """Yield, per slot, an int64 array of every user's value: exactly ``round(p_t · users)`` ones (halves round
    up) on a uniform subset drawn afresh, independently, at every slot (spec ``ldp_ids.md`` §8.1, TV-10).

    Arguments are validated immediately, before the first slot is requested.
    """
    _require_generator(rng)
    return _exact_slots(exact_counts(probabilities, users), users, rng)


def exact_counts(probabilities: np.ndarray, users: int) -> np.ndarray:
    """Per slot, how many of ``users`` hold 1 in :func:`exact_count_stream`: ``round(p_t · users)``, halves up."""
    checked = _require_probability_path(probabilities)
    users = _require_positive_int(users, "users")
    return np.floor(checked * users + 0.5).astype(np.int64)


def _exact_slots(ones: np.ndarray, users: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    for count in ones.tolist():
        values = np.zeros(users, np.int64)
        values[rng.choice(users, size=count, replace=False)] = 1
        yield values


STREAMS: Mapping[str, StreamGenerator] = MappingProxyType(
    {
        "sin": lambda slots, rng: sin_probabilities(slots),
        "log": lambda slots, rng: log_probabilities(slots),
        "tlns": lambda slots, rng: tlns_probabilities(slots, rng).probabilities,
    }
)
"""The paper's three streams with their default parameters, by name."""


def stream_probabilities(name: str, slots: int, rng: np.random.Generator) -> np.ndarray:
    """Return the probability path of the named stream (``"sin"``, ``"log"``, ``"tlns"``)."""
    try:
        generator = STREAMS[name]
    except (KeyError, TypeError):
        valid = ", ".join(sorted(STREAMS))
        raise ValueError(f"unknown stream name {name!r}; valid names are: {valid}") from None
    return generator(slots, rng)


def _require_positive_int(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value!r}")
    return int(value)


def _require_finite(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _require_generator(rng: np.random.Generator) -> None:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")


def _require_probability_path(probabilities: np.ndarray) -> np.ndarray:
    try:
        values = np.array(probabilities, dtype=np.float64)  # a copy, safe from later edits
    except (TypeError, ValueError) as error:
        raise ValueError(f"probabilities must be numeric: {error}") from None
    if values.ndim != 1:
        raise ValueError(f"probabilities must be one-dimensional, got shape {values.shape}")
    if values.size < 1:
        raise ValueError("probabilities must contain at least one slot")
    if not np.all(np.isfinite(values)):
        raise ValueError("probabilities must be finite (no NaN or infinity)")
    if not np.all((values >= 0.0) & (values <= 1.0)):
        raise ValueError(
            f"probabilities must be in [0, 1], "
            f"got range [{float(values.min())!r}, {float(values.max())!r}]"
        )
    return values


def _maybe_round(probabilities: np.ndarray, round_to_cents: bool) -> np.ndarray:
    return np.round(probabilities, 2) if round_to_cents else probabilities
