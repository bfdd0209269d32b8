"""What the application sees from its polls around rebalances.

- No record of a partition is handed out once its revoke callback has started, even
  though the fetcher had read ahead and the application keeps polling meanwhile.
- A member that owns nothing but keeps polling is not "idle" for max_poll_interval_ms
  (aiokafka issue 720): it stays in the group with no rebalance.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from aiokafka import AIOKafkaProducer

from aiogroup import GroupConsumer, TopicPartition
from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration

SESSION_MS = 6000
HEARTBEAT_MS = 1000
WAIT = 60.0


@contextlib.asynccontextmanager
async def steady_production(bootstrap: str, topic: str, partitions: int) -> AsyncIterator[None]:
    """Keep every partition fed, so that there is always read-ahead to leak."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()

    async def feed() -> None:
        for i in itertools.count():
            await asyncio.gather(
                *[
                    await producer.send(topic, f"{p}-{i}".encode(), partition=p)
                    for p in range(partitions)
                ]
            )
            await asyncio.sleep(0.01)  # pacing the load, not synchronisation

    task = asyncio.create_task(feed())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await producer.stop()


@dataclass
class Timeline:
    """Deliveries and listener calls of one member, in the order they happened."""

    events: list[tuple[str, frozenset[TopicPartition]]] = field(default_factory=list)
    polls_during_revoke: int = 0
    revoking: bool = False
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def add(self, kind: str, parts: frozenset[TopicPartition]) -> None:
        async with self.changed:
            self.events.append((kind, parts))
            self.changed.notify_all()

    async def wait_for(self, what: str, predicate: Callable[[], bool]) -> None:
        async def wait() -> None:
            async with self.changed:
                await self.changed.wait_for(predicate)

        try:
            await asyncio.wait_for(wait(), WAIT)
        except asyncio.TimeoutError:
            pytest.fail(f"timed out waiting for {what}; events: {self.events[-30:]}")

    def of(self, kind: str) -> list[frozenset[TopicPartition]]:
        return [parts for k, parts in self.events if k == kind]


class Listener:
    """Journals every call; ``revoke_s`` holds a revoke open so the application polls
    meanwhile (the slow listener is the scenario, not a synchronisation)."""

    def __init__(self, timeline: Timeline, revoke_s: float = 0.0) -> None:
        self.t = timeline
        self.revoke_s = revoke_s

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.t.add("revoke-start", frozenset(revoked))
        self.t.revoking = True
        await asyncio.sleep(self.revoke_s)
        self.t.revoking = False

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self.t.add("assigned", frozenset(assigned))

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        await self.t.add("lost", frozenset(lost))


def member(
    bootstrap: str, group: str, topic: str, listener: Listener, **extra: int
) -> GroupConsumer:
    return GroupConsumer(
        topic,
        listener=listener,
        bootstrap_servers=bootstrap,
        group_id=group,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        auto_offset_reset="earliest",
        **extra,
    )


@contextlib.asynccontextmanager
async def polling(consumer: GroupConsumer, t: Timeline) -> AsyncIterator[None]:
    """The application: poll in a loop, journalling each delivered partition."""
    stop = asyncio.Event()

    async def loop() -> None:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=50)
            if t.revoking:
                t.polls_during_revoke += 1
            for tp in batch:
                await t.add("deliver", frozenset([tp]))

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        stop.set()
        await task  # raises what the application's poll raised


async def test_no_record_of_a_partition_after_its_revoke_started(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    topic = await kafka_topic(partitions=4)
    ta, tb = Timeline(), Timeline()
    a = member(bootstrap_servers, group_id, topic, Listener(ta, revoke_s=1.0))
    b = member(bootstrap_servers, group_id, topic, Listener(tb))
    async with steady_production(bootstrap_servers, topic, 4):
        async with a, polling(a, ta):
            await ta.wait_for(
                "A to deliver from all four partitions",
                lambda: len({tp for parts in ta.of("deliver") for tp in parts}) == 4,
            )
            async with b, polling(b, tb):
                await ta.wait_for("A's second assignment", lambda: len(ta.of("assigned")) >= 2)
                kept = ta.of("assigned")[-1]
                mark = len(ta.events)
                await ta.wait_for(
                    "A to deliver again from what it kept",
                    lambda: any(k == "deliver" and parts <= kept for k, parts in ta.events[mark:]),
                )
                await tb.wait_for("B to deliver", lambda: bool(tb.of("deliver")))

    assert ta.polls_during_revoke > 0, "the application never polled during the revoke"
    assert ta.of("lost") == []
    fenced: set[TopicPartition] = set()
    for kind, parts in ta.events:
        if kind == "revoke-start":
            fenced |= parts
        elif kind == "assigned":
            fenced -= parts
        elif kind == "deliver":
            assert not (parts & fenced), f"{sorted(parts & fenced)} delivered after its revoke"
    assert len(ta.of("revoke-start")) >= 2  # B's join, and A's own stop()


async def test_a_polling_member_without_partitions_is_not_idle(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    """Two members, one partition: the one with nothing keeps its membership."""
    topic = await kafka_topic(partitions=1)
    poll_interval_ms = 3000
    ta, tb = Timeline(), Timeline()
    a = member(
        bootstrap_servers, group_id, topic, Listener(ta), max_poll_interval_ms=poll_interval_ms
    )
    b = member(
        bootstrap_servers, group_id, topic, Listener(tb), max_poll_interval_ms=poll_interval_ms
    )
    async with a, polling(a, ta), b, polling(b, tb):
        # Generations change without a listener call on both sides, so no event to await.
        deadline = asyncio.get_running_loop().time() + WAIT
        while not (
            a.generation is not None
            and a.generation == b.generation
            and len(a.assignment()) + len(b.assignment()) == 1
            # Each listener has been told the current assignment (generation and
            # assignment change before the listener call that reports them).
            and ta.of("assigned")[-1:] == [frozenset(a.assignment())]
            and tb.of("assigned")[-1:] == [frozenset(b.assignment())]
        ):
            assert asyncio.get_running_loop().time() < deadline, (ta.events, tb.events)
            await asyncio.sleep(0.05)
        generation = a.generation
        idle, idle_t = (a, ta) if not a.assignment() else (b, tb)
        calls_before = len(idle_t.events)
        # Three max-poll intervals of an application that polls and gets nothing.
        deadline = asyncio.get_running_loop().time() + 3 * poll_interval_ms / 1000
        while asyncio.get_running_loop().time() < deadline:
            assert await idle.getmany(timeout_ms=200) == {}
        assert a.generation == b.generation == generation
        assert idle_t.events[calls_before:] == []  # no revoke, no lost, no new assignment
        assert idle.assignment() == set()
