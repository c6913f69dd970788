"""The streaming job with client devices: requests out, reports back before a deadline, as the core does it.

The TestStream tests precompute, with the Beam-free core (``client_slot``) and the seeded generator
(``insecure_seeded_randomness``), the requests of an adaptive method over a few slots and the reports the
devices (``wevent_client``) send back, then feed those reports to the Beam step through a TestStream that
drives slot ticks and processing time, and check that the step's requests, releases, dead letters and counts
are the core's.  The TestStream's processing time is set ahead of the wall clock, so the step's deadlines
follow the ticks and the deadlines passed (``transforms.client_rounds``, Time).
"""

from __future__ import annotations

import functools
import json
import random
from collections import Counter

import apache_beam as beam
import pytest
from apache_beam.testing import test_stream
from apache_beam.testing.util import assert_that, equal_to

from device import wevent_client
from pipelines import cli, streaming
from tests.transforms.beam_helpers import streaming_pipeline
from transforms.client_rounds import LATE_REPORT, ClientRounds, ClientRoundsConfig
from transforms.mechanisms import SlotBatch
from transforms.mechanisms.budget import units_to_decimal_string
from transforms.mechanisms.ldp.client import DUPLICATE_REPORT, client_slot
from transforms.mechanisms.noise import insecure_seeded_randomness
from transforms.mechanisms.registry import params_from_options

SLOT_SECONDS, ROUND_SECONDS = 60.0, 10.0
FIRST = 66_666_667  # the first slot: its start, 4,000,000,020 s, is far ahead of the wall clock (see the doc)
USERS = [f"phone-{i:02d}" for i in range(20)]


def config(method: str, window: int = 4, seed: int = 3, epsilon: str = "4") -> ClientRoundsConfig:
    params = params_from_options(method, 3, epsilon=float(epsilon), window=window, max_window=16).kwargs()
    units = wevent_client.epsilon_units_from_string(epsilon)
    return ClientRoundsConfig(method, params, tuple(USERS), (window,) * len(USERS), (units,) * len(USERS),
                              SLOT_SECONDS, ROUND_SECONDS, insecure_seed=seed)


def value(user: int, slot: int) -> int:
    """Device ``user``'s value at ``slot``."""
    return (user + slot) % 3


def core_run(cfg: ClientRoundsConfig, slots: int):
    """``client_slot`` over ``slots`` slots with seeded devices: per slot its rounds (request records, the reports
    returned) and its release, and every rejected report's reason."""
    devices = {user: wevent_client.WEventClient(
        user, cfg.windows[i], units_to_decimal_string(cfg.epsilon_units[i]), functools.partial(value, i),
        randbits=random.Random(100 + i).getrandbits) for i, user in enumerate(USERS)}
    (mechanism, registrations), rng = cfg.first_slot(FIRST), insecure_seeded_randomness(cfg.insecure_seed)
    rounds, releases, rejected, forged, offline = {}, [], [], [], set()
    for slot in range(FIRST, FIRST + slots):
        rounds[slot] = []

        def exchange(round_request, records, slot=slot):
            if slot > FIRST and records and not offline:  # after the first slot, one device goes offline for good
                offline.add(records[0]["user"])
            reports = []
            for request in records:
                if request["user"] not in offline:
                    try:
                        reports.append(devices[request["user"]].respond(request))
                    except wevent_client.RequestRefused:
                        pass  # over the device's own budget: it does not report
            if len(reports) >= 2 and not forged:  # once: forged and repeated reports, before the last good one
                forged.extend([{**reports[0], "epsilon": "0.5"}, {**reports[0], "user": "intruder"}])
                reports = forged + reports[:1] + [dict(reports[0])] + reports[1:]
            rounds[slot].append((records, reports))
            return reports

        batch = registrations if slot == FIRST else SlotBatch.empty()
        release, bad = client_slot(mechanism, batch, rng, cfg.stream, slot, USERS, cfg.index_of, exchange)
        releases.append((slot, release.slot, release.kind.value, release.estimate.tolist(),
                         units_to_decimal_string(release.epsilon_units), release.trust.value))
        rejected += [reason for _, reason in bad]
    return rounds, releases, rejected


def totals(expected: dict):
    """A matcher: the ``(counter, n)`` pairs add up to ``expected``."""
    def check(pairs):
        got = Counter()
        for name, n in pairs:
            got[name] += n
        assert dict(got) == expected, (dict(got), expected)
    return check


def feed(rounds: dict, extra: dict) -> test_stream.TestStream:
    """Each slot's tick at its start, then each round's reports (and ``extra[(slot, round)]`` lines after them),
    then processing time past the round's deadline."""
    stream = test_stream.TestStream(output_tags=["ticks", "reports"]).advance_processing_time(FIRST * SLOT_SECONDS)
    clock = FIRST * SLOT_SECONDS
    for slot, slot_rounds in rounds.items():
        start = slot * SLOT_SECONDS
        if start > clock:
            stream = stream.advance_processing_time(start - clock)
        stream, clock = stream.add_elements([start], tag="ticks"), start
        for number, (_, reports) in enumerate(slot_rounds):
            lines = [json.dumps(r) for r in reports] + extra.get((slot, number), [])
            if lines:
                stream = stream.add_elements(lines, tag="reports")
            stream, clock = stream.advance_processing_time(ROUND_SECONDS), clock + ROUND_SECONDS
    return stream.advance_watermark_to_infinity()


