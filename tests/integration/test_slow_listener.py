"""A slow rebalance listener while another member joins, judged from outside the members.

Issue 12's scenario: member A owns every partition (session 6 s, heartbeat 1 s,
max poll interval 120 s).  Member B joins while A's ``on_partitions_revoked`` - or,
separately, A's ``on_partitions_assigned`` - runs five times the session timeout,
awaiting ``asyncio.sleep`` (async listener) or blocking in ``time.sleep`` (sync
listener, which aiogroup runs in its listener thread).  Eager and cooperative.

Each member runs on its own event loop in its own thread, as if it were its own
process: a listener that blocked A's loop must not also freeze B or the observer.
What is judged, and how:

* the broker's view - an observer polls DescribeGroups on the coordinator over a
  bare connection and sees A's member id in the group in every answer, from A's
  first assignment until the group has converged (A was never evicted);
* the ownership history - every member appends, with ``time.monotonic()``, the
  start of each assigned callback, the end of each revoke callback, each lost
  callback and each record handed to the application; no partition is held by two
  members at once (A holds a partition until its revoke callback *returns*), and
  no record is handed to a member that does not hold its partition;
* the outcome - a clean 2/2 split of the four partitions, every produced record
  delivered, no lost callback, no error raised to either application.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaClient
from aiokafka.protocol.admin import DescribeGroupsRequest
from test_listener_contract import produce

from aiogroup._protocol.group import FindCoordinatorRequest, parse_find_coordinator
from aiogroup.consumer import GroupConsumer
from aiogroup.listeners import AsyncConsumerRebalanceListener, ConsumerRebalanceListener
from aiogroup.structs import TopicPartition

pytestmark = pytest.mark.integration

SESSION_MS = 6000
HEARTBEAT_MS = 1000
MAX_POLL_MS = 120_000
SLOW = 5 * SESSION_MS / 1000  # the slow callback runs five times the session timeout
PARTITIONS = 4
PER_PARTITION = 5
WAIT = 90.0  # upper bound for any one group transition on a test broker
STRATEGIES = {"eager": "range", "cooperative": "cooperative-sticky"}


# -- the ownership history ---------------------------------------------------------------------


@dataclass(frozen=True)
class Ev:
    at: float
    member: str
    kind: str  # assigned | revoke-start | revoke-end | lost | record | member-id | error
    partitions: frozenset[int] = frozenset()
    offset: int = -1
    detail: str = ""


@dataclass
class History:
    """Appended to from every member's thread; read by the test."""

    events: list[Ev] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, member: str, kind: str, partitions: Any = (), **kw: Any) -> None:
        parts = frozenset(
            tp.partition if isinstance(tp, TopicPartition) else tp for tp in partitions
        )
        with self.lock:
            self.events.append(Ev(time.monotonic(), member, kind, parts, **kw))

    def snapshot(self) -> list[Ev]:
        with self.lock:
            return sorted(self.events, key=lambda e: e.at)

    def of(self, member: str, kind: str) -> list[Ev]:
        return [e for e in self.snapshot() if e.member == member and e.kind == kind]

    def holdings(self) -> dict[str, set[int]]:
        held: dict[str, set[int]] = {}
        for e in self.snapshot():
            if e.kind == "assigned":
                held.setdefault(e.member, set()).update(e.partitions)
            elif e.kind in ("revoke-end", "lost"):
                held.setdefault(e.member, set()).difference_update(e.partitions)
        return held

    def dump(self) -> str:
        events = self.snapshot()
        t0 = events[0].at if events else 0.0
        return "\n".join(
            f"{e.at - t0:8.3f} {e.member} {e.kind} {sorted(e.partitions)}"
            + (f"@{e.offset}" if e.offset >= 0 else "")
            + (f" {e.detail}" if e.detail else "")
            for e in events
        )

    def violations(self) -> list[str]:
        """Overlaps: a partition, or a record of it, handed to a member while another
        member holds it (from its assigned callback until its revoke callback returns).

        (That no record reaches a member before its own assigned callback returned is
        test_no_record_before_on_partitions_assigned_returns.)"""
        holder: dict[int, str] = {}
        problems: list[str] = []
        for e in self.snapshot():
            if e.kind == "assigned":
                for p in e.partitions:
                    other = holder.get(p)
                    if other is not None and other != e.member:
                        problems.append(
                            f"{e.at:.3f}: p{p} assigned to {e.member}, {other} holds it"
                        )
                    holder[p] = e.member
            elif e.kind in ("revoke-end", "lost"):
                for p in e.partitions:
                    if holder.get(p) == e.member:
                        del holder[p]
            elif e.kind == "record":
                (p,) = e.partitions
                other = holder.get(p)
                if other is not None and other != e.member:
                    problems.append(f"{e.at:.3f}: {e.member} got p{p}@{e.offset}, {other} holds it")
        return problems


# -- a member on its own loop, in its own thread --------------------------------------------


