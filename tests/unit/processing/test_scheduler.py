"""The dispatcher: lanes, the concurrency bound, order within a lane, fairness."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiogroup.processing.scheduler import ORDERINGS, Scheduler, Work, lane_of
from aiogroup.structs import TopicPartition

TP = [TopicPartition("t", p) for p in range(3)]


def work(ordering: str, p: int, offset: int, key: object) -> Work:
    tp = TP[p]
    return Work(tp, offset, lane_of(ordering, tp, key, offset), nbytes=10)  # type: ignore[arg-type]


@given(
    st.sampled_from(ORDERINGS),
    st.integers(1, 6),
    st.lists(
        st.one_of(
            st.tuples(st.just("add"), st.integers(0, 2), st.sampled_from([None, b"a", b"b", b"c"])),
            st.tuples(st.just("done"), st.integers(0, 100), st.none()),
            # A handler task that ends a record and goes on with the next (take_one).
            st.tuples(st.just("next"), st.integers(0, 100), st.none()),
            # The same, in one call (done_take_one).
            st.tuples(st.just("next1"), st.integers(0, 100), st.none()),
            st.tuples(st.just("drop"), st.integers(0, 2), st.none()),
        ),
        max_size=80,
    ),
)
def test_invariants(ordering: str, concurrency: int, steps: list[tuple[str, int, object]]) -> None:
    s = Scheduler(concurrency)
    next_offset = [0, 0, 0]
    started: dict[object, list[int]] = defaultdict(list)
    added: dict[object, list[int]] = defaultdict(list)
    lane_tp: dict[object, TopicPartition] = {}
    for kind, n, key in steps:
        if kind == "add":
            w = work(ordering, n, next_offset[n], key)
            next_offset[n] += 1
            added[w.lane].append(w.offset)
            lane_tp[w.lane] = w.tp
            s.add(w)
        elif kind == "drop":  # a revoke: waiting records forgotten, in-flight ones end
            for w in s.drop({TP[n]}):
                s.done(w)
            for lane, tp in lane_tp.items():  # the dropped records will never start
                if tp == TP[n]:
                    added[lane] = list(started[lane])
        elif s.in_flight:
            w = sorted(s.in_flight, key=lambda w: (w.tp, w.offset))[n % len(s.in_flight)]
            if kind == "next1":
                if (nxt := s.done_take_one(w)) is not None:
                    started[nxt.lane].append(nxt.offset)
            else:
                s.done(w)
            if kind == "next" and (nxt := s.take_one()) is not None:
                started[nxt.lane].append(nxt.offset)
            if kind in ("next", "next1"):
                # Work conserving without take(): the freed slot was the only free one.
                busy = {w.lane for w in s.in_flight}
                free = len(s.in_flight) < concurrency
                assert not (free and any(lane not in busy for lane in s.waiting_lanes()))
        for w in s.take():
            started[w.lane].append(w.offset)
        lanes = [w.lane for w in s.in_flight]
        assert (
            sum(s.waiting_by_tp.values())
            == s.waiting()
            == sum(map(len, s.waiting_lanes().values()))
        )
        for tp, n in s.waiting_by_tp.items():
            assert (
                n == sum(1 for lane in s.waiting_lanes().values() for w in lane if w.tp == tp) > 0
            )
            assert s.waiting_bytes(tp) == 10 * n
        # Blocked = waiting behind a lane whose record runs; the rest is runnable.
        assert s.blocked == sum(len(q) for lane, q in s.waiting_lanes().items() if lane in lanes)
        assert s.runnable == s.waiting() - s.blocked >= 0
        assert len(s.in_flight) <= concurrency
        assert len(lanes) == len(set(lanes))  # one record per lane at a time
        # Work conserving: a free slot and a startable lane never coexist.
        free_lanes = s.waiting() and len(s.in_flight) < concurrency
        assert not (free_lanes and any(lane not in lanes for lane in s.waiting_lanes()))
    for lane, offsets in started.items():
        assert offsets == added[lane][: len(offsets)]  # offset order within a lane
    if ordering == "partition":
        assert all(isinstance(lane, TopicPartition) for lane in started)


def test_take_one_fills_the_slot_just_freed_and_no_more() -> None:
    s = Scheduler(2)
    for i in range(4):
        s.add(work("unordered", 0, i, None))
    first = s.take()
    assert [w.offset for w in first] == [0, 1]
    assert s.take_one() is None  # no slot free
    s.done(first[0])
    nxt = s.take_one()
    assert nxt is not None and nxt.offset == 2
    assert s.take_one() is None and len(s.in_flight) == 2
    s.done(first[1])
    s.done(nxt)
    last = s.take_one()
    assert last is not None and last.offset == 3
    assert s.take_one() is None  # nothing waiting
    assert s.waiting() == 0 and s.queued_bytes == 0


def test_hot_key_does_not_stall_the_others() -> None:
    s = Scheduler(2)
    for i in range(100):
        s.add(work("key", 0, i, b"hot"))
    for i, key in enumerate([b"a", b"b", b"c", b"d"]):
        s.add(work("key", 0, 100 + i, key))
    order = []
    while s.waiting() or s.in_flight:
        for w in s.take():
            order.append(w.lane[1])  # type: ignore[index]
        s.done(min(s.in_flight, key=lambda w: w.offset))
    # The four cold keys start among the first six records, not after the 100 hot ones.
    assert {b"a", b"b", b"c", b"d"} <= set(order[:6])


def test_key_mode_runs_keys_at_once_and_null_keys_by_partition() -> None:
    s = Scheduler(10)
    for i, key in enumerate([b"a", b"a", b"b", None, None]):
        s.add(work("key", 0, i, key))
    s.add(work("key", 1, 0, None))
    assert sorted((w.tp.partition, w.offset) for w in s.take()) == [(0, 0), (0, 2), (0, 3), (1, 0)]


def test_unordered_and_partition_modes() -> None:
    s = Scheduler(10)
    for i in range(3):
        s.add(work("unordered", 0, i, b"a"))
    assert len(s.take()) == 3
    p = Scheduler(10)
    for i in range(3):
        p.add(work("partition", 0, i, i))
    p.add(work("partition", 1, 0, None))
    assert sorted((w.tp.partition, w.offset) for w in p.take()) == [(0, 0), (1, 0)]


def test_drop_forgets_waiting_records_and_returns_in_flight() -> None:
    s = Scheduler(1)
    a, b, c = work("key", 0, 0, b"x"), work("key", 0, 1, b"y"), work("key", 1, 0, b"z")
    for w in (a, b, c):
        s.add(w)
    assert s.take() == [a]
    assert s.drop({TP[0]}) == [a]
    assert s.waiting() == 1 and s.queued_bytes == 10
    s.done(a)
    assert s.take() == [c]


def test_concurrency_must_be_positive() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        Scheduler(0)


@given(
    st.sampled_from(ORDERINGS),
    st.integers(1, 4),
    st.lists(
        st.one_of(
            st.tuples(
                st.just("batch"),
                st.integers(0, 2),
                st.lists(st.sampled_from([None, b"a", b"b", b"c"]), max_size=6),
            ),
            st.tuples(st.just("next"), st.integers(0, 100), st.none()),
        ),
        max_size=40,
    ),
)
def test_add_many_is_adding_one_by_one(
    ordering: str, concurrency: int, steps: list[tuple[str, int, object]]
) -> None:
    """The read path adds a partition's records at once; nothing may differ from one by one."""
    one, many = Scheduler(concurrency), Scheduler(concurrency)
    next_offset = [0, 0, 0]

    def state(s: Scheduler) -> tuple[object, ...]:
        return (
            s.queued,
            s.queued_bytes,
            s.blocked,
            s.runnable,
            dict(s.waiting_by_tp),
            {tp: s.waiting_bytes(tp) for tp in TP},
            sorted((w.tp, w.offset) for w in s.in_flight),
        )

    for kind, n, keys in steps:
        if kind == "batch":
            assert isinstance(keys, list)
            batch_one, batch_many = [], []
            for key in keys:
                batch_one.append(work(ordering, n, next_offset[n], key))
                batch_many.append(work(ordering, n, next_offset[n], key))
                next_offset[n] += 1
            for w in batch_one:
                one.add(w)
            many.add_many(TP[n], batch_many)
        else:
            for s in (one, many):
                if s.in_flight:
                    w = sorted(s.in_flight, key=lambda w: (w.tp, w.offset))[n % len(s.in_flight)]
                    s.done(w)
        started_one = [(w.tp, w.offset) for w in one.take()]
        started_many = [(w.tp, w.offset) for w in many.take()]
        assert started_one == started_many
        assert state(one) == state(many)


