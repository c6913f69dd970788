"""What the numeric per-user client stage (``transforms.numeric_clients``) runs with: :class:`ClientStageConfig`,
validated at construction (the registered mechanism built once), and the ledger rules it implies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from transforms.declarations import RequirementPolicy
from transforms.mechanisms import make_mechanism
from transforms.mechanisms.numeric.streams import NUMERIC_STREAMS
from transforms.numeric_events import NumericDomain
from transforms.mechanisms.public_schedule.numeric_plan import NumericPlan
from transforms.numeric_ledger import LedgerRules
from transforms.numeric_user_methods import UserMethod, user_method
from transforms.release_range import ReleaseRange
from transforms.slotting import SlotClock


CLIENT_METHODS = tuple(NUMERIC_STREAMS)
"""The registered numeric methods whose client runs in the per-user stage: all of them."""
ACCOUNTINGS = ("strict", "paper")


@dataclass(frozen=True)
class ClientStageConfig:
    """What the client stage needs; validated (and the registered mechanism built once) at construction."""

    mechanism: str
    domain: NumericDomain
    params: dict
    clock: SlotClock
    policy: RequirementPolicy = field(default_factory=RequirementPolicy)
    insecure_seed: int | None = None
    accounting: str = "strict"
    not_w_event_private: bool = False
    release_range: ReleaseRange | None = None  # the public slots released and charged; None: the data's
    evaluate: bool = False  # also emit each slot's holders' true grid values (NOT private: --evaluate only)

    def __post_init__(self):
        if self.mechanism not in CLIENT_METHODS:
            raise ValueError(f"the per-user client stage runs {', '.join(CLIENT_METHODS)}, not {self.mechanism}")
        if not isinstance(self.domain, NumericDomain):
            raise ValueError(f"domain must be a NumericDomain, got {type(self.domain).__name__}")
        if self.insecure_seed is not None and (not isinstance(self.insecure_seed, int) or self.insecure_seed < 0):
            raise ValueError(f"insecure_seed must be a non-negative integer, got {self.insecure_seed!r}")
        if self.accounting not in ACCOUNTINGS:
            raise ValueError(f"accounting must be one of {ACCOUNTINGS}, got {self.accounting!r}")
        if self.release_range is not None and not isinstance(self.release_range, ReleaseRange):
            raise ValueError(f"release_range must be a ReleaseRange, got {self.release_range!r}")
        if self.crowd is not None and self.mechanism == "topl":
            raise ValueError("topl: the crowd distribution is not in the per-user stage (its reports are de-biased "
                             "centrally): run without --per-user-clients")
        method = self.method()
        if not method.w_event_private and not self.not_w_event_private:
            raise ValueError(f"{self.mechanism} with accounting={self.accounting!r} is not w-event private on a "
                             "stream (trap T3: a window touches ceil((w-1)/L) + 1 segments plus the memory): use "
                             "accounting='strict' or not_w_event_private=True")

    @property
    def crowd(self) -> tuple[int, int] | None:
        """``(crowd_window, crowd_bins)`` when the releases are the crowd distribution, else None."""
        window, bins = self.params.get("crowd_window"), self.params.get("crowd_bins")
        return None if window is None and bins is None else (window, bins)

    @property
    def label(self) -> str:
        """The mechanism's name as a checkpoint records it (the PP-S family's paper accounting named)."""
        return self.mechanism if self.accounting == "strict" else f"{self.mechanism} (accounting {self.accounting})"

    def build(self):
        """The registered mechanism (grid units): its client, requirement validation and parameters."""
        return make_mechanism(self.mechanism, bins=1, **self.params, **self.domain.mechanism_params())

    def method(self) -> UserMethod:
        """What the stage runs per user (``transforms.numeric_user_methods``)."""
        return user_method(self.build(), self.accounting)

    @property
    def opt_in(self) -> str | None:
        """The flags that accepted a configuration that is not w-event private (None: none given)."""
        if not self.not_w_event_private:
            return None
        return "--sampling-accounting paper --not-w-event-private" if self.accounting == "paper" \
            else "--not-w-event-private"

    def ledger_rules(self, max_window: int) -> LedgerRules:
        """What the ledger stage checks the reports with: the method's public schedule (its own rules, built from
        the public parameters, not from the client's bookkeeping), the depth and the opt-in."""
        method = self.method()
        plan = NumericPlan.of(self.mechanism, json.loads(self.build().params.to_json()),
                              getattr(method, "segment", None), self.accounting)
        return LedgerRules(plan, max_window, self.opt_in)