class SlowOnce:
    """Which callback is slow: the first one of ``phase`` that gets partitions."""

    def __init__(self, phase: str | None) -> None:
        self.phase = phase
        self.started = threading.Event()
        self.done = threading.Event()
        self.ended_at = float("inf")

    def end(self) -> None:
        self.ended_at = time.monotonic()
        self.done.set()

    def take(self, kind: str, partitions: set[TopicPartition]) -> bool:
        if kind != self.phase or not partitions or self.started.is_set():
            return False
        self.started.set()
        return True


def make_listener(name: str, style: str, slow: SlowOnce, history: History) -> object:
    if style == "async":

        class AsyncRecorder(AsyncConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                history.add(name, "revoke-start", revoked)
                if slow.take("revoked", revoked):
                    await asyncio.sleep(SLOW)
                    slow.end()
                history.add(name, "revoke-end", revoked)

            async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                history.add(name, "assigned", assigned)
                if slow.take("assigned", assigned):
                    await asyncio.sleep(SLOW)
                    slow.end()

            async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
                history.add(name, "lost", lost)

        return AsyncRecorder()

    class SyncRecorder(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            history.add(name, "revoke-start", revoked)
            if slow.take("revoked", revoked):
                time.sleep(SLOW)  # blocks: must not block the member's loop
                slow.end()
            history.add(name, "revoke-end", revoked)

        def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            history.add(name, "assigned", assigned)
            if slow.take("assigned", assigned):
                time.sleep(SLOW)
                slow.end()

        def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
            history.add(name, "lost", lost)

    return SyncRecorder()


class ThreadMember:
    """A GroupConsumer polling on its own event loop in its own thread (a process stand-in)."""

    def __init__(self, name: str, listener: object, history: History, **options: Any) -> None:
        self.name = name
        self.listener = listener
        self.history = history
        self.options = options
        self.member_ids: list[str] = []
        self.errors: list[BaseException] = []
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"member-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(WAIT), f"member {self.name} did not start"
        if self.errors:
            raise self.errors[0]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT)
        assert not self._thread.is_alive(), f"member {self.name} did not stop"

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        options = dict(self.options)
        topic = options.pop("topic_")
        consumer = GroupConsumer(**options)
        try:
            await consumer.start()
            consumer.subscribe([topic], listener=self.listener)
        except BaseException as exc:
            self.errors.append(exc)
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._stop.is_set():
                try:
                    batch = await consumer.getmany(timeout_ms=100)
                except Exception as exc:  # raised to the application: the test fails on it
                    self.errors.append(exc)
                    self.history.add(self.name, "error", detail=repr(exc))
                    continue
                for tp, records in batch.items():
                    for r in records:
                        self.history.add(self.name, "record", (tp,), offset=r.offset)
                mid = consumer.member_id
                if mid and (not self.member_ids or self.member_ids[-1] != mid):
                    self.member_ids.append(mid)
                    self.history.add(self.name, "member-id", detail=mid)
        finally:
            await asyncio.wait_for(consumer.stop(), WAIT)


# -- the broker's view ---------------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    at: float
    state: str
    members: frozenset[str]


class Observer:
    """Polls DescribeGroups on the group's coordinator over a bare connection."""

    def __init__(self, client: AIOKafkaClient, group: str) -> None:
        self.client = client
        self.group = group
        self.seen: list[Observation] = []
        self._task: asyncio.Task[None] | None = None

    async def _coordinator(self) -> int:
        found = parse_find_coordinator(
            await self.client.send(
                self.client.get_random_node(), FindCoordinatorRequest(self.group)
            )
        )
        assert found.error_code == 0, found
        return found.node_id

    async def _poll(self) -> None:
        node = await self._coordinator()
        while True:
            resp = await self.client.send(node, DescribeGroupsRequest([self.group]))
            error, _, state, _, _, members = resp.groups[0][:6]
            if error == 0:
                self.seen.append(
                    Observation(time.monotonic(), state, frozenset(m[0] for m in members))
                )
            elif error in (14, 15, 16):  # coordinator loading / unavailable / moved
                node = await self._coordinator()
            await asyncio.sleep(0.25)  # the sampling period of the observation

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Observer]:
        self._task = asyncio.create_task(self._poll())
        try:
            yield self
        finally:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def last(self) -> Observation | None:
        return self.seen[-1] if self.seen else None


# -- the scenario --------------------------------------------------------------------------


@contextmanager
def members_stopped_at_exit(*members: ThreadMember) -> Iterator[None]:
    try:
        yield
    finally:
        for m in reversed(members):
            if m._thread.is_alive():
                m.stop()


async def wait_until(predicate: Any, what: str, timeout: float, history: History) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}; history:\n{history.dump()}")
        await asyncio.sleep(0.1)  # polling other threads' state: no loop event to await


