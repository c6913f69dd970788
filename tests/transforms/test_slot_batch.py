"""Slots' columns (transforms/slot_batch.py): the release stage's SlotColumns equal the CombineFn per slot."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.records import Contribution
from transforms.slot_batch import SlotBatchFn
from transforms.slot_columns import SlotColumns

contributions = st.lists(st.builds(
    Contribution, st.sampled_from([3, 4, 7]), st.sampled_from(["b", "a", "c", "u10", "u9"]), st.integers(-1, 5),
    st.none() | st.just(("fixed", 3, "1.0")), st.lists(st.sampled_from(["x", "y", "z"]), min_size=1,
                                                        max_size=2).map(tuple)), max_size=12)


def columns(slot) -> tuple:
    return slot.users, slot.values.tolist(), slot.requirements, slot.raws


def slot_of(built: SlotColumns, start: int, end: int) -> tuple:
    """One slot's rows of ``built`` in the CombineFn's terms."""
    return ([built.user_ids[u] for u in built.users[start:end]], built.values[start:end].tolist(),
            [None if r < 0 else built.declarations[r] for r in built.requirements[start:end]], built.raws[start:end])


@settings(max_examples=300, deadline=None)
@given(rows=contributions, split=st.integers(0, 12))
def test_slot_columns_equal_the_combine_fn_per_slot_and_keep_one_row_per_user(rows, split):
    fn = SlotBatchFn()
    built = SlotColumns.of([tuple(row) for row in rows])
    assert [s for s, _, _ in built.slot_rows()] == sorted({row.slot for row in rows})
    duplicates_per_slot = {}
    for slot, start, end in built.slot_rows():
        parts = [fn.create_accumulator(), fn.create_accumulator()]
        for i, row in enumerate(rows):
            if row.slot == slot:
                parts[i >= split] = fn.add_input(parts[i >= split], row)
        combined = fn.extract_output(fn.merge_accumulators(parts))
        assert slot_of(built, start, end) == columns(combined)
        # nothing is lost: every record is in a kept row or counted as a duplicate
        records = sum(len(row.raws) for row in rows if row.slot == slot)
        assert combined.duplicate_records == records - sum(map(len, combined.raws))
        duplicates_per_slot[slot] = combined.duplicate_records
        users = slot_of(built, start, end)[0]
        assert users == sorted(set(users))
        for user, raws in zip(users, built.raws[start:end]):
            assert raws == max(row.raws for row in rows if row.user == user and row.slot == slot)
    assert built.raw_counts.tolist() == [len(raws) for raws in built.raws]
    assert built.duplicates() == sum(duplicates_per_slot.values())
    later = built.since(4)
    assert later.slots.tolist() == [s for s in built.slots.tolist() if s >= 4] and len(later.raws) == later.slots.size
    assert later.duplicates() == sum(n for slot, n in duplicates_per_slot.items() if slot >= 4)
