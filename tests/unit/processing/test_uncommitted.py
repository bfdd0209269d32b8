"""max_uncommitted: the work at risk after a crash, its start rule, and that it never stalls.

The rule itself (``UncommittedWork``) on hand-made cases, then the processor's take
(``Processor._take_bounded``: the rule, the reserved place of a partition's first
unfinished record, the over-bound escape) driven through random interleavings of
arrivals, starts, finishes and answered commits against a model of what a successor
would process again - with the real scheduler, trackers and commit path, and a fake
broker answer instead of I/O.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiogroup import GroupConsumer, Processor
from aiogroup.processing import offset_metadata
from aiogroup.processing.scheduler import Scheduler, Work, lane_of
from aiogroup.processing.tracker import PartitionTracker
from aiogroup.processing.uncommitted import UncommittedWork
from aiogroup.structs import OffsetAndMetadata, TopicPartition

A, B = "a", "b"


def gaps(**by_tp: int | None) -> Any:
    return lambda tp: by_tp.get(tp)


# -- the rule -----------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, None])
def test_the_limit_is_a_positive_int(limit: Any) -> None:
    with pytest.raises(ValueError, match="limit must be an int >= 1"):
        UncommittedWork(limit)


def test_started_records_count_until_an_answered_commit_covers_them() -> None:
    u = UncommittedWork(10)
    for o in (3, 4, 5, 8):
        u.started(A, o)
    u.started(A, 4)  # a retry's second attempt is the same record
    u.started(B, 0)
    assert (u.count, u.at_risk(A), u.at_risk(B)) == (5, 4, 1)
    # Offset 5 is the first unfinished: 3 and 4 below it are covered, 8 is listed.
    assert u.covered(A, 5, [(6, 7), (8, 9)]) == -3
    assert (u.count, u.at_risk(A)) == (2, 1)  # 5 (still running) and B's 0
    u.forget(B)
    assert u.count == 1 and u.partitions() == [A]


def test_the_latest_answered_commit_is_what_covers_not_the_union() -> None:
    """The broker keeps one (offset, metadata) per partition: a record an earlier
    commit listed and the latest one does not (its metadata cut) is at risk again."""
    u = UncommittedWork(10)
    for o in (0, 2, 3):
        u.started(A, o)
    u.covered(A, 0, [(2, 4)])
    assert u.at_risk(A) == 1  # only 0, still unfinished
    u.started(A, 5)
    u.covered(A, 0, [(5, 6)])  # 2 and 3 no longer listed: only the earlier commit had them
    assert u.at_risk(A) == 3  # 0, 2 and 3; 5 is listed now


def test_a_commit_without_runs_covers_only_below_its_offset() -> None:
    """Where the broker drops commit metadata (Tansu) the processor passes no runs."""
    u = UncommittedWork(10)
    for o in (0, 2, 3):
        u.started(A, o)
    u.covered(A, 1)
    assert u.at_risk(A) == 2


def test_the_count_alone_bounds_starts_far_from_the_limit() -> None:
    u = UncommittedWork(3)
    assert u.may_start(A, 7, gaps(a=0))  # far from the limit: no reserve is worked out
    for o in range(3):
        u.started(B, o)
    assert not u.may_start(A, 0, gaps(a=0, b=0))  # full


def test_a_waiting_first_unfinished_record_keeps_a_place() -> None:
    """Offset 10 (key x) waits; 11 (key y) ran and finished.  Where only the offset
    covers, 11 stays at risk until 10 has run: one place stays reserved for 10."""
    u = UncommittedWork(2)
    g = gaps(a=10)
    # With nothing at risk, starting 11 would leave 10 waiting behind it: that needs
    # 1 (itself) + 1 (10's place) <= 2.
    assert u.may_start(A, 11, g)
    u.started(A, 11)
    assert u.needs_reserve(A, 10)
    assert not u.may_start(A, 12, g)  # 2 at risk + 10's place > 2
    assert u.may_start(A, 10, g)  # the gap takes its own place


def test_a_limit_of_one_starts_each_partition_in_offset_order() -> None:
    u = UncommittedWork(1)
    g = gaps(a=10)
    assert not u.may_start(A, 11, g)  # would strand 10: 1 + 1 > 1
    assert u.may_start(A, 10, g)


def test_another_partitions_reserved_place_is_kept() -> None:
    u = UncommittedWork(3)
    u.started(A, 11)  # A's gap 10 waits: A holds a place
    g = gaps(a=10, b=0)
    assert u.reserved(g) == 1
    assert u.may_start(B, 0, g)  # 1 + 1 + A's place = 3
    u.started(B, 0)
    assert not u.may_start(B, 1, g)  # 3 at risk (with A's place) already
    assert u.may_start(A, 10, g)  # A's gap takes A's place: 2 + 1 = 3


# -- the processor's take, under random interleavings --------------------------------------


async def handler(record: Any) -> None:
    pass


class Sim:
    """A processor fed by hand: arrivals, bounded starts, finishes and answered commits,
    with the model of what a successor would process again after a crash now."""

    def __init__(
        self,
        rng: random.Random,
        *,
        partitions: int,
        records: int,
        keys: int,
        concurrency: int,
        limit: int,
        metadata_kept: bool,
        ordering: str = "key",
        metadata_max_bytes: int = offset_metadata.DEFAULT_MAX_BYTES,
    ) -> None:
        self.rng = rng
        #: With metadata cut at its bound, a later commit can uncover records: the
        #: count still equals the model, but may pass the limit.
        self.exact = metadata_max_bytes == offset_metadata.DEFAULT_MAX_BYTES
        consumer = GroupConsumer(group_id="g", enable_auto_commit=False)
        self.p = Processor(
            consumer,
            handler,
            concurrency=concurrency,
            ordering=ordering,  # type: ignore[arg-type]
            max_uncommitted=limit,
            metadata_max_bytes=metadata_max_bytes,
        )
        self.p._metadata_kept = metadata_kept
        self.answers: list[dict[TopicPartition, OffsetAndMetadata]] = []

        async def commit(offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
            self.answers.append(dict(offsets))

        consumer.commit = commit  # type: ignore[method-assign]
        self.tps = [TopicPartition("t", i) for i in range(partitions)]
        for tp in self.tps:
            self.p._trackers[tp] = PartitionTracker()
        self.keys = {(tp, o): rng.randrange(keys) for tp in self.tps for o in range(records)}
        self.arrived = dict.fromkeys(self.tps, 0)
        self.records = records
        self.limit = limit
        self.kept = metadata_kept
        self.started: set[tuple[TopicPartition, int]] = set()
        self.finished: set[tuple[TopicPartition, int]] = set()
        self.running: list[Work] = []

    # the steps

    def arrive(self, tp: TopicPartition, n: int) -> None:
        p = self.p
        first = self.arrived[tp]
        works = []
        for o in range(first, min(self.records, first + n)):
            assert p._trackers[tp].received(o)
            lane = lane_of(p._ordering, tp, self.keys[(tp, o)], o)
            works.append(Work(tp, o, lane))
            p._lane_at.setdefault(tp, {})[o] = lane
        self.arrived[tp] = first + len(works)
        p._sched.add_many(tp, works)

    def start(self) -> bool:
        work = self.p._take_bounded()
        if work is None:
            return False
        key = (work.tp, work.offset)
        assert key not in self.started, f"{key} started twice"
        self.started.add(key)
        self.running.append(work)
        return True

    def finish(self, i: int) -> None:
        work = self.running.pop(i % len(self.running))
        self.p._trackers[work.tp].finished_if_pending(work.offset)
        self.p._sched.done(work)
        self.finished.add((work.tp, work.offset))

    async def commit(self) -> bool:
        return bool(await self.p._commit(None))

    # the model

    def redo_now(self) -> int:
        """Records a successor would process again if this member died now: started
        here and not covered by the last answered commit of their partition."""
        covered: dict[TopicPartition, tuple[int, list[tuple[int, int]]]] = {}
        for answer in self.answers:
            for tp, oam in answer.items():
                runs = offset_metadata.decode(oam.offset, oam.metadata) if self.kept else []
                covered[tp] = (oam.offset, runs)
        redo = 0
        for tp, o in self.started:
            offset, runs = covered.get(tp, (0, []))
            if o >= offset and not any(s <= o < e for s, e in runs):
                redo += 1
        return redo

    def check(self) -> None:
        bound = self.p._bound
        assert bound is not None
        assert bound.count == self.redo_now()
        if self.exact:
            assert bound.count <= self.limit
        # The scheduler's order within a lane and its slot bound hold too.
        assert len(self.p._sched.in_flight) <= self.p._sched.concurrency

    async def run_to_the_end(self) -> None:
        """Everything arrives; then finish, commit and start until every record is
        finished: with no progress in a round, the bound has stalled the processor."""
        for tp in self.tps:
            self.arrive(tp, self.records)
        total = len(self.tps) * self.records
        for _ in range(4 * total + 10):
            moved = False
            while self.start():
                moved = True
                self.check()
            while self.running:
                self.finish(0)
                moved = True
            if await self.commit():
                moved = True
            self.check()
            if len(self.finished) == total:
                return
            assert moved, (
                f"stalled: {len(self.finished)}/{total} finished, "
                f"{self.p._bound.count if self.p._bound else 0} at risk"
            )
        raise AssertionError("did not finish")


async def interleave(sim: Sim, steps: list[tuple[str, int]]) -> None:
    for kind, n in steps:
        if kind == "arrive":
            sim.arrive(sim.tps[n % len(sim.tps)], 1 + n % 5)
        elif kind == "start":
            sim.start()
        elif kind == "finish" and sim.running:
            sim.finish(n)
        elif kind == "commit":
            await sim.commit()
        sim.check()
    await sim.run_to_the_end()


STEPS = st.lists(
    st.tuples(
        st.sampled_from(["arrive", "start", "start", "finish", "commit"]), st.integers(0, 50)
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    limit_extra=st.integers(0, 3),
    concurrency=st.integers(1, 4),
    kept=st.booleans(),
    ordering=st.sampled_from(["key", "partition", "unordered"]),
    steps=STEPS,
)
def test_the_bound_holds_exactly_and_never_stalls(
    seed: int, limit_extra: int, concurrency: int, kept: bool, ordering: str, steps: Any
) -> None:
    """At every step: what a successor would redo equals the count and stays <= the
    limit; and from wherever the steps left it, the processor finishes every record."""
    sim = Sim(
        random.Random(seed),
        partitions=3,
        records=12,
        keys=3,
        concurrency=concurrency,
        limit=concurrency + limit_extra,
        metadata_kept=kept,
        ordering=ordering,
    )
    asyncio.run(interleave(sim, steps))
    assert sim.p._over_bound == 0


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), steps=STEPS)
def test_metadata_cut_at_its_bound_never_stalls_the_processor(seed: int, steps: Any) -> None:
    """Metadata of at most 11 bytes: a later commit may stop listing records an earlier
    one did.  The processor then starts over the bound (said in the log) rather than
    stall; every record still finishes, and without a cut the bound is exact."""
    sim = Sim(
        random.Random(seed),
        partitions=2,
        records=20,
        keys=4,
        concurrency=2,
        limit=2,
        metadata_kept=True,
        metadata_max_bytes=11,
    )
    asyncio.run(interleave(sim, steps))


def test_a_stranded_gap_is_started_out_of_turn() -> None:
    """Key order, offset-only coverage, limit 2: 0 (key x) runs, 1 (key x) waits behind
    it, 2 (key y) runs and finishes, then 0 finishes.  Now 1 is the first unfinished
    record and 2 is at risk beyond it; after the commit (offset 1) only 1 may start -
    and it does, although lane y's record 3 is ahead of it in the ready queue."""

    async def go() -> None:
        sim = Sim(
            random.Random(0),
            partitions=1,
            records=4,
            keys=2,
            concurrency=2,
            limit=2,
            metadata_kept=False,
        )
        tp = sim.tps[0]
        sim.keys.update({(tp, 0): 0, (tp, 1): 0, (tp, 2): 1, (tp, 3): 1})
        sim.arrive(tp, 4)
        assert sim.start() and sim.start()  # 0 and 2
        assert {w.offset for w in sim.running} == {0, 2}
        sim.finish(1)  # 2
        sim.finish(0)  # 0
        assert not sim.start()  # 2 at risk, 0 not yet committed: 2 + nothing more
        assert sim.p._bound_blocked
        assert await sim.commit()  # offset 1: 0 covered, 2 is not (no metadata)
        assert sim.p._sched.peek() is not None and sim.p._sched.peek().offset == 3
        assert sim.start()
        assert [w.offset for w in sim.running] == [1]  # out of turn, in its reserved place
        assert not sim.start()  # 3 would strand nothing, but 1 + 2 at risk = limit
        sim.check()

    asyncio.run(go())


