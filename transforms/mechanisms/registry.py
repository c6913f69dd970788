"""Every mechanism by name, and the one place that tells their kinds apart.

Callers build a mechanism from a name and where its parameters come from
(keyword arguments, a command line's options, an evaluation set-up, or the
requirements it must honour); the parameter types' classmethods
(:meth:`~transforms.mechanisms.base.MechanismParams.from_options`,
``from_setup``, ``from_requirements``) decide what each kind needs.  What
kind of requirements a mechanism takes is its :class:`Family`, decided here
once; nothing outside this module switches on a mechanism's or a parameter
object's type.
"""

from __future__ import annotations

import dataclasses
from enum import Enum

from transforms.mechanisms.adaptive import Adaptive, DynamicAdaptive
from transforms.mechanisms.base import HomogeneousParams, Mechanism, MechanismParams
from transforms.mechanisms.dpi.stream import DPI
from transforms.mechanisms.dynamic import DYNAMIC
from transforms.mechanisms.homogeneous import HOMOGENEOUS
from transforms.mechanisms.ldp.budget_division import BUDGET_DIVISION
from transforms.mechanisms.ldp.extensions import EXTENSIONS
from transforms.mechanisms.ldp.mean import MEAN_METHODS
from transforms.mechanisms.ldp.personalized import PLBU
from transforms.mechanisms.ldp.population_division import POPULATION_DIVISION
from transforms.mechanisms.numeric.streams import NUMERIC_STREAMS
from transforms.mechanisms.personalized import PERSONALIZED
from transforms.mechanisms.requirements import DynamicRequirements, LifetimeRequirements, Requirements

MECHANISMS: dict[str, type[Mechanism]] = {**HOMOGENEOUS, **PERSONALIZED, **DYNAMIC, Adaptive.name: Adaptive,
                                          DynamicAdaptive.name: DynamicAdaptive, **BUDGET_DIVISION,
                                          **POPULATION_DIVISION, PLBU.name: PLBU, **EXTENSIONS, **MEAN_METHODS,
                                          **NUMERIC_STREAMS, **DPI}
"""Every registered mechanism by its lower-case name."""

ALIASES: dict[str, str] = {"sw": "sw-direct"}
"""Other names :func:`mechanism_class` accepts (the issue's command lines name SW-direct ``sw``)."""


class Family(str, Enum):
    """What a mechanism takes from its users, which decides the streams and set-ups it is run with."""

    FIXED = "fixed"              # a personal (w_i, E_i) per user: PBD, PBA, adaptive
    DYNAMIC = "dynamic"          # (w_B, E_B, w_F, E_F) declared at any slot: DPBD, DPBA
    HOMOGENEOUS = "homogeneous"  # one (E, w) for everyone, every declaration within it: BD, BA, Uniform, Sample
    LIFETIME = "lifetime"        # one lifetime budget E per user, never replenished: DPI

    @classmethod
    def of(cls, mechanism: str | type[Mechanism]) -> "Family":
        mechanism = mechanism_class(mechanism) if isinstance(mechanism, str) else mechanism
        if mechanism.requirement_kind is DynamicRequirements:
            return cls.DYNAMIC
        if mechanism.requirement_kind is LifetimeRequirements:
            return cls.LIFETIME
        return cls.HOMOGENEOUS if issubclass(mechanism.params_type, HomogeneousParams) else cls.FIXED


def mechanism_class(name: str) -> type[Mechanism]:
    """The mechanism class registered as ``name`` or one of its :data:`ALIASES` (case-insensitive)."""
    try:
        return MECHANISMS[ALIASES.get(name.lower(), name.lower())]
    except KeyError:
        raise ValueError(f"unknown mechanism {name!r}; choose one of {', '.join(MECHANISMS)}") from None


def names_of(family: Family) -> list[str]:
    """The registered mechanisms of ``family``, in registration order."""
    return [name for name, cls in MECHANISMS.items() if Family.of(cls) is family]


def make_mechanism(name: str, **params) -> Mechanism:
    """Build mechanism ``name`` from keyword parameters (validated by its params dataclass)."""
    cls = mechanism_class(name)
    accepted = {f.name for f in dataclasses.fields(cls.params_type)}
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise ValueError(f"{name} does not take {', '.join(unknown)}; it takes {', '.join(sorted(accepted))}")
    return cls(cls.params_type(**params))


def params_from_options(name: str, bins: int, **options) -> MechanismParams:
    """``name``'s parameters from a command line's options (``epsilon``/``window``/``max_window`` where its kind
    takes them, the shared ones as given)."""
    return mechanism_class(name).params_type.from_options(bins, **options)


def mechanism_for_setup(name: str, setup, bins: int, **common) -> Mechanism:
    """``name`` built the way the papers run it against an evaluation set-up (``scenarios.PaperSetup``)."""
    cls = mechanism_class(name)
    return cls(cls.params_type.from_setup(setup, bins, **common))


def mechanism_for_requirements(name: str, requirements: Requirements, bins: int, **common) -> Mechanism:
    """``name`` built to honour every one of ``requirements`` (homogeneous ones at ``(min E_i, max w_i)``)."""
    cls = mechanism_class(name)
    return cls(cls.params_type.from_requirements(requirements, bins, **common))
