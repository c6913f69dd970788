"""One audit of one mechanism class: every scenario that applies to it, one after the other."""

from __future__ import annotations

import time
from typing import Collection

from pipelines.audit.lifetime import audit_lifetime, lifetime_scenario_for
from pipelines.audit.one_slot import audit_scenario, scenarios_for
from pipelines.audit.results import AuditConfig, AuditResult, ScenarioResult, randomness_for
from pipelines.audit.window import audit_window, window_scenario_for
from transforms.mechanisms import Mechanism


def audit(name: str, cls: type[Mechanism], config: AuditConfig, broken: str | None = None,
          only: str | Collection[str] | None = None) -> AuditResult:
    """Audit mechanism class ``cls`` (reported as ``name``, and ``broken`` for a broken variant).

    The one-slot scenarios of its family, then the window scenario of a local method or the lifetime
    scenario of a DPI one.  ``only`` names the one scenario to run (tests use it to spend runs where a
    check can fire); a collection names several.
    """
    chosen = (lambda name: True) if only is None else \
        (lambda name: name == only) if isinstance(only, str) else (lambda name: name in only)
    start = time.perf_counter()
    randomness = randomness_for(config)
    results: list[ScenarioResult] = []
    for index, scenario in enumerate(scenarios_for(cls)):
        if chosen(scenario.name):
            results.append(audit_scenario(cls, scenario, index, config, randomness))
    window = window_scenario_for(cls)
    if window is not None and chosen(window.name):
        results.append(audit_window(cls, window, 2, config, randomness))
    lifetime = lifetime_scenario_for(cls)
    if lifetime is not None and chosen(lifetime.name):
        results.append(audit_lifetime(cls, lifetime, 3, config, randomness))
    return AuditResult(name, broken, config, tuple(results), time.perf_counter() - start)
