"""One slot's columns (transforms/slot_batch.py): the release stage's one-go build equals the CombineFn."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.records import Contribution
from transforms.slot_batch import SlotBatchFn

contributions = st.lists(st.builds(
    Contribution, st.just(3), st.sampled_from(["b", "a", "c", "u10", "u9"]), st.integers(-1, 5),
    st.none() | st.just(("fixed", 3, "1.0")), st.lists(st.sampled_from(["x", "y", "z"]), min_size=1,
                                                        max_size=2).map(tuple)), max_size=12)


def columns(slot) -> tuple:
    return slot.users, slot.values.tolist(), slot.requirements, slot.raws


@settings(max_examples=300, deadline=None)
@given(rows=contributions, split=st.integers(0, 12))
def test_build_equals_the_combine_fn_and_keeps_one_row_per_user(rows, split):
    fn = SlotBatchFn()
    parts = [fn.create_accumulator(), fn.create_accumulator()]
    for i, row in enumerate(rows):
        fn.add_input(parts[i >= split], row)
    combined = fn.extract_output(fn.merge_accumulators(parts))
    built = fn.build([tuple(row) for row in rows])
    assert columns(built) == columns(combined)
    assert built.users == sorted(set(built.users)) and built.values.dtype == np.int64
    for user, raws in zip(built.users, built.raws):
        assert raws == max(row.raws for row in rows if row.user == user)
