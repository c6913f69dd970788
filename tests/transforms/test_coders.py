"""Coders of the values that cross stage boundaries and live in state cells: round trips, refusals, registration,
the coders Beam picks in the graph, and no pickled value in any state cell."""

from __future__ import annotations

import math
import pickle

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.coders import (BytesCoder, FastPrimitivesCoder, FloatCoder, PickleCoder, StrUtf8Coder, TupleCoder,
                                VarIntCoder, registry)
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms.userstate import get_dofn_specs
from apache_beam.utils.timestamp import Timestamp
from hypothesis import given, settings
from hypothesis import strategies as st

from beam_helpers import SLOT, make_events, reference_releases, streaming_pipeline, streaming_source
from transforms import coders
from transforms.checkpoint import load_randomness
from transforms.declarations import RequirementPolicy
from transforms.encoding import VERSION, decode_value, encode_value
from transforms.engine import ChargeChunk, CheckpointSaved, EvaluationRow, ReleaseConfig, StreamEngine
from transforms.mechanisms.declared import DeclaredRequirements
from transforms.ledger import UserLedgerFn
from transforms.mechanisms import FixedRequirement, mechanism_class
from transforms.private_histogram import PrivateStreamHistogram
from transforms.numeric_records import AbsorptionRow, ClientRow, SampledRow, SlotSum
from transforms.records import Contribution, DeadLetterRecord, Event, ReleaseRecord, dead_letter, pack_contributions, \
    unpack_contributions
from transforms.release import ReleaseController
from transforms.slotting import SlotClock
from transforms.user_state import UserSlotState

UNICODE_USERS = ["", "ü", "用户", "\U0001F600", "a\x1fb", "\ud800lone", "x" * 300]
DECLARATIONS = [None, ("fixed", 3, "1.0"), ("dynamic", 1, "8.0", 4, "2.0"), ("level", "gold"), ("fixed", 2**70, "ε")]

texts = st.text(alphabet=st.characters(blacklist_categories=()), max_size=8)  # lone surrogates included
declarations = st.one_of(st.none(), st.tuples(st.just("fixed"), st.integers(1, 10**30), texts),
                         st.tuples(st.just("level"), texts))
int64s = st.integers(-2**63, 2**63 - 1)
contributions = st.lists(st.tuples(int64s, texts, int64s, declarations, st.lists(texts, max_size=3).map(tuple)),
                         max_size=20)
values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**40, 10**40), st.floats(allow_nan=False), texts,
              st.binary(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
                            st.dictionaries(texts, inner, max_size=4)),
    max_leaves=20)