# -- the scheduler's out-of-turn start -------------------------------------------------------


def test_take_lane_starts_a_lane_head_out_of_turn_and_skips_its_stale_place() -> None:
    tp = TopicPartition("t", 0)
    s = Scheduler(3)
    works = [Work(tp, o, (tp, k)) for o, k in enumerate("xyzx")]
    s.add_many(tp, works)
    assert s.peek() is works[0]
    assert s.take_lane((tp, "z"), 1) is None  # lane z's head is 2, not 1
    assert s.take_lane((tp, "z"), 2) is works[2]
    assert s.take_lane((tp, "z"), 2) is None  # busy now
    assert s.take_one() is works[0]
    assert s.take_one() is works[1]
    assert s.take_one() is None  # z's stale place skipped; x busy; 3 slots taken anyway
    s.done(works[2])
    assert s.peek() is None  # lane x busy, lane z empty and gone
    s.done(works[0])
    assert s.take_one() is works[3]
    assert s.queued == 0 and s.blocked == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "take", "lane", "done"]), st.integers(0, 30)),
        max_size=80,
    )
)
def test_out_of_turn_starts_keep_lane_order_and_one_record_per_lane(
    steps: list[tuple[str, int]],
) -> None:
    tp = TopicPartition("t", 0)
    s = Scheduler(3)
    nxt = 0
    started: dict[object, list[int]] = {}
    added: dict[object, list[int]] = {}
    for kind, n in steps:
        if kind == "add":
            w = Work(tp, nxt, (tp, n % 3))
            added.setdefault(w.lane, []).append(nxt)
            nxt += 1
            s.add(w)
        elif kind == "take" and (w := s.take_one()) is not None:
            started.setdefault(w.lane, []).append(w.offset)
        elif kind == "lane":
            lane = (tp, n % 3)
            head = added.get(lane, [])[len(started.get(lane, [])) :]
            if head and (w := s.take_lane(lane, head[0])) is not None:
                started.setdefault(w.lane, []).append(w.offset)
        elif kind == "done" and s.in_flight:
            s.done(sorted(s.in_flight, key=lambda w: w.offset)[n % len(s.in_flight)])
        lanes_busy = [w.lane for w in s.in_flight]
        assert len(lanes_busy) == len(set(lanes_busy))  # one record per lane at a time
        for lane, offs in started.items():
            assert offs == added[lane][: len(offs)]  # in offset order within the lane
        assert s.runnable >= 0 and s.blocked >= 0


