"""The per-slot rule (transforms/slotting.py): one contribution per user and slot, duplicates counted."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.records import NO_VALUE, Contribution, Event
from transforms.slotting import SlotClock, close_slots, close_user_slots

CLOCK = SlotClock(60.0, origin=30.0)


def reference_close_slots(events: list, clock: SlotClock, declared):
    """The rule as stated, slot by slot: the latest (time, raw) report wins, declarations in (time, raw) order."""
    def order(e):
        return e.time, e.raw

    by_slot: dict = {}
    for event in events:
        by_slot.setdefault(clock.slot_of(event.time), []).append(event)
    contributions, duplicates = [], 0
    for slot in sorted(by_slot):
        slot_events = by_slot[slot]
        declarations = sorted((e for e in slot_events if e.requirement is not None), key=order)
        if declarations:
            declared = declarations[-1].requirement
        reports = [e for e in slot_events if e.value != NO_VALUE]
        declaration_only = tuple(e.raw for e in sorted(slot_events, key=order) if e.value == NO_VALUE)
        if reports:
            chosen = max(reports, key=order)
            duplicates += len(reports) - 1
            contributions.append(Contribution(slot, chosen.user, chosen.value, declared,
                                              (chosen.raw,) + declaration_only))
        elif declarations:
            contributions.append(Contribution(slot, declarations[-1].user, NO_VALUE, declared, declaration_only))
    return contributions, duplicates, declared


requirements = st.none() | st.sampled_from([("fixed", 3, "1.0"), ("fixed", 5, "0.5"), ("level", "gold")])


def make_event(time: float, value: int, requirement, raw: str) -> Event:
    """Value -1 stands for a declaration-only record (a record without a declaration always has a bin)."""
    return Event("s", "u", time, NO_VALUE if requirement and value < 0 else max(value, 0), requirement, raw)


events = st.builds(
    make_event,
    st.integers(0, 400).map(lambda t: t / 2) | st.floats(0, 300), st.integers(-1, 3), requirements,
    st.sampled_from(["a", "b", "c"]) | st.text(max_size=3))


@settings(max_examples=400, deadline=None)
@given(user_events=st.lists(events, max_size=30), declared=requirements)
def test_close_slots_follows_the_rule_whatever_the_order_and_ties(user_events, declared):
    outcome, in_force = close_slots(user_events, CLOCK, declared)
    expected, duplicates, expected_in_force = reference_close_slots(user_events, CLOCK, declared)
    assert outcome.contributions == expected
    assert outcome.duplicates == duplicates
    assert in_force == expected_in_force
    used = sum(c.records for c in outcome.contributions)
    assert used + outcome.duplicates == sum(1 for e in user_events if e.value != NO_VALUE or e.requirement)


def test_the_latest_report_wins_and_declarations_apply_from_their_slot():
    reports = [(100.0, 1, None, "x"), (140.0, 2, None, "y"), (140.0, 3, None, "z"),   # slot 1: z wins (raw)
               (150.0, NO_VALUE, ("fixed", 3, "1.0"), "d"),                             # slot 2: declaration only
               (200.0, 0, None, "w")]                                                   # slot 2
    rows, duplicates, in_force = close_user_slots("u", reports, CLOCK, None)
    assert rows == [(1, "u", 3, None, ("z",)), (2, "u", 0, ("fixed", 3, "1.0"), ("w", "d"))]
    assert duplicates == 2 and in_force == ("fixed", 3, "1.0")
    assert close_slots([], CLOCK, ("level", "gold"))[1] == ("level", "gold")
