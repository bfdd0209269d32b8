"""The dispatcher: which received records may start now, under the ordering mode.

Records wait in *lanes*; a lane runs one record at a time, in offset order, and
different lanes run at once.  The ordering mode decides the lane of a record:

* ``"partition"``: the lane is the partition - one record of a partition at a
  time, partitions in parallel (pipelined: the next record starts the moment the
  previous one finishes);
* ``"key"``: the lane is (partition, key) - the same key in offset order, different
  keys at once; records with no key share their partition's (partition, None) lane,
  so they keep partition order among themselves;
* ``"unordered"``: every record is its own lane.

At most ``concurrency`` records are in flight.  Lanes with a record ready wait in
one FIFO queue and a lane goes to its back after each record, so a hot key (a lane
with a long queue) takes one slot at a time and never holds back the others.

Pure: the processor feeds :class:`Work` items and starts what :meth:`Scheduler.take`
returns; nothing here awaits or reads a clock.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Hashable
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args

from aiogroup.structs import TopicPartition

__all__ = ["ORDERINGS", "Ordering", "Scheduler", "Work", "lane_of"]

Ordering = Literal["partition", "key", "unordered"]
ORDERINGS: tuple[str, ...] = get_args(Ordering)


def lane_of(ordering: Ordering, tp: TopicPartition, key: Any, offset: int) -> Hashable:
    """The lane a record waits in (see the module docstring).

    A key's lane is the plain tuple (partition number, key, topic): made of atoms
    (int, bytes or None, str), so the garbage collector stops tracking it at its first
    collection.  A read-ahead record waits long enough to outlive the young
    collections, and each tracked object a waiting record holds is scanned by them and
    promoted, which makes full collections come sooner (issue 25, profiled with a
    broker at concurrency 1000: the collector was a sixth of the CPU).  ``lane[1]`` is
    the key.
    """
    if ordering == "partition":
        lane: Hashable = tp
        return lane
    if ordering == "key":
        return (tp.partition, key, tp.topic)
    return (tp, offset, None)


#: A lane's waiting records: one Work alone (most lanes, with many keys: no deque
#: allocated per record), or a deque of two or more in offset order.
_Queue = Union["Work", "deque[Work]"]


@dataclass(eq=False, slots=True)
class Work:
    """One record on its way through the processor."""

    tp: TopicPartition
    offset: int
    lane: Hashable
    record: Any = None
    nbytes: int = 0
    #: Set by the processor: the handler task, its start time.
    started: float | None = field(default=None)


class Scheduler:
    """Lanes of waiting records, the ready queue and the in-flight count."""

    def __init__(self, concurrency: int) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.concurrency = concurrency
        self._lanes: dict[Hashable, _Queue] = {}
        #: Lanes whose head may start (not busy, not empty), oldest first.
        self._ready: deque[Hashable] = deque()
        self._busy: set[Hashable] = set()
        self.in_flight: set[Work] = set()
        self.queued = 0
        self.queued_bytes = 0
        #: Waiting records behind a busy lane (a key whose previous record still runs):
        #: they need memory, not handler slots, so the processor bounds them by bytes.
        self.blocked = 0
        #: Waiting records per partition (the processor pauses the fullest when full).
        self.waiting_by_tp: dict[TopicPartition, int] = {}
        self._bytes_by_tp: dict[TopicPartition, int] = {}
        #: Ready-queue entries left behind by :meth:`take_lane` (skipped when reached).
        self._stale = 0

    def add(self, work: Work) -> None:
        """A received record waits in its lane."""
        lane = self._lanes.get(work.lane)
        if lane is None:
            self._lanes[work.lane] = work
            if work.lane not in self._busy:
                self._ready.append(work.lane)
        elif type(lane) is Work:
            self._lanes[work.lane] = deque((lane, work))
        else:
            lane.append(work)  # type: ignore[union-attr]
        if work.lane in self._busy:
            self.blocked += 1
        self.queued += 1
        self.queued_bytes += work.nbytes
        self.waiting_by_tp[work.tp] = self.waiting_by_tp.get(work.tp, 0) + 1
        self._bytes_by_tp[work.tp] = self._bytes_by_tp.get(work.tp, 0) + work.nbytes

    def add_many(self, tp: TopicPartition, works: list[Work]) -> None:
        """:meth:`add` for records of one partition, in offset order (one read's worth).

        The same result as adding them one by one; the per-partition counts move once
        per call instead of once per record (the read path at concurrency 1000 takes
        some 150,000 records a second, and :meth:`add` was its dearest step).
        """
        if not works:
            return
        lanes = self._lanes
        ready = self._ready
        busy = self._busy
        blocked = 0
        nbytes = 0
        for work in works:
            key = work.lane
            lane = lanes.get(key)
            if lane is None:
                lanes[key] = work
                if key in busy:
                    blocked += 1
                else:
                    ready.append(key)
                nbytes += work.nbytes
                continue
            if key in busy:
                blocked += 1
            if type(lane) is Work:
                lanes[key] = deque((lane, work))
            else:
                lane.append(work)  # type: ignore[union-attr]
            nbytes += work.nbytes
        self.blocked += blocked
        self.queued += len(works)
        self.queued_bytes += nbytes
        self.waiting_by_tp[tp] = self.waiting_by_tp.get(tp, 0) + len(works)
        self._bytes_by_tp[tp] = self._bytes_by_tp.get(tp, 0) + nbytes

    def take(self) -> list[Work]:
        """The records to start now (their lanes become busy), up to the concurrency."""
        started: list[Work] = []
        while (work := self.take_one()) is not None:
            started.append(work)
        return started

    def take_one(self) -> Work | None:
        """The next record to start in a slot just freed (:meth:`take` for one record)."""
        ready = self._ready
        in_flight = self.in_flight
        if not ready or len(in_flight) >= self.concurrency:
            return None
        if self._stale and self._drop_stale() is None:
            return None
        key = ready.popleft()
        lanes = self._lanes
        work = lanes[key]
        if type(work) is not Work:
            return self._start(key)
        # _start for a lane of one record (most lanes with many keys), inline: this
        # runs once per record, and a call more was a tenth of the scheduler's cost.
        del lanes[key]
        self._busy.add(key)
        in_flight.add(work)
        self.queued -= 1
        nbytes = work.nbytes
        self.queued_bytes -= nbytes
        tp = work.tp
        waiting_by_tp = self.waiting_by_tp
        left = waiting_by_tp[tp] - 1
        if left:
            waiting_by_tp[tp] = left
            self._bytes_by_tp[tp] -= nbytes
        else:
            del waiting_by_tp[tp]
            del self._bytes_by_tp[tp]
        return work

    def peek(self) -> Work | None:
        """The record :meth:`take_one` would start next (None: none, or no free slot)."""
        if not self._ready or len(self.in_flight) >= self.concurrency:
            return None
        key = self._drop_stale() if self._stale else self._ready[0]
        return None if key is None else _head(self._lanes[key])

    def take_lane(self, key: Hashable, offset: int) -> Work | None:
        """Start the head of lane ``key`` out of turn if it is the record at ``offset``
        (None: it is not, the lane is busy or gone, or every slot is taken).  The
        lane's place in the ready queue goes stale and is skipped when reached.

        The processor's ``max_uncommitted`` bound needs it: a partition's first
        unfinished record may have to start before the lanes ahead of it.
        """
        if (
            key in self._busy
            or key not in self._lanes
            or len(self.in_flight) >= self.concurrency
            or _head(self._lanes[key]).offset != offset
        ):
            return None
        self._stale += 1
        return self._start(key)

    def _drop_stale(self) -> Hashable | None:
        """Pop the ready queue's stale entries (lanes started out of turn); its head."""
        ready = self._ready
        while ready:
            key = ready[0]
            if key not in self._busy and key in self._lanes:
                return key
            ready.popleft()
            self._stale = max(0, self._stale - 1)
        return None

    def _start(self, key: Hashable) -> Work:
        lane = self._lanes[key]
        if type(lane) is Work:
            work = lane
            del self._lanes[key]
        else:
            work = lane.popleft()  # type: ignore[union-attr]
            # Behind the record that starts now (a deque never empties: it holds two
            # or more when made, and one left becomes the lone Work again).
            if len(lane) == 1:  # type: ignore[arg-type]
                self._lanes[key] = lane[0]  # type: ignore[index]
                self.blocked += 1
            else:
                self.blocked += len(lane)  # type: ignore[arg-type]
        self._busy.add(key)
        self.in_flight.add(work)
        self.queued -= 1
        nbytes = work.nbytes
        self.queued_bytes -= nbytes
        # _unwait, inline (this runs once per record started).
        tp = work.tp
        left = self.waiting_by_tp[tp] - 1
        if left:
            self.waiting_by_tp[tp] = left
            self._bytes_by_tp[tp] -= nbytes
        else:
            del self.waiting_by_tp[tp]
            del self._bytes_by_tp[tp]
        return work

    def done(self, work: Work) -> None:
        """``work`` ended (finished, failed or cancelled): its lane may go on."""
        self.in_flight.discard(work)
        key = work.lane
        self._busy.discard(key)
        lane = self._lanes.get(key)
        if lane is not None:
            self.blocked -= 1 if type(lane) is Work else len(lane)  # type: ignore[arg-type]
            self._ready.append(key)

    def done_take_one(self, work: Work) -> Work | None:
        """:meth:`done` then :meth:`take_one`, in one call: a handler task ending a
        record and going on with the next (once per record; the two calls were a
        fifth of the scheduler's cost at concurrency 1000).  The same steps as the two
        methods, inline; tests hold it to them."""
        in_flight = self.in_flight
        in_flight.discard(work)
        key = work.lane
        busy = self._busy
        busy.discard(key)
        lanes = self._lanes
        ready = self._ready
        lane = lanes.get(key)
        if lane is not None:
            self.blocked -= 1 if type(lane) is Work else len(lane)  # type: ignore[arg-type]
            ready.append(key)
        # take_one
        if not ready or len(in_flight) >= self.concurrency:
            return None
        if self._stale and self._drop_stale() is None:
            return None
        key = ready.popleft()
        nxt = lanes[key]
        if type(nxt) is not Work:
            return self._start(key)
        del lanes[key]
        busy.add(key)
        in_flight.add(nxt)
        self.queued -= 1
        nbytes = nxt.nbytes
        self.queued_bytes -= nbytes
        tp = nxt.tp
        waiting_by_tp = self.waiting_by_tp
        left = waiting_by_tp[tp] - 1
        if left:
            waiting_by_tp[tp] = left
            self._bytes_by_tp[tp] -= nbytes
        else:
            del waiting_by_tp[tp]
            del self._bytes_by_tp[tp]
        return nxt

    def set_aside(self, work: Work) -> None:
        """``work`` waits outside the concurrency bound: its slot goes to another record,
        its lane stays busy (the next record of its lane waits for :meth:`done`).

        For a record whose handler has returned but whose end must wait (a transactional
        processor holds back a finish its next commit could not represent): holding its
        slot, every slot could end up waiting for a record that has none.
        """
        self.in_flight.discard(work)

    def drop(self, partitions: Collection[TopicPartition]) -> list[Work]:
        """Forget the waiting records of ``partitions``; returns their in-flight ones.

        Their lanes stay busy until :meth:`done` is called for each in-flight record.
        """
        for key in [k for k, lane in self._lanes.items() if _head(lane).tp in partitions]:
            if key in self._busy:
                self.blocked -= len(self.lane_records(key))
            for work in self.lane_records(self._lanes.pop(key)):
                self.queued -= 1
                self.queued_bytes -= work.nbytes
                self._unwait(work)
        self._ready = deque(k for k in self._ready if k in self._lanes)
        return [w for w in self.in_flight if w.tp in partitions]

    def lane_records(self, lane: Hashable | _Queue) -> list[Work]:
        """The waiting records of a lane (by its key, or its queue), in offset order."""
        queue = lane if isinstance(lane, Work | deque) else self._lanes.get(lane)
        if queue is None:
            return []
        return [queue] if type(queue) is Work else list(queue)  # type: ignore[arg-type]

    def waiting_lanes(self) -> dict[Hashable, list[Work]]:
        """Every lane with records waiting: its records in offset order (for tests)."""
        return {key: self.lane_records(q) for key, q in self._lanes.items()}

    @property
    def runnable(self) -> int:
        """Waiting records whose lane is free or will be next: the ones slots wait for."""
        return self.queued - self.blocked

    def waiting(self, tp: TopicPartition | None = None) -> int:
        """Records waiting (all, or of one partition)."""
        if tp is None:
            return self.queued
        return self.waiting_by_tp.get(tp, 0)

    def waiting_bytes(self, tp: TopicPartition) -> int:
        """Bytes of the records of ``tp`` waiting (key, value and per-record overhead)."""
        return self._bytes_by_tp.get(tp, 0)

    def _unwait(self, work: Work) -> None:
        tp = work.tp
        left = self.waiting_by_tp[tp] - 1
        if left:
            self.waiting_by_tp[tp] = left
            self._bytes_by_tp[tp] -= work.nbytes
        else:
            del self.waiting_by_tp[tp]
            del self._bytes_by_tp[tp]


def _head(queue: _Queue) -> Work:
    """The first waiting record of a lane's queue."""
    return queue if type(queue) is Work else queue[0]  # type: ignore[index]
