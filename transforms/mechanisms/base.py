"""The one protocol every mechanism follows.

A mechanism is built from a validated frozen parameter dataclass, consumes
one slot at a time with ``step(batch, rng)`` and returns a :class:`Release`:
the histogram ``r_t``, whether it is fresh, skipped (``r_{t-1}`` repeated
because the data did not move enough) or nullified (repeated because an
earlier publication absorbed this slot's budget), the publication budget,
the predicted per-bin error, and what every registered user was charged.

All state is explicit (numpy arrays and integers), so a mechanism pickles,
and :meth:`Mechanism.to_bytes` / :meth:`Mechanism.from_bytes` round-trip it
through a plain ``.npz`` payload (no pickle) that a Beam state cell or a
checkpoint can hold.  A run resumed from saved state continues identically.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import io
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import ClassVar

import numpy as np

from transforms.mechanisms.batch import SlotBatch
from transforms.mechanisms.budget import to_epsilon, to_units
from transforms.mechanisms.charges import DISSIMILARITY, PUBLICATION, Charges, CohortCharges
from transforms.mechanisms.domain import Categorical, Domain, Estimate, TrustModel
from transforms.mechanisms.evidence import Evidence, Statistic
from transforms.mechanisms.noise import Randomness
from transforms.mechanisms.obs import ErrorModel
from transforms.mechanisms.population import Column, Population, SlotData
from transforms.mechanisms.requirements import (DynamicRequirement, DynamicRequirements, FixedRequirement,
                                                FixedRequirements, LifetimeRequirement, LifetimeRequirements,
                                                Requirements)


class ReleaseKind(str, Enum):
    """How ``r_t`` came about."""

    FRESH = "fresh"          # a new noisy histogram
    SKIPPED = "skipped"      # r_{t-1} repeated: the data did not move enough (or no budget)
    NULLIFIED = "nullified"  # r_{t-1} repeated: an earlier publication absorbed this slot


@dataclass(frozen=True, eq=False)
class Release:
    """One slot's output: an estimate of a named statistic, under the trust model it was made in."""

    slot: int
    histogram: np.ndarray     # int64 noisy counts r_t (equal to r_{t-1} unless fresh); the counts view
    kind: ReleaseKind
    epsilon_units: int        # noise budget of a fresh release (0 otherwise)
    predicted_error: float    # predicted per-bin error behind the decision (squared units)
    charges: Charges
    estimates: Estimate = Estimate.COUNTS
    trust: TrustModel = TrustModel.CENTRAL
    values: np.ndarray | None = None  # the float64 estimate, when it is not the counts themselves
    figures: Mapping[str, float] = field(default_factory=dict)
    """Named scalars a mechanism reports beside its estimate (DPI: ``eps_claimed``, ``eps_sound_upper``, ...)."""

    @property
    def epsilon(self) -> float:
        return to_epsilon(self.epsilon_units)

    @property
    def public_record(self):
        """What the slot publicly asked or drew (local and DPI families; None for the central ones): the
        ledgers check it against the method's public schedule."""
        return getattr(self.charges, "public_record", None)

    @cached_property
    def estimate(self) -> np.ndarray:
        """The released estimate as float64 (the counts, for the central histogram mechanisms)."""
        return self.histogram.astype(np.float64) if self.values is None else self.values