def same(a, b) -> bool:
    """Equal with the same types all the way down (1 == 1.0 == True in Python, but not here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def round_trip(coder, value):
    encoded = coder.encode(value)
    assert isinstance(encoded, bytes) and encoded[0] == getattr(coder, "version", VERSION)
    assert coder.encode(value) == encoded  # deterministic
    return coder.decode(encoded)


# ---------------------------------------------------------------------------------------------- round trips
@settings(max_examples=150, deadline=None)
@given(values)
def test_the_value_format_round_trips_any_supported_value_with_its_types(value):
    assert same(decode_value(encode_value(value)), value)


def test_the_value_format_keeps_nan_huge_ints_arrays_and_empty_values():
    for value in [float("nan"), float("inf"), -0.0, 2**200, -2**200, "", b"", (), [], {},
                  np.zeros((0, 7), np.int64), np.array([[np.iinfo(np.int64).min, np.iinfo(np.int64).max]]),
                  np.array([0.5, np.nan]), np.array([True, False]), {"slots": np.arange(3), "open": [(1, 2, 3)]}]:
        assert same(decode_value(encode_value(value)), value), value


@settings(max_examples=100, deadline=None)
@given(contributions)
def test_packed_contributions_round_trip(rows):
    assert unpack_contributions(pack_contributions(rows)) == rows
    assert same(unpack_contributions(pack_contributions(rows)), rows)


def test_packed_contributions_keep_unicode_users_and_every_declaration():
    rows = [(slot, user, slot % 3 - 1, DECLARATIONS[slot % len(DECLARATIONS)], (f"r{slot}", user) if slot % 2 else ())
            for slot, user in enumerate(UNICODE_USERS * 3)]
    assert same(unpack_contributions(pack_contributions(rows)), rows)
    assert unpack_contributions(pack_contributions([])) == []
    assert not pack_contributions(rows).startswith(b"\x80")  # not pickle


def test_the_contributions_coder_is_the_packing_the_release_stage_keeps():
    rows = [(3, "ü", 1, DECLARATIONS[1], ("a", "b")), (4, "", -1, None, ())]
    coder = coders.ContributionsCoder()
    assert coder.encode(rows) == pack_contributions(rows) and coder.is_deterministic()
    assert same(coder.decode(pack_contributions(rows)), rows)


def test_packed_contributions_refuse_what_they_cannot_hold_exactly():
    with pytest.raises(TypeError, match="int64"):
        pack_contributions([(0, "u", 1.5, None, ("r",))])  # a float where a bin belongs
    with pytest.raises(TypeError, match="int64"):
        pack_contributions([(2**64, "u", 1, None, ("r",))])
    with pytest.raises(TypeError, match="5 fields"):
        pack_contributions([(0, "u", 1, None)])


REPRESENTATIVE = {
    Event: [Event("s", "u", 61.5, 3, ("fixed", 3, "1.0"), '{"raw": 1}'),
            Event("", "\ud800用户", 1e18, -1, None, ""), Event("s", "u", 0, 2**80, ("level", "ü"), "r")],
    Contribution: [Contribution(2**62, "用户", -1, None, ()), Contribution(0, "", 5, ("dynamic", 1, "8", 4, "2"),
                                                                        ("a", "b"))],
    EvaluationRow: [EvaluationRow("s", 3, [1, 2, 2**70], [0, 0, 0]), EvaluationRow("", 0, [], [])],
    CheckpointSaved: [CheckpointSaved("s", 12, b"WEVENT-CHECKPOINT 1\n\x00\xff"), CheckpointSaved("ü", 0, b"")],
    ChargeChunk: [ChargeChunk("s\x1fu", np.arange(12, dtype=np.int64).reshape(2, 6), "fixed",
                              ("dissimilarity", "publication"), True, True),
                  ChargeChunk("s\x1f用户", np.zeros((0, 8), np.int64), "dynamic", ("dissimilarity", "publication"),
                              False, False),
                  ChargeChunk("k", np.array([[np.iinfo(np.int64).min, -1, np.iinfo(np.int64).max]]), "lifetime",
                              ("répondu",), True, False)],
    ReleaseRecord: [ReleaseRecord(stream="s", slot=4, slot_start=240.0, slot_end=300.0, mechanism="pbd",
                                  mechanism_slot=1, histogram=[1, 0, 2**40], kind="fresh", epsilon="0.5",
                                  predicted_error=None, registered_users=3, reporters=None, statistic="counts",
                                  estimate=[1.0, float("nan"), -0.0], trust="central",
                                  figures={"eps_claimed": 1.0, "epoch": 2.0}),
                    ReleaseRecord(stream="用户", slot=-3, slot_start=-1.5, slot_end=0.0, mechanism="uniform",
                                  mechanism_slot=9, histogram=[], kind="skipped", epsilon="0", predicted_error=2.5,
                                  registered_users=None, reporters=2**40, statistic="counts", estimate=[],
                                  trust="local_client", figures={})],
    DeadLetterRecord: [dead_letter("late: slot 3 closed", '{"user": "ü"}', "release", "s", "u"),
                       dead_letter("bad json", "", "parse")],
    SlotSum: [SlotSum(3, 2**90 + 1, 12), SlotSum(0, -(2**70), 0)],
    ClientRow: [ClientRow(np.array([0.5 - 2 ** -33, -0.25, 0.0]), 0.25 - 2 ** -33, 2**40), ClientRow(np.zeros(0), 0.0, 0)],
    SampledRow: [SampledRow(np.array([0.125, -2 ** -20]), 2 ** -20 - 0.125, 3, 41, 2.5 + 2 ** -16, 3, (10, 10**12)),
                 SampledRow(np.zeros(0), 0.0, 0, -1, 0.0, 0, ())],
    AbsorptionRow: [AbsorptionRow(0.5 + 2 ** -17, 12, 4, 30), AbsorptionRow(0.0, -1, 1, 0)],
}


@pytest.mark.parametrize("value_type", list(REPRESENTATIVE), ids=lambda t: t.__name__)
def test_the_registry_returns_each_coder_for_its_type_and_it_round_trips(value_type):
    coder = registry.get_coder(value_type)
    assert type(coder) is coders.CODERS[value_type]
    assert coder.is_deterministic() and coder.to_type_hint() is value_type
    for value in REPRESENTATIVE[value_type]:
        decoded = round_trip(coder, value)
        assert type(decoded) is value_type
        if value_type is ChargeChunk:
            assert decoded.key == value.key and decoded[2:] == value[2:]
            assert decoded.table.dtype == np.int64 and np.array_equal(decoded.table, value.table)
            assert decoded.table.shape == value.table.shape
        else:
            assert same(list(decoded.values()) if isinstance(value, dict) else list(decoded),
                        list(value.values()) if isinstance(value, dict) else list(value))


def test_a_charge_chunk_of_any_width_round_trips_and_a_table_of_another_type_is_refused():
    coder = coders.ChargeChunkCoder()
    for width in range(0, 10):
        table = np.arange(3 * width, dtype=np.int64).reshape(3, width) - 5
        decoded = coder.decode(coder.encode(ChargeChunk("k", table, "fixed", ("report",), False, True)))
        assert np.array_equal(decoded.table, table) and decoded.table.shape == (3, width)
        decoded.table[...] = 0  # writable: the ledger may work on it
    with pytest.raises(TypeError, match="2-d int64"):
        coder.encode(ChargeChunk("k", np.zeros((2, 2), np.int32), "fixed", ("report",), True, True))


def test_a_charge_chunk_encoded_before_named_parts_decodes_as_the_same_charges():
    """In flight during an update: (key, table of slot, dc, publication, least, w, E, dynamic, final, complete)."""
    from transforms.encoding import encode_value
    from transforms.ledger import charge_chunk

    old = np.array([[7, 1, 2, 3, 4, 5], [8, 0, 5, 5, 4, 5]], np.int64)
    decoded = coders.ChargeChunkCoder().decode(encode_value(("k", old, False, True, False)))
    assert decoded[2:] == ("fixed", ("dissimilarity", "publication"), True, False)
    chunk = charge_chunk(*decoded.ledger_input())
    assert chunk["slots"].tolist() == [7, 8] and chunk["least"].tolist() == [3, 5]
    assert chunk["dc"].tolist() == [1, 0] and chunk["charge"].tolist() == [3, 5]
    assert chunk["requirements"].tolist() == [[4, 5], [4, 5]]


def test_users_state_round_trips_ids_and_declarations_in_order():
    coder = coders.UsersCoder()
    declared = {user: DECLARATIONS[i % len(DECLARATIONS)] for i, user in enumerate(reversed(UNICODE_USERS))}
    declared["not registered"] = ("level", "x")
    for value in [([], {}), (UNICODE_USERS, declared)]:
        user_ids, got = round_trip(coder, value)
        assert user_ids == list(value[0]) and list(got.items()) == list(value[1].items())


def test_the_avro_records_decode_with_the_schema_types():
    """A double field given an int decodes as a float (the schema's type): equal, and what every sink writes."""
    record = dict(REPRESENTATIVE[ReleaseRecord][0], slot_start=240)
    decoded = round_trip(coders.ReleaseRecordCoder(), record)
    assert decoded.pop("slot_start") == 240.0 and same(list(decoded.values()), [v for k, v in record.items()
                                                                                  if k != "slot_start"])
    assert type(coders.ReleaseRecordCoder().decode(coders.ReleaseRecordCoder().encode(record))["slot_start"]) is float
    with pytest.raises(ValueError):  # a record the schema refuses is an error, not a silently other encoding
        coders.ReleaseRecordCoder().encode(dict(record, kind="unknown"))


def test_release_records_encoded_before_version_2_still_decode():
    """Layout 1 (``schemas/release_v1.avsc``: ``registered_users`` a long, no ``reporters``), as a state cell or a
    running job's pipeline holds it, decodes into today's record: ``reporters`` takes its default (fails before
    the release schema's version 2: the coder read only its own layout)."""
    import io

    import fastavro

    from schemas import earlier_avro_schema

    old = {k: v for k, v in REPRESENTATIVE[ReleaseRecord][0].items() if k != "reporters"}
    buffer = io.BytesIO()
    buffer.write(b"\x01")
    fastavro.schemaless_writer(buffer, earlier_avro_schema("release", 1), old)
    decoded = coders.ReleaseRecordCoder().decode(buffer.getvalue())
    assert type(decoded) is ReleaseRecord and decoded.pop("reporters") is None
    assert same(list(decoded.values()), list(old.values()))
    assert coders.ReleaseRecordCoder().encode(REPRESENTATIVE[ReleaseRecord][0])[0] == 2


def test_encodings_refuse_unknown_types_versions_and_truncated_bytes():
    for value in [object(), {1: "non-str key"}, np.zeros(2, np.int32), {1, 2}]:
        with pytest.raises(TypeError):
            coders.ValueCoder().encode(value)
    encoded = coders.EventCoder().encode(REPRESENTATIVE[Event][0])
    with pytest.raises(ValueError, match="version 7"):
        coders.EventCoder().decode(b"\x07" + encoded[1:])
    with pytest.raises(ValueError, match="truncated"):
        coders.EventCoder().decode(encoded[:-3])
    with pytest.raises(ValueError, match="left over"):
        coders.EventCoder().decode(encoded + b"N")
    with pytest.raises(ValueError, match="version"):
        coders.ReleaseRecordCoder().decode(b"\x07")
    with pytest.raises(TypeError, match="declaration"):
        coders.DeclarationCoder().encode(["fixed", 3, "1.0"])


def test_the_coders_survive_pickling_as_the_runner_ships_them():
    for coder_class in coders.CODERS.values():
        coder = coder_class()
        coder.encode(REPRESENTATIVE[coder.to_type_hint()][0])  # the Avro coders parse their schema here
        again = pickle.loads(pickle.dumps(coder))
        assert again == coder and hash(again) == hash(coder)
        value = REPRESENTATIVE[coder.to_type_hint()][0]
        assert again.encode(value) == coder.encode(value)


# ---------------------------------------------------------------------------------------------- the graph
def _graph_coders(streaming: bool) -> dict:
    """The coder of every PCollection of PrivateStreamHistogram, by the producing step's label and tag."""
    pipeline = beam.Pipeline(runner=FnApiRunner(), options=PipelineOptions(streaming=streaming))
    events = pipeline | beam.Create([Event("s", "u", 1.0, 1, None, "r")]).with_output_types(Event)
    _ = events | "H" >> PrivateStreamHistogram("pbd", SLOT, 4, policy=RequirementPolicy(default=FixedRequirement(
        3, 1.0)), bounded=not streaming)
    proto, context = pipeline.to_runner_api(return_context=True)
    return {pc.unique_name.split("H/", 1)[-1]: context.coders.get_by_id(pc.coder_id)
            for pc in proto.components.pcollections.values()}


KEYED = TupleCoder([StrUtf8Coder(), BytesCoder()])
COUNTED = TupleCoder([StrUtf8Coder(), VarIntCoder()])


@pytest.mark.parametrize("streaming", [False, True], ids=["batch", "streaming"])
def test_beam_picks_the_registered_coders_at_every_boundary_of_the_release_stage(streaming):
    found = _graph_coders(streaming)
    closing = "UserSlotState/ParDo(UserSlotState)" if streaming else "UserSlotState/ParDo(CloseUserSlots)"
    # a bounded input's streams are grouped and released without timers (transforms.release.release_stage)
    stage = ("ReleaseController/ParDo(ReleaseController)" if streaming
             else "ReleaseController/Release/ParDo(BoundedRelease)")
    expected = {f"{closing}.None": KEYED, f"{closing}.late": coders.DeadLetterCoder(), f"{closing}.accounting": COUNTED,
                "KeyByStream.None": KEYED, f"{stage}.None": coders.ReleaseRecordCoder(),
                f"{stage}.charges": coders.ChargeChunkCoder(), f"{stage}.dead_letters": coders.DeadLetterCoder(),
                f"{stage}.accounting": COUNTED, f"{stage}.evaluation": coders.EvaluationRowCoder(),
                f"{stage}.checkpoints": coders.CheckpointSavedCoder(),
                "KeyByUser.None": TupleCoder([StrUtf8Coder(), coders.ChargeChunkCoder()]),
                "DeadLetters.None": coders.DeadLetterCoder(), "Accounting.None": COUNTED}
    if streaming:
        expected["AtEventTime.None"] = coders.EventCoder()
        expected["GroupUserEvents/OneEventPerElement.None"] = TupleCoder([TupleCoder([StrUtf8Coder(), StrUtf8Coder()]),
                                                                          coders.EventCoder()])
    assert {name: found[name] for name in expected} == expected
    keyed = ["KeyByStream.None", "KeyByUser.None"] + (["GroupUserEvents/OneEventPerElement.None"] if streaming else [])
    for name in keyed:  # inputs of stateful stages: their key coders must be deterministic
        assert found[name].coders()[0].is_deterministic()


# ---------------------------------------------------------------------------------------------- state cells
PRIMITIVE = (VarIntCoder, FloatCoder, BytesCoder)


def _state_coders(dofn) -> dict:
    state_specs, _ = get_dofn_specs(dofn)
    return {spec.name: spec.coder for spec in state_specs}


def _no_pickle(coder) -> bool:
    if isinstance(coder, TupleCoder):
        return all(map(_no_pickle, coder.coders()))
    return isinstance(coder, PRIMITIVE) or type(coder).__module__ == coders.__name__


@pytest.mark.parametrize("dofn", [UserSlotState(SlotClock(SLOT)), UserLedgerFn(10),
                                  ReleaseController(ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT)))],
                         ids=lambda d: type(d).__name__)
