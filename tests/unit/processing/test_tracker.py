"""The per-partition tracker against a plain model: a set of done offsets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiogroup.processing.offset_metadata import decode, encode
from aiogroup.processing.tracker import PartitionTracker


class Model:
    """Everything below ``received_end`` that is not pending is done."""

    def __init__(self, start: int | None, inherited: set[int]) -> None:
        self.start = start
        self.next = start
        self.pending: set[int] = set()
        self.inherited = inherited

    def done(self, offset: int) -> bool:
        assert self.next is not None
        if offset < self.next:
            return offset not in self.pending
        return offset in self.inherited

    def committable(self) -> int | None:
        if self.next is None:
            return None
        o = min(self.pending) if self.pending else self.next
        while not self.pending and o in self.inherited:
            o += 1
        return o


@st.composite
def scripts(draw: st.DrawFn) -> tuple[int | None, list[tuple[int, int]], list[tuple[str, int]]]:
    start = draw(st.one_of(st.none(), st.integers(0, 50)))
    base = start or 0
    inherited: list[tuple[int, int]] = []
    if start is not None:
        cursor = start + 1
        for gap, length in draw(
            st.lists(st.tuples(st.integers(0, 4), st.integers(1, 4)), max_size=5)
        ):
            inherited.append((cursor + gap, cursor + gap + length))
            cursor += gap + length + 1
    steps: list[tuple[str, int]] = []
    offset = base
    for _ in range(draw(st.integers(0, 60))):
        if draw(st.booleans()):
            offset += draw(st.integers(0, 3))  # gaps: compacted offsets, markers
            steps.append(("receive", offset))
            offset += 1
        else:
            steps.append(("finish", draw(st.integers(0, 1000))))
    return start, inherited, steps


@given(scripts())
def test_tracker_matches_the_model(
    script: tuple[int | None, list[tuple[int, int]], list[tuple[str, int]]],
) -> None:
    start, inherited, steps = script
    tracker = PartitionTracker(start, inherited)
    model = Model(start, {o for s, e in inherited for o in range(s, e)})
    for kind, value in steps:
        if kind == "receive":
            if model.next is None:
                model.next = value
            process = tracker.received(value)
            expected = value not in model.inherited
            assert process == expected
            model.next = value + 1
            if expected:
                model.pending.add(value)
        elif model.pending:
            offset = sorted(model.pending)[value % len(model.pending)]
            tracker.finished(offset)
            model.pending.discard(offset)
        assert tracker.unfinished == len(model.pending)
        committed = tracker.committable()
        assert committed == model.committable()
        if committed is None:
            continue
        # Never past an unfinished record.
        assert all(committed <= p for p in model.pending)
        # The runs beyond are exactly the done offsets above it (up to what is known).
        horizon = max([model.next or 0, *(e for _, e in inherited)])
        listed = {o for s, e in tracker.finished_beyond() for o in range(s, e)}
        assert listed == {o for o in range(committed + 1, horizon) if model.done(o)}


@given(scripts())
def test_a_new_owner_skips_exactly_the_finished_records(
    script: tuple[int | None, list[tuple[int, int]], list[tuple[str, int]]],
) -> None:
    start, inherited, steps = script
    old = PartitionTracker(start, inherited)
    received: list[int] = []
    for kind, value in steps:
        if kind == "receive":
            if old.received(value):
                received.append(value)
        elif received:
            pending = [o for o in received if old.is_pending(o)]
            if pending:
                old.finished(pending[value % len(pending)])
    point = old.commit_point(max_bytes=1_000_000)
    if point is None:
        return
    committed, metadata = point
    new = PartitionTracker(committed, decode(committed, metadata))
    for offset in sorted(set(received) | {o for s, e in inherited for o in range(s, e)}):
        if offset < committed:
            continue
        finished_before = not old.is_pending(offset)
        assert new.received(offset) == (not finished_before), offset


def test_blocked_record_holds_the_commit_and_lists_the_rest() -> None:
    t = PartitionTracker(10)
    for o in range(10, 20):
        assert t.received(o)
    for o in range(11, 20):
        t.finished(o)
    assert t.committable() == 10
    assert t.finished_beyond() == [(11, 20)]
    committed, metadata = t.commit_point() or (None, "")
    assert committed == 10 and decode(10, metadata) == [(11, 20)]
    t.finished(10)
    assert t.commit_point() == (20, "")


def test_inherited_runs_not_yet_received_are_handed_on() -> None:
    t = PartitionTracker(10, [(12, 15)])
    assert t.received(10)
    # Nothing after 10 received yet: a commit still lists 12..14 as finished.
    assert t.commit_point() == (10, encode(10, [(12, 15)]))
    t.finished(10)
    assert t.committable() == 11
    assert t.received(11)
    t.finished(11)
    assert t.committable() == 15  # carried over the inherited run
    assert [t.received(o) for o in (12, 13, 14, 15)] == [False, False, False, True]


def test_first_record_before_the_committed_offset_starts_the_window() -> None:
    t = PartitionTracker(100)
    assert t.received(40)  # the application's listener returned an earlier offset
    assert t.committable() == 40


def test_repeats_are_not_processed_twice_and_unknown_finishes_raise() -> None:
    t = PartitionTracker()
    assert t.committable() is None and t.commit_point() is None
    assert t.received(5)
    assert not t.received(5)
    with pytest.raises(KeyError):
        t.finished(6)
