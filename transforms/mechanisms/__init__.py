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

from transforms.mechanisms.base import HomogeneousParams, Mechanism, MechanismParams, Release, ReleaseKind
from transforms.mechanisms.batch import NO_VALUE, SlotBatch
from transforms.mechanisms.charges import (DISSIMILARITY, PUBLICATION, Charges, CohortCharges, ReporterCharges,
                                           SparseCharges)
from transforms.mechanisms.domain import Categorical, Estimate, Interval, TrustModel
from transforms.mechanisms.dynamic import DPBAParams, DynamicParams
from transforms.mechanisms.ledger import PrivacyLedger, Violation
from transforms.mechanisms.obs import ErrorModel
from transforms.mechanisms.registry import (MECHANISMS, Family, make_mechanism, mechanism_class, mechanism_for_requirements,
                                            mechanism_for_setup, names_of, params_from_options)
from transforms.mechanisms.requirements import (DynamicRequirement, DynamicRequirements, FixedRequirement,
                                                FixedRequirements, LifetimeRequirement, LifetimeRequirements)

__all__ = ["MECHANISMS", "Family", "mechanism_for_requirements", "mechanism_for_setup", "names_of",
           "params_from_options", "NO_VALUE", "DISSIMILARITY", "PUBLICATION", "Categorical", "Charges",
           "CohortCharges", "Estimate", "Interval", "TrustModel", "DPBAParams", "DynamicParams", "DynamicRequirement",
           "DynamicRequirements", "ErrorModel", "FixedRequirement", "FixedRequirements", "HomogeneousParams",
           "LifetimeRequirement", "LifetimeRequirements", "Mechanism", "MechanismParams", "PrivacyLedger", "Release",
           "ReleaseKind", "ReporterCharges", "SlotBatch", "SparseCharges", "Violation", "make_mechanism",
           "mechanism_class"]