@given(
    st.sampled_from(ORDERINGS),
    st.integers(1, 4),
    st.lists(
        st.tuples(
            st.sampled_from(["add", "next", "take_lane", "drop"]),
            st.integers(0, 100),
            st.sampled_from([None, b"a", b"b"]),
        ),
        max_size=60,
    ),
)
def test_done_take_one_is_done_then_take_one(
    ordering: str, concurrency: int, steps: list[tuple[str, int, object]]
) -> None:
    """Two schedulers fed alike, one ending records with done() + take_one(), the other
    with done_take_one(): the same record starts each time, and the same state after."""
    a, b = Scheduler(concurrency), Scheduler(concurrency)
    offsets = [0, 0, 0]
    # The same records in both, paired by (partition, offset).
    for kind, n, key in steps:
        if kind == "add":
            p = n % 3
            a.add(work(ordering, p, offsets[p], key))
            b.add(work(ordering, p, offsets[p], key))
            offsets[p] += 1
        elif kind == "drop":
            for s in (a, b):
                for w in s.drop({TP[n % 3]}):
                    s.done(w)
        elif kind == "take_lane":  # a start out of turn leaves a stale ready entry
            heads = sorted((q[0].tp, q[0].offset, lane) for lane, q in a.waiting_lanes().items())
            if heads:
                _tp, offset, lane = heads[n % len(heads)]
                assert _ident(a.take_lane(lane, offset)) == _ident(b.take_lane(lane, offset))
        elif a.in_flight:
            pick = sorted((w.tp, w.offset) for w in a.in_flight)[n % len(a.in_flight)]
            wa = next(w for w in a.in_flight if (w.tp, w.offset) == pick)
            wb = next(w for w in b.in_flight if (w.tp, w.offset) == pick)
            a.done(wa)
            na = a.take_one()
            nb = b.done_take_one(wb)
            assert _ident(na) == _ident(nb)
        a.take()
        b.take()
        assert sorted((w.tp, w.offset) for w in a.in_flight) == sorted(
            (w.tp, w.offset) for w in b.in_flight
        )
        assert (a.queued, a.queued_bytes, a.blocked, a.waiting_by_tp) == (
            b.queued,
            b.queued_bytes,
            b.blocked,
            b.waiting_by_tp,
        )
        assert {k: [w.offset for w in q] for k, q in a.waiting_lanes().items()} == {
            k: [w.offset for w in q] for k, q in b.waiting_lanes().items()
        }


def _ident(w: Work | None) -> tuple[TopicPartition, int] | None:
    return None if w is None else (w.tp, w.offset)
