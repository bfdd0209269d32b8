"""Three members share a 12-partition topic while members join, leave cleanly and crash.

The issue's acceptance test: every produced record is consumed at least once, none
is lost, and afterwards the group's committed offsets equal the log end offsets
(computed from what was produced: Tansu's ListOffsets(latest) is not the log end).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Callable

from aiokafka import AIOKafkaProducer

from aiogroup import AsyncConsumerRebalanceListener, GroupConsumer, TopicPartition
from aiogroup.testing.plugin import TopicFactory

PARTITIONS = 12


class Tracker(AsyncConsumerRebalanceListener):
    def __init__(self, changed: asyncio.Event) -> None:
        self.owned: set[TopicPartition] = set()
        self.changed = changed

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.owned -= revoked
        self.changed.set()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.owned |= assigned
        self.changed.set()

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.owned -= lost
        self.changed.set()


class Member:
    def __init__(
        self, name: str, bootstrap: str, group: str, topic: str, progress: asyncio.Event
    ) -> None:
        self.name = name
        self.progress = progress
        self.tracker = Tracker(progress)
        self.consumer = GroupConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
            auto_commit_interval_ms=500,
        )
        self.topic = topic
        self.seen: list[tuple[int, int]] = []
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self.consumer.subscribe([self.topic], listener=self.tracker)
        self.task = asyncio.create_task(self._consume())

    async def _consume(self) -> None:
        while True:
            batches = await self.consumer.getmany(timeout_ms=200)
            for tp, records in batches.items():
                self.seen.extend((tp.partition, r.offset) for r in records)
            if batches:
                self.progress.set()

    async def _halt(self) -> None:
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task

    async def stop(self) -> None:
        await self._halt()
        await self.consumer.stop()

    async def crash(self) -> None:
        """The consuming task dies and the member vanishes without LeaveGroup or commit."""
        await self._halt()
        await self.consumer.abort()


async def wait_for(
    condition: Callable[[], bool], progress: asyncio.Event, timeout: float, what: str
) -> None:
    """Re-check ``condition`` each time a member reports progress (records or callbacks)."""

    async def watch() -> None:
        while True:
            progress.clear()
            if condition():
                return
            await progress.wait()

    try:
        await asyncio.wait_for(watch(), timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None


def covers_all(members: list[Member]) -> bool:
    owned = [tp.partition for m in members for tp in m.tracker.owned]
    return sorted(owned) == list(range(PARTITIONS)) and all(m.tracker.owned for m in members)


async def test_three_members_join_leave_crash_nothing_lost(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    topic = await kafka_topic(partitions=PARTITIONS)
    produced: Counter[int] = Counter()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=2)
    await producer.start()
    stop_producing = asyncio.Event()

    async def produce() -> None:
        i = 0
        while not stop_producing.is_set():
            futures = []
            for _ in range(48):
                futures.append(await producer.send(topic, f"v{i}".encode(), partition=i % 12))
                i += 1
            for fut in await asyncio.gather(*futures):
                produced[fut.partition] = max(produced[fut.partition], fut.offset + 1)
            await asyncio.sleep(0.02)  # pacing of the load generator, not synchronisation

    producing = asyncio.create_task(produce())
    progress = asyncio.Event()
    a = Member("a", bootstrap_servers, group_id, topic, progress)
    b = Member("b", bootstrap_servers, group_id, topic, progress)
    c = Member("c", bootstrap_servers, group_id, topic, progress)
    try:
        await a.start()
        await wait_for(lambda: covers_all([a]), progress, 30, "a to own everything")
        await b.start()
        await c.start()
        await wait_for(lambda: covers_all([a, b, c]), progress, 45, "three-way split")

        await b.stop()  # clean leave
        await wait_for(lambda: covers_all([a, c]), progress, 45, "takeover after clean leave")

        await c.crash()  # no LeaveGroup: the session must expire
        await wait_for(lambda: covers_all([a]), progress, 60, "takeover after crash")

        d = Member("d", bootstrap_servers, group_id, topic, progress)
        await d.start()  # a newcomer joins after the crash
        await wait_for(lambda: covers_all([a, d]), progress, 45, "split with newcomer")
    finally:
        stop_producing.set()
        await producing
        await producer.stop()

    expected = {(p, o) for p, end in produced.items() for o in range(end)}

    def consumed() -> set[tuple[int, int]]:
        return {key for m in (a, b, c, d) for key in m.seen}

    with contextlib.suppress(AssertionError):
        await wait_for(lambda: expected <= consumed(), progress, 30, "the drain")
    for m in (a, d):
        await m.stop()
    missing = expected - consumed()
    assert not missing, f"{len(missing)} records were lost, e.g. {sorted(missing)[:5]}"
    assert len(expected) > 1000

    checker = GroupConsumer(bootstrap_servers=bootstrap_servers, group_id=group_id)
    await checker.start()
    try:
        for p in range(PARTITIONS):
            assert await checker.committed(TopicPartition(topic, p)) == produced[p], p
    finally:
        await checker.stop()
