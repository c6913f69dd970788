"""The Beam-free mechanism core: personalized w-event privacy for stream histograms.

Everything here is pure numpy and runs in a plain loop::

    from transforms.mechanisms import make_mechanism, SlotBatch, FixedRequirements
    from transforms.mechanisms.noise import secure_randomness

    pbd = make_mechanism("pbd", bins=2)
    release = pbd.step(SlotBatch.of(users=[0, 1], values=[1, 0],
                                    requirements=FixedRequirements.of([10, 20], [1.0, 0.5])),
                       secure_randomness())

The same objects run inside the Beam ``ReleaseController``.
"""

from __future__ import annotations

import dataclasses

from transforms.mechanisms.adaptive import Adaptive
from transforms.mechanisms.base import HomogeneousParams, Mechanism, MechanismParams, Release, ReleaseKind
from transforms.mechanisms.batch import NO_VALUE, SlotBatch
from transforms.mechanisms.charges import (DISSIMILARITY, PUBLICATION, Charges, CohortCharges, ReporterCharges,
                                           SparseCharges)
from transforms.mechanisms.domain import Categorical, Estimate, Interval, TrustModel
from transforms.mechanisms.dynamic import DYNAMIC, DPBAParams, DynamicParams
from transforms.mechanisms.homogeneous import HOMOGENEOUS
from transforms.mechanisms.ledger import PrivacyLedger, Violation
from transforms.mechanisms.obs import ErrorModel
from transforms.mechanisms.personalized import PERSONALIZED
from transforms.mechanisms.requirements import (DynamicRequirement, DynamicRequirements, FixedRequirement,
                                                FixedRequirements, LifetimeRequirement, LifetimeRequirements)

MECHANISMS: dict[str, type[Mechanism]] = {**HOMOGENEOUS, **PERSONALIZED, **DYNAMIC, Adaptive.name: Adaptive}
"""Every registered mechanism by its lower-case name."""


def mechanism_class(name: str) -> type[Mechanism]:
    """The mechanism class registered as ``name`` (case-insensitive)."""
    try:
        return MECHANISMS[name.lower()]
    except KeyError:
        raise ValueError(f"unknown mechanism {name!r}; choose one of {', '.join(MECHANISMS)}") from None


def make_mechanism(name: str, **params) -> Mechanism:
    """Build mechanism ``name`` from keyword parameters (validated by its params dataclass)."""
    cls = mechanism_class(name)
    accepted = {f.name for f in dataclasses.fields(cls.params_type)}
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise ValueError(f"{name} does not take {', '.join(unknown)}; it takes {', '.join(sorted(accepted))}")
    return cls(cls.params_type(**params))


__all__ = ["DISSIMILARITY", "MECHANISMS", "NO_VALUE", "PUBLICATION", "Categorical", "Charges", "CohortCharges", "Estimate", "Interval", "TrustModel", "DPBAParams", "DynamicParams", "DynamicRequirement", "DynamicRequirements",
           "ErrorModel", "FixedRequirement", "FixedRequirements", "HomogeneousParams", "LifetimeRequirement",
           "LifetimeRequirements", "Mechanism", "MechanismParams", "PrivacyLedger", "Release", "ReleaseKind",
           "ReporterCharges", "SlotBatch", "SparseCharges", "Violation",
           "make_mechanism", "mechanism_class"]