def test_every_state_cell_has_a_coder_that_never_pickles(dofn):
    found = _state_coders(dofn)
    assert found, "a stateful stage without state cells?"
    for name, coder in found.items():
        assert not isinstance(coder, (FastPrimitivesCoder, PickleCoder)), name
        assert _no_pickle(coder), f"state cell {name!r} of {type(dofn).__name__} has coder {coder}"


def test_the_state_cells_keep_their_names():
    """Dataflow's update maps state by step and cell name: these are part of a running job's layout."""
    assert set(_state_coders(UserSlotState(SlotClock(SLOT)))) == {"events", "requirement", "last_closed", "next_close"}
    assert set(_state_coders(UserLedgerFn(10))) == {"tail", "usage"}
    assert set(_state_coders(ReleaseController(ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT))))) == {
        "contributions", "mechanism", "users", "next_slot", "randomness", "armed", "requirements"}


class _Cell:
    """A state cell or bag that records what is written (through the cell's own coder, as a runner would)."""

    def __init__(self, coder):
        self.coder, self.values, self.written = coder, [], []

    def add(self, value):
        self.written.append(value)
        self.values.append(self.coder.decode(self.coder.encode(value)))

    def write(self, value):
        self.values = []
        self.add(value)

    def read(self):
        return self.values if isinstance(self, _Bag) else (self.values[0] if self.values else None)

    def clear(self):
        self.values = []


