"""Deliberately broken mechanisms, for showing that the privacy audit has power (tests and reports only).

* :class:`ForgetfulBA`, :class:`ForgetfulPBA`: never record the last
  publication, as in the authors' code (reference_impl §4.4): no slot is ever
  nullified and, from slot ``w`` on, every publication spends ``E/2``.
* :class:`HalfScaleNoise`: draws all noise at half the scale (the wrapped
  mechanism runs with ``2E``) while it reports charges and requirements for
  ``E``; its windows look fine, but the release's evidence (the noise scale)
  shows the charges are too small.
* :class:`ForgetsOneSlot`: its sliding budget window forgets the oldest slot
  (the wrapped mechanism runs with ``w - 1``) while users asked for ``w``; it
  reports its charges truthfully, so the ledger sees the overspending too.

Each is built by a factory taking an :class:`~pipelines.audit.AuditConfig`,
as :func:`pipelines.audit.audit` expects.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np

from pipelines.audit import AuditConfig, Steppable
from transforms.mechanisms import (DynamicRequirements, FixedRequirements, HomogeneousParams, MechanismParams,
                                   Release, SlotBatch)
from transforms.mechanisms.homogeneous import BA
from transforms.mechanisms.noise import Randomness
from transforms.mechanisms.personalized import PBA
from transforms.mechanisms.requirements import Requirements
from transforms.mechanisms.run import mechanism_for


class ForgetfulBA(BA):
    """BA that never records its last publication (reference_impl §4.4)."""

    def decide(self, data, rng):
        saved = self.last_publication, self.shares_at_last_publication
        decision = super().decide(data, rng)
        self.last_publication, self.shares_at_last_publication = saved
        return decision


class ForgetfulPBA(PBA):
    """PBA that never records its last publication (reference_impl §4.4)."""

    def record(self, dc_units, publication_units, published):
        pass


def _rescaled(requirements: Requirements | None, factor: int, divide: bool, window_shift: int):
    """Requirements with budgets multiplied (or divided) by ``factor`` and windows shifted."""
    if requirements is None:
        return None
    scale = (lambda u: u // factor) if divide else (lambda u: u * factor)
    if isinstance(requirements, DynamicRequirements):
        return DynamicRequirements(requirements.backward_window + window_shift, scale(requirements.backward_units),
                                   requirements.forward_window + window_shift, scale(requirements.forward_units))
    return FixedRequirements(requirements.window + window_shift, scale(requirements.epsilon_units))


class _Misconfigured:
    """Runs ``inner`` with rewritten requirements and tells the ledger the declared ones."""

    budget_factor = 1
    window_shift = 0

    def __init__(self, inner: Steppable):
        self.inner = inner
        self.requirement_kind = inner.requirement_kind

    def step(self, batch: SlotBatch, rng: Randomness) -> Release:
        f, shift = self.budget_factor, self.window_shift
        inner = SlotBatch(batch.users, batch.values, _rescaled(batch.requirements, f, False, shift))
        release = self.inner.step(inner, rng)
        charges = release.charges
        claimed = replace(charges, cohort_dc_units=(charges.cohort_dc_units + charges.cohort_publication_units) // f,
                          cohort_publication_units=np.zeros_like(charges.cohort_publication_units),
                          cohort_requirements=_rescaled(charges.cohort_requirements, f, True, -shift),
                          waiting_requirements=_rescaled(charges.waiting_requirements, f, True, -shift),
                          declarations=batch)  # the ledger keeps what users declared, from the input
        return replace(release, epsilon_units=release.epsilon_units // f, charges=claimed)


class HalfScaleNoise(_Misconfigured):
    """Every noise draw at half the scale: the inner mechanism has ``2E``; charges are reported halved."""

    budget_factor = 2


class ForgetsOneSlot(_Misconfigured):
    """The budget window forgets its oldest slot: the inner mechanism has ``w - 1`` (needs ``w >= 2``)."""

    window_shift = -1


def _inner(name: str, config: AuditConfig, budget_factor: int = 1, window_shift: int = 0):
    """Registered mechanism ``name`` built for the rewritten requirement."""
    rewritten = replace(config, epsilon=config.epsilon * budget_factor, window=config.window + window_shift)
    return mechanism_for(name, rewritten, 2)


def half_scale_noise(name: str) -> Callable[[AuditConfig], Steppable]:
    return lambda config: HalfScaleNoise(_inner(name, config, budget_factor=2))


def forgets_one_slot(name: str) -> Callable[[AuditConfig], Steppable]:
    return lambda config: ForgetsOneSlot(_inner(name, config, window_shift=-1))


def forgetful(name: str) -> Callable[[AuditConfig], Steppable]:
    """ForgetfulBA at ``(E_i, w_i)`` or ForgetfulPBA."""
    if name == "ba":
        return lambda config: ForgetfulBA(HomogeneousParams(bins=2, epsilon=config.epsilon, window=config.window))
    if name == "pba":
        return lambda config: ForgetfulPBA(MechanismParams(bins=2))
    raise ValueError(f"no forgetful variant of {name}")


BROKEN: dict[str, Callable[[AuditConfig], Steppable]] = {
    "ba, never records the last publication": forgetful("ba"),
    "pba, never records the last publication": forgetful("pba"),
    **{f"{name}, noise at half the scale": half_scale_noise(name) for name in ("uniform", "sample", "pbd")},
    **{f"{name}, budget window forgets one slot": forgets_one_slot(name) for name in ("sample", "uniform")},
}
"""Every broken variant by a readable name."""

__all__ = ["BROKEN", "ForgetfulBA", "ForgetfulPBA", "ForgetsOneSlot", "HalfScaleNoise", "forgetful",
           "forgets_one_slot", "half_scale_noise"]