@pytest.mark.parametrize("style", ["async", "sync"])
@pytest.mark.parametrize("protocol", ["eager", "cooperative"])
@pytest.mark.parametrize("phase", ["revoked", "assigned"])
async def test_member_joins_while_a_listener_runs_five_session_timeouts(
    bootstrap_servers: str,
    group_id: str,
    kafka_topic: Any,
    client: AIOKafkaClient,
    phase: str,
    protocol: str,
    style: str,
) -> None:
    topic = await kafka_topic(partitions=PARTITIONS)
    await produce(bootstrap_servers, topic, PARTITIONS, PER_PARTITION)
    history = History()
    slow = SlowOnce(phase)
    options: dict[str, Any] = dict(
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        max_poll_interval_ms=MAX_POLL_MS,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        partition_assignment_strategy=(STRATEGIES[protocol],),
    )
    a = ThreadMember(
        "A", make_listener("A", style, slow, history), history, topic_=topic, **options
    )
    b = ThreadMember(
        "B", make_listener("B", style, SlowOnce(None), history), history, topic_=topic, **options
    )
    observer = Observer(client, group_id)
    with members_stopped_at_exit(a, b):
        async with observer.running():
            a.start()
            if phase == "revoked":
                await wait_until(
                    lambda: history.holdings().get("A") == set(range(PARTITIONS)),
                    "A to own every partition",
                    WAIT,
                    history,
                )
            else:
                await wait_until(slow.started.is_set, "A's slow assigned callback", WAIT, history)
            await wait_until(lambda: bool(a.member_ids), "A's member id", WAIT, history)
            a_id = a.member_ids[0]
            b.start()
            if phase == "revoked":
                await wait_until(slow.started.is_set, "A's slow revoke callback", WAIT, history)
            await wait_until(slow.done.is_set, "A's slow callback to return", SLOW + WAIT, history)
            slow_returned = time.monotonic()

            def converged() -> bool:
                held = history.holdings()
                last = observer.last()
                return (
                    len(held.get("A", ())) == PARTITIONS // 2
                    and len(held.get("B", ())) == PARTITIONS // 2
                    and last is not None
                    and last.at > slow_returned
                    and len(last.members) == 2
                    and last.state == "Stable"
                )

            await wait_until(converged, "a clean 2/2 split", WAIT, history)
            split = history.holdings()

            def all_delivered() -> bool:
                got = {(e.partitions, e.offset) for e in history.snapshot() if e.kind == "record"}
                return all(
                    (frozenset({p}), o) in got
                    for p in range(PARTITIONS)
                    for o in range(PER_PARTITION)
                )

            await wait_until(all_delivered, "every produced record delivered", WAIT, history)
            converged_at = time.monotonic()

    events = history.snapshot()
    a_first = history.of("A", "assigned")[0].at
    # The broker's view: A stayed in the group the whole time (never evicted).
    watched = [o for o in observer.seen if a_first <= o.at <= converged_at]
    assert watched, "the observer saw nothing"
    missing = [o for o in watched if a_id not in o.members]
    assert missing == [], f"the broker dropped A ({a_id}): {missing[:3]}\n{history.dump()}"
    assert a.member_ids == [a_id], "A rejoined under a new member id (it was evicted)"
    # Nobody was handed a partition another member still held, nor records of it.
    assert history.violations() == [], history.dump()
    # B got none of A's partitions before A's slow callback returned.
    b_assigned = [e for e in history.of("B", "assigned") if e.partitions]
    assert b_assigned and b_assigned[0].at > slow.ended_at, history.dump()
    first_b_record = [e for e in events if e.member == "B" and e.kind == "record"]
    assert first_b_record and first_b_record[0].at >= b_assigned[0].at
    assert history.of("A", "lost") == [] and history.of("B", "lost") == []
    assert a.errors == [] and b.errors == []
    assert split["A"] | split["B"] == set(range(PARTITIONS)) and not split["A"] & split["B"]


@pytest.mark.parametrize("style", ["async", "sync"])
async def test_no_record_before_on_partitions_assigned_returns(
    bootstrap_servers: str, group_id: str, kafka_topic: Any, style: str
) -> None:
    """Start offsets returned by a slow assigned callback are where delivery starts.

    The Java client runs onPartitionsAssigned inside poll(), so no record of a new
    partition reaches the application before the callback returned (and its seeks
    took effect).  Here the callback takes a few seconds and returns offset 3.
    """
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 1, PER_PARTITION)
    tp = TopicPartition(topic, 0)
    returned = threading.Event()
    early: list[int] = []
    pause = 3.0  # long enough for a fetch from the committed/reset position to land

    class AsyncStart(AsyncConsumerRebalanceListener):
        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
            await asyncio.sleep(pause)
            returned.set()
            return {tp: 3}

    class SyncStart(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
            time.sleep(pause)
            returned.set()
            return {tp: 3}

    listener = AsyncStart() if style == "async" else SyncStart()
    async with GroupConsumer(
        topic,
        listener=listener,
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    ) as consumer:
        delivered: list[int] = []
        deadline = time.monotonic() + WAIT
        while len(delivered) < 2 and time.monotonic() < deadline:
            for r in (await consumer.getmany(timeout_ms=200)).get(tp, []):
                delivered.append(r.offset)
                if not returned.is_set():
                    early.append(r.offset)
    assert early == [], f"records handed out while on_partitions_assigned ran: {early}"
    assert delivered[:2] == [3, 4]
