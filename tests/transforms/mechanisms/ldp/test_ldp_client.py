"""Client devices end to end without Beam: requests out, the device module's reports back, checked and counted."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from device import wevent_client
from transforms.mechanisms import FixedRequirements, PrivacyLedger, SlotBatch, TrustModel, make_mechanism
from transforms.mechanisms.domain import NO_VALUE
from transforms.mechanisms.ldp.client import (ReportRejected, RoundRequest, answer_round, assign_public_groups,
                                              client_slot, compact_report, public_group)
from transforms.mechanisms.noise import insecure_seeded_randomness

METHODS = ["lbu", "lsp", "lbd", "lba", "lpu", "lpd", "lpa", "plbu", "lp-dsatw", "lb-dsatw", "lp-rescuedp", "lb-rescuedp"]


def fleet(users: int, window: int, budget: str, seed: int):
    """Devices holding a binary value that follows a slow sine (their truth; the collector never sees it)."""
    gen = np.random.default_rng(seed)
    phase = gen.random(users)
    ids = [f"phone-{i:04d}" for i in range(users)]

    def value_of(user):
        return lambda slot: int(phase[user] < 0.3 + 0.2 * np.sin(slot / 8))

    secret = np.random.default_rng(seed + 1)
    devices = {ids[u]: wevent_client.WEventClient(ids[u], window, budget, value_of(u),
                                                  randbits=lambda k: int(secret.integers(0, 2**63)) % (1 << k))
               for u in range(users)}
    return ids, devices, value_of


def run(method: str, users=300, slots=30, window=5, budget="1", drop=0.0, seed=3, **extra):
    """Run ``method`` with devices answering (a share ``drop`` never answers); the ledger checks every window."""
    ids, devices, value_of = fleet(users, window, budget, seed)
    index_of = {user: i for i, user in enumerate(ids)}
    params = {"bins": 2} if method == "plbu" else {"bins": 2, "epsilon": float(budget), "window": window}
    mechanism = make_mechanism(method, **params, **extra)
    assign_public_groups(mechanism, ids)
    ledger = PrivacyLedger(window)
    rng, lost = insecure_seeded_randomness(seed), np.random.default_rng(seed + 2)
    refusals, releases, truth = [], [], []

    def exchange(round_request, requests):
        reports = []
        for request in requests:
            if lost.random() < drop:
                continue
            try:
                reports.append(devices[request["user"]].respond(request))
            except wevent_client.RequestRefused as refused:
                refusals.append(refused.code)
        return reports

    registrations = FixedRequirements.of(np.full(users, window), np.full(users, float(budget)))
    for t in range(1, slots + 1):
        batch = SlotBatch.of(range(users), np.full(users, NO_VALUE), registrations if t == 1 else None)
        release, rejected = client_slot(mechanism, batch, rng, "s", t, ids, index_of, exchange)
        assert rejected == []
        ledger.record(release.slot, release.charges)
        releases.append(release)
        truth.append(np.mean([value_of(u)(t) for u in range(users)]))
    ledger.close()
    return releases, ledger, refusals, np.array(truth)


@pytest.mark.parametrize("method", METHODS)
def test_devices_answer_every_request_and_no_window_overspends(method):
    """The schedule never asks a device for more than its own budget, and the collector's ledger agrees."""
    releases, ledger, refusals, truth = run(method)
    assert refusals == [] and ledger.ok and 0 < ledger.max_usage_ratio <= 1
    assert {r.trust for r in releases} == {TrustModel.LOCAL_CLIENT}
    fresh = [r for r in releases if r.kind.value == "fresh"]
    assert fresh and all(abs(r.estimate.sum() - 1) < 1e-9 for r in fresh)  # GRR frequency estimates sum to 1


def test_estimates_track_the_devices_values():
    """LBU at a generous budget: mean absolute error of the estimated share of 1s over 30 slots.

    300 devices, GRR at eps/w = 4: one estimate's sd is about 0.013, so a mean error above 0.05 has
    probability far below 1e-9 (a 4-sigma event on the mean of 30)."""
    releases, _, _, truth = run("lbu", budget="20", window=5)
    assert np.mean([abs(r.estimate[1] - p) for r, p in zip(releases, truth)]) < 0.05


def test_users_who_do_not_answer_are_neither_counted_nor_charged():
    releases, ledger, _, _ = run("lbu", drop=0.3)
    assert ledger.ok
    charged = [int(np.count_nonzero(r.charges.units)) for r in releases]
    assert all(150 <= c <= 250 for c in charged)  # 300 asked, 30% lost: Binomial(300, 0.7) within 6 sd