class _Bag(_Cell):
    pass


class _Timer:
    def set(self, timestamp):
        self.at = timestamp


def test_the_release_stage_writes_no_pickled_bytes_into_its_cells():
    """Drive the stage's own methods over two firings with recording cells: each bytes cell holds what its
    documented encoding reads (docs/state_layout.md), never pickle (the seeded generator's state aside: it is
    written only with an explicit insecure seed, and loaded by the checkpoint's restricted unpickler)."""
    config = ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT), insecure_seed=3)
    stage = ReleaseController(config)
    specs = _state_coders(stage)
    cells = {name: (_Bag if name == "contributions" else _Cell)(coder) for name, coder in specs.items()}
    declared = ("fixed", 3, "1.0")
    firings = [[(0, "ü", 1, declared, ("a",)), (0, "b", 2, declared, ("b",)), (1, "ü", 0, None, ("c",))],
               [(2, "ü", 3, None, ("d",)), (2, "新", 1, ("fixed", 2, "2.0"), ("e",))]]
    timer, released = _Timer(), []
    for slot_rows in firings:
        stage.process(("s", pack_contributions(slot_rows)), contributions=cells["contributions"],
                      armed=cells["armed"], release=timer)
        released += [o for o in stage.on_release(
            key="s", fired=Timestamp(micros=config.clock.release_micros(max(r[0] for r in slot_rows))),
            contributions=cells["contributions"], mechanism_state=cells["mechanism"], users_state=cells["users"],
            next_slot_state=cells["next_slot"], randomness_state=cells["randomness"], armed=cells["armed"],
            release=timer, requirements_state=cells["requirements"]) if isinstance(o, dict)]
    assert [r["slot"] for r in released] == [0, 1, 2]
    decoders = {"contributions": unpack_contributions, "users": coders.UsersCoder().decode,
                "mechanism": lambda b: mechanism_class("pbd").from_bytes(config.build().params, b),
                "randomness": load_randomness, "requirements": DeclaredRequirements.from_bytes}
    assert cells["contributions"].written and cells["users"].written and cells["mechanism"].written
    for name, cell in cells.items():
        for value in cell.written:
            if isinstance(cell.coder, BytesCoder):
                decoders[name](value)  # reads as documented
                if name != "randomness":
                    assert not value.startswith(b"\x80"), f"pickled bytes in state cell {name!r}"
            else:
                assert isinstance(value, int), name
    user_ids, declared_now = coders.UsersCoder().decode(cells["users"].written[-1])
    assert user_ids == ["b", "ü", "新"]
    assert declared_now == {"ü": declared, "b": declared, "新": ("fixed", 2, "2.0")}