def run_and_compare(cfg, rounds: dict, releases: list, rejected: list, again: list = ()) -> None:
    """Feed the core's reports to the Beam step, with a late report and two bad lines in the first round of a
    later slot; its outputs must be the core's (``again``: request records the step sends a second time)."""
    late = json.dumps(rounds[FIRST][0][1][-1])  # a first-slot report again, later: its round had closed
    extra = [b"\xffnot json", json.dumps({**rounds[FIRST][0][1][-1], "stream": "other"}).encode()]  # as Pub/Sub
    later = min(slot for slot, slot_rounds in rounds.items() if slot > FIRST and slot_rounds)
    stream = feed(rounds, {(later, 0): [late, *extra]})
    fed = sum(len(reports) for slot_rounds in rounds.values() for _, reports in slot_rounds)
    duplicates = rejected.count(DUPLICATE_REPORT)
    dead = rejected + [LATE_REPORT, "malformed report: not JSON", "report for stream 'other', not 'default'"]
    requests = [r for slot_rounds in rounds.values() for records, _ in slot_rounds for r in records]
    with streaming_pipeline() as pipeline:
        inputs = pipeline | stream
        out = {"ticks": inputs["ticks"], "reports": inputs["reports"]} | ClientRounds(cfg)
        assert_that(out["releases"] | beam.Map(lambda r: (r["slot"], r["mechanism_slot"], r["kind"], r["estimate"],
                                                          r["epsilon"], r["trust"])),
                    equal_to(releases), label="releases")
        assert_that(out["requests"] | beam.Map(json.loads), equal_to(requests + list(again)), label="requests")
        assert_that(out["dead_letters"] | beam.Map(lambda d: d["reason"]), equal_to(dead), label="dead letters")
        # reports read = used + duplicates + late + dead letters
        assert_that(out["accounting"], totals({"records_used": fed - len(rejected), "duplicates": duplicates,
                                               "late": 1, "dead_letters": len(rejected) - duplicates + len(extra)}),
                    label="accounting")


@pytest.mark.parametrize("method, window, seed", [("lpd", 4, 3), ("lbd", 1, 1), ("lpa", 2, 2), ("lp-dsatw", 2, 2)])
def test_client_rounds_with_test_stream_equal_the_core_round_trip(method, window, seed):
    """Rounds closing early and at their deadline, slots that ask twice, once and (LP-DSATw) not at all."""
    cfg = config(method, window, seed)
    rounds, releases, rejected = core_run(cfg, 4)
    assert any(len(r) > 1 for r in rounds.values()) and any(r[2] == "fresh" for r in releases)
    silent = [{r["user"] for r in records} - {r["user"] for r in reports} for rs in rounds.values()
              for records, reports in rs]
    assert any(silent) and not all(silent)  # rounds close at their deadline, and early
    assert rejected.count(DUPLICATE_REPORT) == 1 and {r[5] for r in releases} == {"local_client"}
    run_and_compare(cfg, rounds, releases, rejected)


@pytest.mark.parametrize("method, extra", [("lsp", {"sampling_offset": 2}), ("lpu", {"grouping": "public"})])
def test_live_rounds_keep_the_devices_public_schedule_on_absolute_slots(method, extra):
    """The first ticked slot, FIRST, is not the start of a public cycle ((FIRST - 1) mod 4 = 2): LSP with offset 2
    still asks everyone at the absolute slots t with (t - 3) mod 4 == 0 only, LPU each device at the slots its
    public group names, and the Beam step (its method rebuilt from state at every slot, with the anchored
    parameters) releases what the core does.  Before, the schedule started at the first ticked slot."""
    params = {**params_from_options(method, 3, epsilon=4.0, window=4, max_window=16).kwargs(), **extra}
    units = wevent_client.epsilon_units_from_string("4")
    cfg = ClientRoundsConfig(method, params, tuple(USERS), (4,) * len(USERS), (units,) * len(USERS), SLOT_SECONDS,
                             ROUND_SECONDS, insecure_seed=5)
    rounds, releases, rejected = core_run(cfg, 6)
    asked = {slot: {r["user"] for records, _ in slot_rounds for r in records} for slot, slot_rounds in rounds.items()}
    for slot, users in asked.items():
        if method == "lsp":
            assert users == (set(USERS) if (slot - 3) % 4 == 0 else set()), slot
        else:
            assert users == {u for u in USERS if wevent_client.public_group(u, 4) == (slot - 1) % 4}, slot
    assert sum(map(bool, asked.values())) >= 2
    run_and_compare(cfg, rounds, releases, rejected)


