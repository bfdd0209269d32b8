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


@given(scripts(), st.lists(st.integers(1, 6), min_size=1, max_size=20))
def test_received_run_is_receiving_one_by_one(
    script: tuple[int | None, list[tuple[int, int]], list[tuple[str, int]]], cuts: list[int]
) -> None:
    """The read path takes a run of consecutive offsets at once when it may
    (received_run), else one by one; either way the tracker ends where receiving each
    record alone leaves it, and says the same records are to be processed."""
    start, inherited, steps = script
    one, runs = PartitionTracker(start, inherited), PartitionTracker(start, inherited)
    received = [o for kind, o in steps if kind == "receive"]
    i = 0
    k = 0
    while i < len(received):
        batch = received[i : i + cuts[k % len(cuts)]]
        i += len(batch)
        k += 1
        wanted_one = [one.received(o) for o in batch]
        contiguous = batch[-1] - batch[0] == len(batch) - 1
        if contiguous and runs.received_run(batch[0], len(batch)):
            wanted_runs = [True] * len(batch)
        else:
            wanted_runs = [runs.received(o) for o in batch]
        assert wanted_runs == wanted_one
        for o, wanted in zip(batch, wanted_one, strict=True):
            if wanted and o % 3 == 0:  # finish some, out of order with the rest
                one.finished(o)
                runs.finished(o)
        assert runs.committable() == one.committable()
        assert runs.finished_beyond() == one.finished_beyond()
        assert runs.unfinished == one.unfinished


def test_received_run_declines_what_needs_a_look_per_record() -> None:
    t = PartitionTracker(10, [(20, 25)])
    assert not t.received_run(10, 5)  # the first records after an assignment
    assert t.received(10)
    assert not t.received_run(11, 12)  # an inherited run ahead
    assert not t.received_run(12, 3)  # a gap after 10
    fresh = PartitionTracker()
    assert fresh.received(0) and fresh.received_run(1, 4)
    assert fresh.unfinished == 5 and fresh.committable() == 0
    assert not fresh.received_run(3, 2)  # a repeat


@given(scripts(), st.lists(st.integers(0, 2), max_size=80))
def test_finish_later_answers_as_if_each_finish_were_applied_at_once(
    script: tuple[int | None, list[tuple[int, int]], list[tuple[str, int]]],
    reads: list[int],
) -> None:
    """``finish_later`` notes finishes (repeats and offsets no longer pending included)
    and a tracker fed that way answers every read exactly as one fed with
    ``finished_if_pending``, whichever read comes next and whenever."""
    start, inherited, steps = script
    now = PartitionTracker(start, inherited)
    later = PartitionTracker(start, inherited)
    received: list[int] = []
    for i, (kind, value) in enumerate(steps):
        if kind == "receive":
            assert now.received(value) == later.received(value)
            received.append(value)
        elif received:
            # Any offset received (finished already or not) and sometimes one never
            # received: finished_if_pending ignores what is not pending.
            offset = received[value % len(received)] if value % 7 else value
            now.finished_if_pending(offset)
            later.finish_later(offset)
        read = reads[i] if i < len(reads) else 0
        if read == 0:
            continue  # no read: the noted finishes pile up
        if read == 1:
            assert later.committable() == now.committable()
            assert later.finished_beyond() == now.finished_beyond()
        assert later.unfinished == now.unfinished
        assert later.first_unfinished() == now.first_unfinished()
        assert later.commit_point(max_bytes=1_000_000) == now.commit_point(max_bytes=1_000_000)
    assert [later.is_pending(o) for o in received] == [now.is_pending(o) for o in received]
    assert later.commit_point() == now.commit_point()