def test_the_release_stage_keeps_pending_requirement_changes_across_firings():
    """What users declared (a change still waiting for its public delay included) survives between firings:
    the register after two firings is the one a single engine keeps over both. Rebuilt from each user's last
    declaration instead (the stage before it had this cell), the looser (w=3, E=2.0) that ``u`` declares at slot 1
    would be in force at once, and the ledger would check slots 2-3 against it rather than (w=3, E=1.0)."""
    config = ReleaseConfig("pbd", {"bins": 4}, SlotClock(SLOT), insecure_seed=3)
    stage = ReleaseController(config)
    cells = {name: (_Bag if name == "contributions" else _Cell)(coder) for name, coder in _state_coders(stage).items()}
    firings = [[(0, "u", 1, ("fixed", 3, "1.0"), ("a",)), (0, "v", 0, ("fixed", 3, "1.0"), ("b",)),
                (1, "u", 2, ("fixed", 3, "2.0"), ("c",))], [(2, "u", 3, None, ("d",)), (2, "v", 1, None, ("e",))]]
    timer = _Timer()
    for slot_rows in firings:
        stage.process(("s", pack_contributions(slot_rows)), contributions=cells["contributions"],
                      armed=cells["armed"], release=timer)
        list(stage.on_release(
            key="s", fired=Timestamp(micros=config.clock.release_micros(max(r[0] for r in slot_rows))),
            contributions=cells["contributions"], mechanism_state=cells["mechanism"], users_state=cells["users"],
            next_slot_state=cells["next_slot"], randomness_state=cells["randomness"], armed=cells["armed"],
            release=timer, requirements_state=cells["requirements"]))
    whole = StreamEngine.load(config, "s", None)
    list(whole.release_until(2, firings[0] + firings[1], final=False))
    kept = DeclaredRequirements.from_bytes(cells["requirements"].read())
    users = np.arange(2)
    assert kept.matrix_of(users).tolist() == whole.requirements.matrix_of(users).tolist()
    assert cells["requirements"].read() == whole.requirements.to_bytes()