@dataclass(frozen=True, kw_only=True)
class MechanismParams:
    """Parameters every mechanism shares.

    ``bins`` is the histogram size d.  ``sensitivity`` is Δ, the L1 change of
    the histogram when one user is added or removed (1 for one-hot rows,
    spec §1.1; use 2 for replace-one neighbours).  ``error_model`` picks the
    noise variance used by OBS and thresholds.  ``carry_forward`` keeps a
    user's last bin in force while they do not report.  ``default_requirement``
    is given to users whose first row carries no requirement.
    """

    bins: int
    sensitivity: int = 1
    error_model: ErrorModel = ErrorModel.DISCRETE
    carry_forward: bool = False
    default_requirement: FixedRequirement | DynamicRequirement | None = None
    operational_fields: ClassVar[frozenset[str]] = frozenset()
    """Fields that set resources (memory, caches), never an output: a saved state resumes whatever they are."""

    def __post_init__(self):
        Categorical(self.bins)  # validates bins
        if isinstance(self.sensitivity, bool) or not isinstance(self.sensitivity, (int, np.integer)) \
                or self.sensitivity < 1:
            raise ValueError(f"sensitivity must be an integer >= 1, got {self.sensitivity!r}")
        try:
            object.__setattr__(self, "error_model", ErrorModel(self.error_model))
        except ValueError:
            raise ValueError(f"error_model must be one of {[m.value for m in ErrorModel]}, "
                             f"got {self.error_model!r}") from None

    @cached_property
    def domain(self) -> Domain:
        """The values a slot may carry: the histogram's bins."""
        return Categorical(self.bins)

    # -- building (the registry's classmethods: no caller switches on the parameter type) -----------------------
    @classmethod
    def fitted(cls, *, epsilon: float | None, window: int | None, max_window: int | None) -> dict:
        """The parameters of this type that a population's requirements decide (none here).

        ``epsilon`` is the smallest budget E_i and ``window`` the largest w_i of the users (or of a set-up),
        ``max_window`` the longest window anyone may declare.  A type that needs one that is missing raises a
        ValueError naming it."""
        return {}

    @classmethod
    def from_options(cls, bins: int, *, epsilon: float | None = None, window: int | None = None,
                     max_window: int | None = None, **common) -> "MechanismParams":
        """From a command line or configuration: the shared options (``carry_forward``, ``sensitivity``, ...) in
        ``common`` and whichever of ``epsilon``/``window``/``max_window`` this type takes."""
        return cls(bins=bins, **common, **cls.fitted(epsilon=epsilon, window=window, max_window=max_window))

    @classmethod
    def from_setup(cls, setup, bins: int, **common) -> "MechanismParams":
        """The way the papers run this type against an evaluation set-up (``scenarios.PaperSetup``: the static
        ``(E, w)`` the users' requirements are drawn around, and its longest window)."""
        return cls.from_options(bins, epsilon=setup.epsilon, window=setup.window, max_window=setup.max_window,
                                **common)

    @classmethod
    def from_requirements(cls, requirements: Requirements, bins: int, **common) -> "MechanismParams":
        """Parameters that honour every one of ``requirements`` (a homogeneous baseline runs at
        ``(min E_i, max w_i)``; a dynamic mechanism's ``max_window`` is the longest declared window)."""
        if requirements.width == 1:
            raise ValueError("a lifetime budget has no window to fit a windowed mechanism's parameters to")
        matrix = requirements.as_matrix()  # (w, E) pairs: one for fixed, backward and forward for dynamic
        windows, units = matrix[:, 0::2], matrix[:, 1::2]
        return cls.from_options(bins, epsilon=to_epsilon(int(units.min())), window=int(windows.max()),
                                max_window=int(windows.max()), **common)

    def kwargs(self) -> dict:
        """The fields as keyword arguments (``make_mechanism(name, **params.kwargs())`` rebuilds these)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @property
    def longest_declarable_window(self) -> int | None:
        """The longest window a user may declare to this mechanism, when its parameters bound it."""
        return None

    @property
    def shared_epsilon(self) -> float | None:
        """The one budget every user's windows get, for a mechanism that is not personalized."""
        return None

    def to_json(self) -> str:
        return json.dumps({f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}, sort_keys=True)

    def matches_json(self, saved: str) -> bool:
        """Whether parameters saved by :meth:`to_json` are these: a field the saved ones lack (added since) must
        hold its default, so states saved before a new option existed still resume; operational fields are
        not compared."""
        before, now = json.loads(saved), json.loads(self.to_json())
        for name in self.operational_fields:
            before.pop(name, None), now.pop(name, None)
        if before.keys() - now.keys():
            return False
        defaults = {f.name: _plain(f.default) for f in dataclasses.fields(self) if f.default is not dataclasses.MISSING}
        return all(before[k] == v if k in before else k in defaults and defaults[k] == v for k, v in now.items())


def _plain(value):
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
    return value


@dataclass(frozen=True, kw_only=True)
class HomogeneousParams(MechanismParams):
    """A single ``(epsilon, window)`` for every user (the non-personalized baselines)."""

    epsilon: float
    window: int

    def __post_init__(self):
        super().__post_init__()
        to_units(self.epsilon, "epsilon")
        if isinstance(self.window, bool) or not isinstance(self.window, (int, np.integer)) or self.window < 1:
            raise ValueError(f"window (w) must be an integer >= 1, got {self.window!r}")
        if self.epsilon_units // (2 * self.window) < 1:
            raise ValueError(f"epsilon={self.epsilon!r} is too small to split over window={self.window}")

    @cached_property
    def epsilon_units(self) -> int:
        return to_units(self.epsilon, "epsilon")

    @classmethod
    def fitted(cls, *, epsilon: float | None, window: int | None, max_window: int | None) -> dict:
        if epsilon is None or window is None:
            raise ValueError("homogeneous: one (epsilon, window) for everyone; give epsilon and window (the papers "
                             "use min E_i, max w_i)")
        return {"epsilon": epsilon, "window": window}

    @property
    def shared_epsilon(self) -> float | None:
        return self.epsilon


