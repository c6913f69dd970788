"""PP-S, APP-S, CAPP-S and the naive Sampling baseline (spec ``ipp_app_capp.md`` §3.6): fewer, richer reports.

A query ``x_i..x_j`` of ``n`` slots is cut into ``n_s`` segments of ``L = floor(n / n_s)`` slots (the last one
also takes the ``n - n_s·L`` leftover slots, as the paper's footnote says); each segment's mean is reported
once, at the segment's end, through the base client (IPP for PP-S, APP, CAPP, or plain SW for Sampling) at
the per-sample budget ``ε / n_w``, and the release is the piecewise-constant expansion of the reports.

**The budget per sample (trap T3).**  The paper's Alg. 3 divides by ``min(floor(n / n_s), w)``, which
contradicts its own Fig. 3 and Thm 6; the reference code's sampling flag reports every slot at ``ε / t2``
(it overspends the window budget up to 15×) and is not implemented.  Two readings are:

* ``accounting="paper"`` (the paper's intent): ``n_w = min(n_s, ceil(w / L))`` report instants in any ``w``
  consecutive slots;
* ``accounting="strict"`` (default): a segment mean depends on every slot of its segment, so a change within
  ``w`` slots can touch ``ceil((w - 1)/L) + 1`` segments, and with a deviation memory of ``h`` samples
  ``h`` further reports: ``ε / min(n_s, n_w + h)``.

Every result says whether it is w-event private, from the exact window check of its charges
(:func:`~transforms.mechanisms.numeric.perturbation.worst_window_units`), not from the reading chosen.

**Choice of n_s** (Eqs 12-13): the ``n_s`` in ``2..n`` minimising ``J(n_s) = μ4 - σ⁴(n_s - 3)/(n_s - 1)``, the
moments of ``SW(1)`` at the per-sample budget the accounting gives (the paper prints σ² for σ⁴: a typo, the
reference uses σ⁴).  Each query runs from a fresh client state (the reference protocol); APP and CAPP remember
every deviation within the query unless ``memory`` bounds it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np

from transforms.mechanisms.budget import to_units
from transforms.mechanisms.noise import Randomness, secure_randomness
from transforms.mechanisms.numeric.perturbation import BOUND_MODES, Client, build_client, worst_window_units
from transforms.mechanisms.numeric.square_wave import DEFAULT_GRID_BITS, moments_at_one, sw_parameters

BASES = ("none", "ipp", "app", "capp")
ACCOUNTINGS = ("strict", "paper")


def samples_per_window(segment: int, window: int, samples: int, accounting: str) -> int:
    """``n_w``: how many reports one change within ``window`` slots can touch (module doc), before memory."""
    if accounting == "paper":
        return min(samples, -(-window // segment))
    if accounting == "strict":
        return min(samples, -(-(window - 1) // segment) + 1)
    raise ValueError(f"accounting must be one of {ACCOUNTINGS}, got {accounting!r}")


def sample_divisor(length: int, samples: int, window: int, accounting: str, memory: int | None) -> int:
    """How many reports share the window budget for ``samples`` segments of a ``length``-slot query (memory
    ``None``: every earlier sample of the query)."""
    n_w = samples_per_window(length // samples, window, samples, accounting)
    if accounting == "paper":
        return n_w
    return min(samples, n_w + (samples if memory is None else memory))


def sampling_objective(samples: int, epsilon: float) -> float:
    """``J(n_s) = μ4 - σ⁴(n_s - 3)/(n_s - 1)`` with the moments of ``SW(1)`` at ``epsilon`` (Eq. 13, σ⁴)."""
    if samples < 2:
        raise ValueError("J is undefined for fewer than 2 samples")
    _, variance, fourth = moments_at_one(*sw_parameters(epsilon))
    return fourth - variance ** 2 * (samples - 3) / (samples - 1)


def choose_samples(length: int, window: int, epsilon: float, accounting: str = "strict",
                   memory: int | None = 0) -> int:
    """The ``n_s`` in ``2..length`` minimising :func:`sampling_objective` at the accounting's per-sample budget
    (the smallest on a tie; 1 for a one-slot query)."""
    if length < 2:
        return 1
    costs = [sampling_objective(s, epsilon / sample_divisor(length, s, window, accounting, memory))
             for s in range(2, length + 1)]
    return 2 + int(np.argmin(costs))


@dataclass(frozen=True)
class SamplingParams:
    """PP-S over a base client (``base``: ``none`` = the Sampling baseline, ``ipp`` = PP-S, ``app``, ``capp``).

    ``samples``: ``n_s`` (None: :func:`choose_samples` per query length); ``memory``: APP/CAPP's memory in
    samples (None: the whole query, as the reference); the rest as in ``PerturbationParams``.
    """

    epsilon: float
    window: int
    base: str = "capp"
    samples: int | None = None
    accounting: str = "strict"
    memory: int | None = None
    bound_mode: str = "ref"
    delta: float | None = None
    grid_bits: int = DEFAULT_GRID_BITS

    def __post_init__(self):
        to_units(self.epsilon, "epsilon")
        for name in ("window", "samples", "memory"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))
                                      or value < 1):
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.base not in BASES:
            raise ValueError(f"base must be one of {BASES}, got {self.base!r}")
        if self.accounting not in ACCOUNTINGS:
            raise ValueError(f"accounting must be one of {ACCOUNTINGS} (the reference's n_s overspends: not "
                             f"offered), got {self.accounting!r}")
        if self.memory is not None and self.base not in ("app", "capp"):
            raise ValueError("memory applies to APP and CAPP only")
        if self.delta is not None and self.base != "capp":
            raise ValueError("delta is CAPP's clip parameter")
        if self.bound_mode not in BOUND_MODES:
            raise ValueError(f"bound_mode must be one of {BOUND_MODES}, got {self.bound_mode!r}")

    @cached_property
    def epsilon_units(self) -> int:
        return to_units(self.epsilon, "epsilon")

    @property
    def sample_memory(self) -> int | None:
        """How many earlier samples a report depends on (None: all of the query's)."""
        return {"none": 0, "ipp": 1}.get(self.base, self.memory)

    def samples_for(self, length: int) -> int:
        samples = self.samples or choose_samples(length, self.window, self.epsilon, self.accounting,
                                                 self.sample_memory)
        if samples > length:
            raise ValueError(f"{samples} samples do not fit a query of {length} slots")
        return samples

    def client(self, length: int, samples: int) -> Client:
        """The base client at the per-sample budget of a ``length``-slot query cut into ``samples`` segments."""
        divisor = sample_divisor(length, samples, self.window, self.accounting, self.sample_memory)
        units = self.epsilon_units // divisor
        if units < 1:
            raise ValueError(f"epsilon={self.epsilon!r} is too small to split over {divisor} samples")
        memory = self.sample_memory
        return build_client(units, self.grid_bits, memory or 0, memory is None, None, self.base == "capp",
                            self.bound_mode, self.delta)


class Sampled(NamedTuple):
    """A block of queries' sampled releases: the reports per segment and their expansion over the slots."""

    samples: np.ndarray           # (queries, n_s) the reports of the segment means, [0, 1] units
    expanded: np.ndarray          # (queries, n) each slot's segment report (piecewise constant)
    charges: np.ndarray           # (queries, n) int64 budget units, at each segment's last slot
    first_dependency: np.ndarray  # (queries, n) the first slot each report depends on
    segment_length: int
    w_event_private: bool


def segment_starts(length: int, samples: int) -> np.ndarray:
    """Start slot of each of ``samples`` segments of ``floor(length/samples)`` slots (the last takes the rest)."""
    return np.arange(samples) * (length // samples)


def pp_sampling(params: SamplingParams, queries, rng: Randomness | None = None) -> Sampled:
    """Each row of ``queries`` (values in ``[0, 1]``) released by PP-S from a fresh state (module doc)."""
    x = np.asarray(queries, np.float64)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"queries must be a non-empty (queries, slots) array, got shape {x.shape}")
    length = x.shape[1]
    samples = params.samples_for(length)
    client = params.client(length, samples)
    starts = segment_starts(length, samples)
    means = np.add.reduceat(x, starts, axis=1) / np.diff(np.append(starts, length))
    reports, _ = client.run(means, rng or secure_randomness())
    segment_of = np.repeat(np.arange(samples), np.diff(np.append(starts, length)))
    ends = np.append(starts[1:], length) - 1
    charges = np.zeros(length, np.int64)
    charges[ends] = client.report_units
    memory = params.sample_memory
    first = np.zeros(length, np.int64)
    reach = np.arange(samples) if memory is None else np.minimum(np.arange(samples), memory)
    first[ends] = starts[np.arange(samples) - reach]
    first[charges == 0] = np.arange(length)[charges == 0]  # no report: nothing depends on anything
    charges, first = np.broadcast_to(charges, x.shape).copy(), np.broadcast_to(first, x.shape).copy()
    private = bool(worst_window_units(charges[:1], first[:1], params.window)[0] <= params.epsilon_units)
    return Sampled(reports, reports[:, segment_of], charges, first, length // samples, private)