# ---------------------------------------------------------------------------------------------- pipelines
def _private(**kwargs):
    return PrivateStreamHistogram("pbd", SLOT, 4, insecure_seed=7, policy=RequirementPolicy(), **kwargs)


def _summary(release):
    return release["slot"], release["kind"], tuple(release["histogram"])


def test_a_batch_job_with_every_boundary_encoded_releases_what_the_reference_does():
    """FnApiRunner; a Reshuffle after each typed output makes every value cross a boundary through its coder."""
    events = make_events(seed=21, users=8, slots=9, bins=4) + [Event("s", "用户", 5.0, 1, ("fixed", 3, "1.0"),
                                                                     "raw ü")]
    expected = reference_releases(events, "pbd", {"bins": 4}, seed=7)
    with beam.Pipeline(runner=FnApiRunner()) as p:
        out = p | beam.Create(events).with_output_types(Event) | beam.Reshuffle() | _private(evaluate=True)
        releases = out["releases"] | "ShuffleReleases" >> beam.Reshuffle()
        assert_that(releases | beam.Map(_summary), equal_to(expected))
        assert_that(out["evaluation"] | "ShuffleEvaluation" >> beam.Reshuffle()
                    | beam.Map(lambda row: (row.slot, tuple(row.released))),
                    equal_to([(slot, histogram) for slot, _, histogram in expected]), label="evaluation")
        assert_that(out["violations"], equal_to([]), label="violations")


def test_a_streaming_job_with_the_registered_coders_releases_what_the_reference_does():
    """TestStream on the BundleBasedDirectRunner: state cells and timers through their coders, slot by slot."""
    events = make_events(seed=22, users=6, slots=8, bins=4)
    expected = reference_releases(events, "pbd", {"bins": 4}, seed=7)
    with streaming_pipeline() as p:
        out = streaming_source(p, events, 0.0) | _private()
        assert_that(out["releases"] | beam.Map(_summary), equal_to(expected))
        assert_that(out["violations"], equal_to([]), label="violations")
        assert_that(out["dead_letters"], equal_to([]), label="dead")


def test_release_records_and_dead_letters_are_typed_dicts():
    assert isinstance(dead_letter("r", "x", "parse"), DeadLetterRecord)
    assert dead_letter("r", "x", "parse") == {"stream": None, "user": None, "stage": "parse", "reason": "r",
                                              "record": "x"}
    assert ReleaseRecord(a=1) == {"a": 1}