# -- revoke and lost while slots wait -------------------------------------------------------


@pytest.mark.parametrize("how", ["revoked", "lost"])
def test_a_revoke_or_loss_while_slots_wait_for_a_commit_does_not_wait_for_it(how: str) -> None:
    """At the bound with records of the partition in flight: the hook drains them (the
    drain deadline bounds it), commits (revoke) or not (lost), and forgets what the
    partition held at risk - nothing awaits the commit the slots were waiting for."""

    async def go() -> None:
        sim = Sim(
            random.Random(1),
            partitions=2,
            records=6,
            keys=6,
            concurrency=2,
            limit=2,
            metadata_kept=False,
        )
        tp, other = sim.tps
        sim.arrive(tp, 6)
        sim.arrive(other, 6)
        assert sim.start() and sim.start()
        sim.finish(0)  # finished, not covered: 2 at risk with one slot free
        assert not sim.start() and sim.p._bound_blocked
        gone = {w.tp for w in sim.running}
        # The in-flight records' handler tasks: they end when the drain cancels them.
        loop = asyncio.get_running_loop()
        for w in sim.running:
            sim.p._tasks[w] = loop.create_task(asyncio.sleep(60))
        hook = sim.p.partitions_revoked if how == "revoked" else sim.p.partitions_lost
        sim.p._drain_timeout = 0.05
        ended = asyncio.create_task(hook(set(sim.tps)))
        await asyncio.sleep(0.01)
        for w in list(sim.running):  # what _work's finally does once a task ends
            sim.p._tasks[w].cancel()
            sim.p._tasks.pop(w, None)
            sim.p._sched.done(w)
        await asyncio.wait_for(ended, 5)
        bound = sim.p._bound
        assert bound is not None and bound.count == 0
        assert not sim.p._lane_at and not sim.p._trackers
        assert gone <= set(sim.tps)
        if how == "lost":
            assert sim.answers == []  # nothing committed for lost partitions

    asyncio.run(go())


