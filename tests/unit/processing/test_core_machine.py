"""The pure core as the processor drives it: receive, dispatch, finish, revoke, commit.

A Hypothesis state machine feeds records (random keys) of three partitions through
the trackers and the scheduler the way ``Processor`` does, finishes in-flight
records in any order, revokes partitions, and checks after every step that

* a commit never passes a record that is waiting or in flight,
* at most ``concurrency`` records are in flight, one per lane,
* within a lane, records start in offset order.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from aiogroup.processing.offset_metadata import decode
from aiogroup.processing.scheduler import ORDERINGS, Ordering, Scheduler, Work, lane_of
from aiogroup.processing.tracker import PartitionTracker
from aiogroup.structs import TopicPartition

TPS = [TopicPartition("t", p) for p in range(3)]


class Core(RuleBasedStateMachine):
    @initialize(ordering=st.sampled_from(ORDERINGS), concurrency=st.integers(1, 5))
    def setup(self, ordering: Ordering, concurrency: int) -> None:
        self.ordering = ordering
        self.sched = Scheduler(concurrency)
        self.trackers: dict[TopicPartition, PartitionTracker] = {
            tp: PartitionTracker() for tp in TPS
        }
        self.next = {tp: 0 for tp in TPS}
        self.unfinished: dict[TopicPartition, set[int]] = defaultdict(set)
        self.started: dict[Hashable, list[int]] = defaultdict(list)
        self.finished_before: dict[TopicPartition, set[int]] = defaultdict(set)

    def dispatch(self) -> None:
        for w in self.sched.take():
            self.started[(w.tp, w.lane)].append(w.offset)

    @rule(
        p=st.integers(0, 2),
        keys=st.lists(st.sampled_from([None, b"a", b"b"]), max_size=4),
        gap=st.integers(0, 2),
    )
    def receive(self, p: int, keys: list[bytes | None], gap: int) -> None:
        tp = TPS[p]
        tracker = self.trackers.get(tp)
        if tracker is None:
            return
        offset = self.next[tp] + gap
        for key in keys:
            process = tracker.received(offset)
            # Skipped only when a previous owner's commit said it was finished.
            assert process == (offset not in self.finished_before[tp]), offset
            if not process:
                offset += 1
                continue
            self.unfinished[tp].add(offset)
            self.sched.add(Work(tp, offset, lane_of(self.ordering, tp, key, offset)))
            offset += 1
        self.next[tp] = offset
        self.dispatch()

    @precondition(lambda self: bool(self.sched.in_flight))
    @rule(n=st.integers(0, 100))
    def finish(self, n: int) -> None:
        w = sorted(self.sched.in_flight, key=lambda w: (w.tp, w.offset))[
            n % len(self.sched.in_flight)
        ]
        tracker = self.trackers.get(w.tp)
        if tracker is not None:
            tracker.finished(w.offset)
            self.unfinished[w.tp].discard(w.offset)
        self.sched.done(w)
        self.dispatch()

    @rule(p=st.integers(0, 2))
    def revoke_and_reassign(self, p: int) -> None:
        tp = TPS[p]
        tracker = self.trackers.pop(tp, None)
        if tracker is None:
            self.trackers[tp] = PartitionTracker()  # assigned again, nothing committed
            self.finished_before[tp] = set()
            return
        point = tracker.commit_point(max_bytes=10_000)
        for w in self.sched.drop({tp}):  # drained: their tasks end
            self.sched.done(w)
        self.dispatch()
        if point is not None:
            offset, metadata = point
            assert all(offset <= o for o in self.unfinished[tp])
            # The next owner starts at the commit and skips exactly the finished ones.
            runs = decode(offset, metadata)
            self.trackers[tp] = PartitionTracker(offset, runs)
            self.finished_before[tp] = {o for a, b in runs for o in range(a, b)}
            self.next[tp] = offset
            self.unfinished[tp] = set()
            self.started = defaultdict(list, {k: v for k, v in self.started.items() if k[0] != tp})

    @invariant()
    def commits_never_pass_unfinished_work(self) -> None:
        for tp, tracker in self.trackers.items():
            point = tracker.committable()
            if point is not None:
                assert all(point <= o for o in self.unfinished[tp]), (tp, point)

    @invariant()
    def bounded_and_one_per_lane(self) -> None:
        lanes = [w.lane for w in self.sched.in_flight]
        assert len(lanes) <= self.sched.concurrency
        assert len(lanes) == len(set(lanes))

    @invariant()
    def lanes_start_in_offset_order(self) -> None:
        for offsets in self.started.values():
            assert offsets == sorted(offsets)


TestCore = Core.TestCase