def test_bad_reports_are_rejected_with_their_reason():
    ids, devices, _ = fleet(4, 2, "1", seed=5)
    index_of = {user: i for i, user in enumerate(ids)}
    mechanism = make_mechanism("lpu", bins=2, epsilon=1.0, window=2)
    batch = SlotBatch.of(range(4), np.full(4, NO_VALUE), FixedRequirements.of([2] * 4, [1.0] * 4))
    rounds = mechanism.start_slot(batch, insecure_seeded_randomness(1), clients=True)
    round_request = RoundRequest("s", 7, 0, "lpu", rounds.request)
    asked = [ids[u] for u in rounds.request.users]
    other = next(user for user in ids if user not in asked)
    good = devices[asked[0]].respond(round_request.records(ids)[0])
    bad = [
        ({**good, "epsilon": "0.5"}, "epsilon"),
        ({**good, "slot": 8}, "slot 8"),
        ({**good, "method": "lpu/m1"}, "method"),
        ({**good, "user": "stranger"}, "unknown user"),
        ({**good, "user": other}, "not asked"),
        ({**good, "report": [2]}, "outside the domain"),
        ({**good, "oracle": "oue"}, "through 'oue'"),
        ({**good, "realised_epsilon": "0.9"}, "realised epsilon"),
        ({**good, "request_id": "s/7/9"}, "unknown request"),
        ({k: v for k, v in good.items() if k != "report"}, "missing field"),
    ]
    for report, reason in bad:
        with pytest.raises(ReportRejected, match=reason):
            round_request.check(compact_report(report), index_of)
    compact = [compact_report(r) for r in [good, dict(good)] + [r for r, _ in bad[:-1]]]
    rejected = answer_round(rounds, round_request, compact, index_of)
    assert [reason for _, reason in rejected][0] == "a second report of the user in this round"
    assert len(rejected) == len(bad) and rejected[1][0] == {**good, "epsilon": "0.5"}  # records, as received
    release = rounds.release
    assert release.kind.value == "fresh" and np.count_nonzero(release.charges.units) == 1


def test_client_slots_refuse_values():
    mechanism = make_mechanism("lbu", bins=2, epsilon=1.0, window=2)
    batch = SlotBatch.of(range(2), [0, 1], FixedRequirements.of([2, 2], [1.0, 1.0]))
    with pytest.raises(ValueError, match="no values"):
        mechanism.start_slot(batch, insecure_seeded_randomness(1), clients=True)


@given(st.text(min_size=1, max_size=40), st.integers(1, 500))
def test_the_device_and_the_collector_compute_the_same_public_group(user, window):
    assert wevent_client.public_group(user, window) == public_group(user, window)


def test_lpu_with_public_groups_asks_each_device_at_its_own_turn():
    """Every report comes from the user whose public group's turn it is, once every w slots; nothing overspends."""
    window, users = 5, 300
    releases, ledger, refusals, _ = run("lpu", users=users, window=window, grouping="public")
    assert refusals == [] and ledger.ok and 0 < ledger.max_usage_ratio <= 1
    ids = fleet(users, window, "1", 3)[0]
    groups = np.array([public_group(user, window) for user in ids])
    for release in releases:
        reporters = np.flatnonzero(release.charges.units)
        assert reporters.size and set(groups[reporters]) == {(release.slot - 1) % window}
    assert np.bincount(groups, minlength=window).min() > 0.5 * users / window  # balanced in expectation


def test_public_groups_must_be_assigned_before_a_user_reports():
    mechanism = make_mechanism("lpu", bins=2, epsilon=1.0, window=3, grouping="public")
    batch = SlotBatch.of(range(4), np.full(4, NO_VALUE), FixedRequirements.of(np.full(4, 3), np.full(4, 1.0)))
    with pytest.raises(ValueError, match="no public group"):
        mechanism.start_slot(batch, insecure_seeded_randomness(1), clients=True)
    with pytest.raises(ValueError, match="only with grouping='public'"):
        make_mechanism("lpu", bins=2, epsilon=1.0, window=3).assign_groups([0], [1])
    with pytest.raises(ValueError, match="grouping must be one of"):
        make_mechanism("lpu", bins=2, epsilon=1.0, window=3, grouping="hashed")