class ForgetsOnce(dict):
    """The worker's open slots, lost once (a worker restart) when the second slot's first round has a report."""

    def __init__(self):
        super().__init__()
        self.forgot = False

    def get(self, key, default=None):
        slot = super().get(key, default)
        if not self.forgot and slot is not None and (slot.slot, slot.number) == (FIRST + 1, 0) and slot.answered:
            self.forgot = True
            del self[key]
            return default
        return slot


def test_a_slot_lost_with_its_worker_starts_again_from_the_saved_state(monkeypatch):
    """With the seeded generator the repeated slot asks the same users again and the reports already received
    answer it: the same releases and counts as without the restart, and the slot's first requests twice."""
    from transforms.client_rounds import ClientRoundsFn

    forgets = ForgetsOnce()
    monkeypatch.setattr(ClientRoundsFn, "_open", forgets)
    cfg = config("lpd")
    rounds, releases, rejected = core_run(cfg, 3)
    run_and_compare(cfg, rounds, releases, rejected, again=rounds[FIRST + 1][0][0])
    assert forgets.forgot


def _users_file(tmp_path) -> str:
    path = tmp_path / "users.txt"
    path.write_text("".join(f"{user}\n" for user in USERS))
    return str(path)


def client_flags(tmp_path) -> list[str]:
    return ["--clients", "--requests-topic", "projects/my-project/topics/requests", "--reports-subscription",
            "projects/my-project/subscriptions/reports", "--users", _users_file(tmp_path), "--requirement", "fixed:4,4",
            "--mechanism", "lpd", "--epsilon", "4", "--window", "4", "--binning", "int:3", "--slot-seconds", "60",
            "--round-seconds", "10", "--output", str(tmp_path / "out")]


def test_the_streaming_job_builds_the_client_graph_for_pub_sub(tmp_path):
    """Built, not run: slot ticks and Pub/Sub reports into the stateful rounds step, requests to Pub/Sub."""
    from apache_beam.pipeline import PipelineVisitor
    from apache_beam.portability import common_urns
    from apache_beam.transforms.periodicsequence import PeriodicImpulse

    from pipelines.slot_files import WriteSlotFiles
    from transforms.client_rounds import ClientRoundsFn

    class Kinds(PipelineVisitor):
        def __init__(self):
            self.kinds = {}

        def enter_composite_transform(self, node):
            self.visit_transform(node)

        def visit_transform(self, node):
            transform = node.transform
            self.kinds[node.full_label] = type(getattr(transform, "fn", transform))

    args, beam_args = cli.strict_parse(streaming.parser(), [*client_flags(tmp_path), "--streaming"])
    pipeline = beam.Pipeline(options=cli.pipeline_options(beam_args))
    streaming.build(pipeline, args)
    visitor = Kinds()
    pipeline.visit(visitor)
    assert {"SlotTicks": PeriodicImpulse, "Reports": beam.io.ReadFromPubSub, "Clients": ClientRounds,
            "Clients/Rounds/ParDo(ClientRoundsFn)": ClientRoundsFn, "WriteRequests": beam.io.WriteToPubSub,
            "WriteReleases": WriteSlotFiles}.items() <= visitor.kinds.items()
    components = pipeline.to_runner_api().components
    names = {t.unique_name: t for t in components.transforms.values()}
    assert names["Reports/Read"].spec.urn == common_urns.composites.PUBSUB_READ.urn
    rounds = names["Clients/Rounds/ParDo(ClientRoundsFn)"]
    (flattened,) = rounds.inputs.values()
    coder = components.coders[components.pcollections[flattened].coder_id]
    assert coder.spec.urn == common_urns.coders.KV.urn  # keyed by stream, with a coder any runner compares
    assert components.coders[coder.component_coder_ids[0]].spec.urn == common_urns.coders.STRING_UTF8.urn
    assert set(rounds.outputs) == {"None", "requests", "dead_letters", "accounting"}


@pytest.mark.parametrize("change, message", [
    (lambda f: f[:1] + f[3:], "--clients needs --requests-topic"),
    (lambda f: f[1:], "--requests-topic, --reports-subscription and --users are for --clients"),
    (lambda f: [*f, "--mechanism", "pbd"], "pbd is not a local-DP method"),
    (lambda f: [*f, "--round-seconds", "60"], "--round-seconds must be positive and shorter than a slot"),
    (lambda f: [*f, "--resume-from", "x"], "--resume-from is not supported with --clients"),
    (lambda f: [*f, "--requests-topic", "requests"], "--requests-topic: PubSub topic must be in the form"),
])
def test_a_bad_client_configuration_stops_the_job_with_one_line(tmp_path, capsys, change, message):
    flags = client_flags(tmp_path)
    if message.startswith("--requests-topic,"):  # a source other than --clients
        flags = ["--pubsub-subscription", "projects/my-project/subscriptions/events", *change(flags)]
    else:
        flags = change(flags)
    assert streaming.run([*flags, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
