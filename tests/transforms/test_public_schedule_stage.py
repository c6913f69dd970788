"""The public schedule in the Beam path: the release stage's least column and the per-user ledger (the watch loop
runs the same stream engine and ``check_windows``).

Each broken variant is a public method replaced for the test (``monkeypatch``); the charges it states agree with
its evidence, so the evidence-only least of before passes it (asserted by re-deriving that least here).
"""

from __future__ import annotations

import numpy as np
import pytest

from beam_helpers import SLOT
from transforms.engine import ChargeChunk, ReleaseConfig, StreamEngine
from transforms.ledger import charge_chunk, check_windows, empty_tail
from transforms.mechanisms import FixedRequirements, LifetimeRequirements, SlotBatch, make_mechanism
from transforms.mechanisms.dpi.stream import SoundDPI
from transforms.mechanisms.charges import least_charges_of_registered
from transforms.mechanisms.ldp.budget_division import LBU
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.public_schedule import LAW_MISMATCH, OFF_SCHEDULE
from transforms.slotting import SlotClock


def _violations(mechanism: str, params: dict, declaration: tuple, slots: int = 8, users: int = 12) -> list[dict]:
    run = StreamEngine.load(ReleaseConfig(mechanism, params, SlotClock(SLOT), insecure_seed=3), "s", None)
    rows = [(slot, f"u{i:02d}", i % 3, declaration if slot == 0 else None, (f"{slot}.{i}",))
            for slot in range(slots) for i in range(users)]
    outputs = list(run.release_until(slots - 1, rows, final=True))
    return [v for chunk in outputs if isinstance(chunk, ChargeChunk)
            for v in check_windows(empty_tail(), charge_chunk(*chunk[1:]), 8)[2]]


def test_shipped_local_and_dpi_methods_pass_the_stage():
    assert _violations("lbu", {"bins": 3, "epsilon": 1.0, "window": 4}, ("fixed", 4, "1.0")) == []
    assert _violations("lpd", {"bins": 3, "epsilon": 1.0, "window": 4}, ("fixed", 4, "1.0")) == []
    assert _violations("dpi-sound", {"bins": 3, "epsilon": 1.0, "pool_size": 20, "draws": 3},
                       ("lifetime", "1.0")) == []


def test_a_randomizer_above_its_named_budget_is_flagged_by_the_per_user_ledger(monkeypatch):
    oracle = LBU.oracle
    monkeypatch.setattr(LBU, "oracle", lambda self, units: oracle(self, 4 * units))
    found = _violations("lbu", {"bins": 3, "epsilon": 1.0, "window": 4}, ("fixed", 4, "4.0"))
    assert {v["kind"] for v in found} == {LAW_MISMATCH}
    assert len(found) == 12 * 8  # every user, every slot


def test_dpi_sound_over_drawing_is_flagged_by_the_per_user_ledger(monkeypatch):
    per_draw = SoundDPI.units_per_draw
    monkeypatch.setattr(SoundDPI, "units_per_draw", lambda self, units: 8 * per_draw(self, units))
    found = _violations("dpi-sound", {"bins": 3, "epsilon": 1.0, "pool_size": 20, "draws": 3},
                        ("lifetime", "8.0"))
    assert OFF_SCHEDULE in {v["kind"] for v in found}


@pytest.mark.parametrize("name", ["lbu", "dpi-sound"])
def test_the_evidence_only_least_of_before_passes_the_same_variants(name, monkeypatch):
    """What the stage shipped before: ``least_charges_of_registered`` equals the variant's charges."""
    if name == "lbu":
        oracle = LBU.oracle
        monkeypatch.setattr(LBU, "oracle", lambda self, units: oracle(self, 4 * units))
        mechanism = make_mechanism("lbu", bins=3, epsilon=1.0, window=4)
        reqs = FixedRequirements.of([4] * 5, [4.0] * 5)
    else:
        per_draw = SoundDPI.units_per_draw
        monkeypatch.setattr(SoundDPI, "units_per_draw", lambda self, units: 8 * per_draw(self, units))
        mechanism = make_mechanism("dpi-sound", bins=3, epsilon=1.0, pool_size=20, draws=3)
        reqs = LifetimeRequirements.of(np.full(5, 8.0))
    rng = insecure_seeded_randomness(1)
    for t in range(6):
        release = mechanism.step(SlotBatch.of(range(5), np.arange(5) % 3, reqs if t == 0 else None), rng)
        assert np.array_equal(least_charges_of_registered(release.charges), release.charges.units)