def test_a_cut_list_at_the_limit_with_nothing_running_starts_over_the_bound() -> None:
    """The case Hypothesis found (seed 322, no steps): a commit whose metadata was cut
    left the count at the limit with nothing running and nothing left to commit; the
    processor stalled there (30 of 40 finished) until the over-bound start was tried
    at the limit too."""
    sim = Sim(
        random.Random(322),
        partitions=2,
        records=20,
        keys=4,
        concurrency=2,
        limit=2,
        metadata_kept=True,
        metadata_max_bytes=11,
    )
    asyncio.run(interleave(sim, []))
    assert len(sim.finished) == 40
    assert sim.p._over_bound > 0


def test_a_slot_waiting_for_a_commit_parks_its_task_and_gets_the_next_record() -> None:
    """At the bound a handler task whose next start is refused parks (no record held)
    rather than ending; after the answer _dispatch hands it the next record - no new
    task per record - and stop() releases the parked tasks."""

    async def go() -> None:
        sim = Sim(
            random.Random(2),
            partitions=1,
            records=8,
            keys=8,
            concurrency=2,
            limit=2,
            metadata_kept=False,
        )
        p = sim.p
        (tp,) = sim.tps
        sim.arrive(tp, 8)
        loop = asyncio.get_running_loop()
        p._loop_time = loop.time
        created: list[asyncio.Task[Any]] = []
        real_create = loop.create_task

        def counting(coro: Any, **kw: Any) -> asyncio.Task[Any]:
            task = real_create(coro, **kw)
            created.append(task)
            return task

        loop.create_task = counting  # type: ignore[method-assign]
        try:
            p._dispatch()  # two tasks, two records
            for _ in range(5):
                await asyncio.sleep(0)
            assert len(created) == 2
            # Both records finished; the next starts are refused: both tasks park.
            assert p._bound_blocked and len(p._parked) == 2
            assert not p._sched.in_flight and not p._tasks
            assert all(not t.done() for t in created)
            for _ in range(2):  # an answer, then the slots are refilled by the parked
                assert await sim.commit()
                p._bound_blocked = False
                p._dispatch()
                for _ in range(5):
                    await asyncio.sleep(0)
            assert len(created) == 2  # no task per record
            assert p._finished == 6 and len(p._parked) == 2
            p._stopping = True
            p._release_parked()
            await asyncio.wait_for(asyncio.gather(*created), 5)
            assert not p._parked and p._finished == 6
        finally:
            loop.create_task = real_create  # type: ignore[method-assign]

    asyncio.run(go())