@dataclass(frozen=True)
class Decision:
    """What a mechanism decided at one slot, per cohort row."""

    kind: ReleaseKind
    histogram: np.ndarray | None      # the fresh histogram, None when repeated
    epsilon_units: int
    predicted_error: float
    dc_units: np.ndarray
    publication_units: np.ndarray
    statistics: tuple[Statistic, ...] = ()  # every noisy statistic computed from the data (evidence)


class Mechanism(abc.ABC):
    """Base class: owns the population, the slot counter and the last release."""

    name: ClassVar[str]
    requirement_kind: ClassVar[type] = FixedRequirements
    params_type: ClassVar[type[MechanismParams]] = MechanismParams
    samples_cohorts: ClassVar[bool] = True
    """False for mechanisms that never sample by cohort: they get pooled cells (one per bin)."""
    trust: ClassVar[TrustModel] = TrustModel.CENTRAL
    publishes_on_schedule: ClassVar[bool] = False
    """True for mechanisms whose fresh slots follow a fixed schedule, whatever the data (Uniform, Sample)."""
    estimates: ClassVar[Estimate] = Estimate.COUNTS

    def __init__(self, params: MechanismParams):
        if not isinstance(params, self.params_type):
            raise ValueError(f"{self.name} takes {self.params_type.__name__}, got {type(params).__name__}")
        self.params = params
        self.slot = 0
        self.last_release = np.zeros(params.bins, np.int64)
        default = params.default_requirement
        if default is not None:
            if isinstance(default, FixedRequirement) and self.requirement_kind is FixedRequirements:
                default = FixedRequirements.uniform(default, 1)
            elif isinstance(default, DynamicRequirement) and self.requirement_kind is DynamicRequirements:
                default = DynamicRequirements.uniform(default, 1)
            elif isinstance(default, LifetimeRequirement) and self.requirement_kind is LifetimeRequirements:
                default = LifetimeRequirements.uniform(default, 1)
            else:
                raise ValueError(f"default_requirement must be a "
                                 f"{self.requirement_kind.__name__[:-1]} for {self.name}")
        self.population = Population(self.requirement_kind, params.bins, self.cohort_columns(),
                                     params.carry_forward, default)

    # -- what subclasses provide ------------------------------------------------
    def cohort_columns(self) -> dict[str, Column]:
        """Per-cohort state columns this mechanism keeps (besides the requirement)."""
        return {}

    def validate_requirements(self, requirements: Requirements, users: np.ndarray | None = None) -> None:
        """Raise a ValueError naming the first requirement this mechanism cannot honour (and its user, given
        ``users``, one per row)."""

    def validate_requirement(self, requirement: FixedRequirement | DynamicRequirement | LifetimeRequirement
                             ) -> Requirements:
        """One declared requirement as a validated row of this mechanism's requirement columns.

        A fixed ``(w, E)`` declared to a dynamic mechanism is ``(w, E)`` backward and forward; a dynamic one
        declared to a fixed-requirement mechanism is refused; a lifetime budget is neither windowed form, so
        only a mechanism of lifetime requirements takes one, and nothing else."""
        lifetime = self.requirement_kind is LifetimeRequirements
        if lifetime != isinstance(requirement, LifetimeRequirement):
            raise ValueError(f"{self.name} takes a lifetime budget (lifetime:E), not windowed requirements" if lifetime
                             else f"{self.name} takes windowed requirements (w-event), not a lifetime budget")
        if lifetime:
            columns: Requirements = LifetimeRequirements.uniform(requirement, 1)
        elif isinstance(requirement, DynamicRequirement):
            if self.requirement_kind is not DynamicRequirements:
                raise ValueError(f"{self.name} takes fixed (w, epsilon) requirements, not dynamic ones")
            columns = DynamicRequirements.uniform(requirement, 1)
        else:
            fixed = FixedRequirements.uniform(requirement, 1)
            columns = fixed if self.requirement_kind is FixedRequirements else DynamicRequirements(
                fixed.window, fixed.epsilon_units, fixed.window.copy(), fixed.epsilon_units.copy())
        self.validate_requirements(columns)
        return columns

    @abc.abstractmethod
    def decide(self, data: SlotData, rng: Randomness) -> Decision:
        """Run the mechanism's algorithm for slot ``self.slot``."""

    def in_force_requirements(self) -> Requirements:
        """Requirement in force per cohort row (a mechanism may project it)."""
        return self.population.in_force()

    # -- the protocol ---------------------------------------------------------------
    def step(self, batch: SlotBatch, rng: Randomness) -> Release:
        """Consume one slot's batch and release ``r_t``; raises before changing anything on bad input."""
        data = self.admit(batch)
        decision = self.decide(data, rng)
        if decision.kind is ReleaseKind.FRESH:
            self.last_release = decision.histogram.astype(np.int64)
        memberships = self.population.memberships()
        charges = CohortCharges(
            cohort_of=memberships.cohort_of,
            cohort_parts={DISSIMILARITY: decision.dc_units, PUBLICATION: decision.publication_units},
            cohort_requirements=self.in_force_requirements(), waiting_users=memberships.waiting_users,
            waiting_requirements=memberships.waiting_requirements,
            evidence=Evidence(data.groups, decision.statistics), declarations=batch,
            default_requirement=self.population.default_requirement)
        return Release(self.slot, self.last_release.copy(), decision.kind, decision.epsilon_units,
                       decision.predicted_error, charges, self.estimates, self.trust)

    def admit(self, batch: SlotBatch) -> SlotData:
        """The first half of :meth:`step`: validate ``batch``, start the next slot and admit its users.

        Raises before changing anything on bad input.  Tests that fix a slot's decision by hand (the papers'
        worked examples) call this and then the mechanism's own allocation steps.
        """
        extent = batch.validate(self.params.domain, self.requirement_kind)
        batch = self.counted(batch)
        rows = self.population.rows_of(batch.users, extent)
        registered = self.population.validate(batch, rows, extent)
        if batch.requirements is not None:
            self.validate_requirements(batch.requirements, batch.users)
        self.slot += 1
        data = self.population.admit(batch, self.slot, rows, extent, registered, self.samples_cohorts)
        self._last_cells = data.cells
        return data

    def counted(self, batch: SlotBatch) -> SlotBatch:
        """The validated ``batch`` as the population records it: itself (a numeric method gives bins in its place)."""
        return batch

    def exact_histogram_for_evaluation(self) -> np.ndarray:
        """The TRUE histogram of the data the last step saw: NOT private.

        For measuring utility (AMRE, ...) in evaluations and tests only; never
        publish it.
        """
        cells = getattr(self, "_last_cells", None)
        return np.zeros(self.params.bins, np.int64) if cells is None else cells.histogram(self.params.bins)

    # -- state ------------------------------------------------------------------------
    def extra_state(self) -> dict[str, np.ndarray]:
        """State beyond the population (e.g. PBA's last publication slot)."""
        return {}

    def load_extra_state(self, state: dict[str, np.ndarray]) -> None:
        """Inverse of :meth:`extra_state`."""

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Every piece of state as named numpy arrays (the population's parts save their own)."""
        arrays = {"slot": np.array(self.slot), "last_release": self.last_release, **self.population.state_arrays()}
        for name, value in self.extra_state().items():
            arrays[f"extra.{name}"] = np.asarray(value)
        return arrays

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.slot = int(arrays["slot"])
        self.last_release = np.array(arrays["last_release"], np.int64)
        self.population.load_state_arrays(arrays)
        self.load_extra_state({k[6:]: np.array(v) for k, v in arrays.items() if k.startswith("extra.")})

    def to_bytes(self) -> bytes:
        """Serialize the state (not the parameters' objects) as an ``.npz`` payload."""
        buffer = io.BytesIO()
        header = json.dumps({"mechanism": self.name, "params": self.params.to_json()})
        np.savez(buffer, __header__=np.array(header), **self.state_arrays())
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, params: MechanismParams, payload: bytes) -> "Mechanism":
        """Rebuild a mechanism from :meth:`to_bytes` output and the same parameters."""
        with np.load(io.BytesIO(payload), allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        header = json.loads(str(arrays.pop("__header__")))
        if header["mechanism"] != cls.name:
            raise ValueError(f"state was saved by {header['mechanism']}, not {cls.name}")
        if not params.matches_json(header["params"]):
            raise ValueError("state was saved with different parameters")
        mechanism = cls(params)
        mechanism.load_state_arrays(arrays)
        return mechanism


@functools.lru_cache(maxsize=1024)
def same_for_every_row(rows: int, units: int) -> np.ndarray:
    """One charge for every cohort row, read-only (charges repeat from slot to slot)."""
    charges = np.full(rows, units, np.int64)
    charges.flags.writeable = False
    return charges


def window_sums(history: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per row, the sum of the first ``lengths[row]`` history columns (0 when length <= 0)."""
    if history.shape[1] == 0:
        return np.zeros(history.shape[0], np.int64)
    mask = np.arange(history.shape[1])[None, :] < np.asarray(lengths)[:, None]
    return np.where(mask, history, 0).sum(axis=1)


def is_fresh_publication(scaled_dissimilarity: int, bins: int, threshold: float) -> bool:
    """``dis > threshold`` with ``dis = scaled/d`` compared without dividing."""
    return math.isfinite(threshold) and scaled_dissimilarity > bins * threshold
