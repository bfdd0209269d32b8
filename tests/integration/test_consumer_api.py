"""The GroupConsumer API on a real broker: assign mode, positions, commits, errors."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import IllegalOperation

from aiogroup import (
    CommitFailedError,
    ConfigurationError,
    ConsumerStoppedError,
    GroupConsumer,
    IllegalStateError,
    InvalidTopicNameError,
    NoOffsetForPartitionError,
    OffsetAndMetadata,
    TopicPartition,
)
from aiogroup.testing.plugin import TopicFactory


async def produce(bootstrap: str, topic: str, count: int, partitions: int = 1) -> dict[int, int]:
    """Produce ``count`` records round-robin; return the end offset per partition."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % partitions
            )
            for i in range(count)
        ]
        ends: dict[int, int] = {}
        for meta in await asyncio.gather(*futures):
            ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
        return ends
    finally:
        await producer.stop()


async def drain(consumer: GroupConsumer, count: int) -> list[tuple[int, int, bytes]]:
    got: list[tuple[int, int, bytes]] = []
    while len(got) < count:
        batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
        for tp, records in batch.items():
            got.extend((tp.partition, r.offset, r.value) for r in records)
    return got


async def test_assign_mode_without_group(bootstrap_servers: str, kafka_topic: TopicFactory) -> None:
    topic = await kafka_topic(partitions=2)
    await produce(bootstrap_servers, topic, 200, partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with GroupConsumer(
        bootstrap_servers=bootstrap_servers, auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([tp0, tp1])
        assert consumer.assignment() == {tp0, tp1}
        got = await drain(consumer, 200)
        assert sorted((p, o) for p, o, _ in got) == sorted(
            [(0, o) for o in range(100)] + [(1, o) for o in range(100)]
        )
        assert await consumer.position(tp0) == 100
        assert consumer.highwater(tp0) == 100
        assert consumer.lag(tp0) == 0

        consumer.seek(tp0, 90)
        again = await drain(consumer, 10)
        assert [(p, o) for p, o, _ in again] == [(0, o) for o in range(90, 100)]

        await consumer.seek_to_beginning(tp1)
        assert await consumer.position(tp1, timeout_ms=10_000) == 0

        consumer.pause(tp0)
        assert consumer.paused() == {tp0}
        consumer.resume(tp0)
        assert consumer.paused() == set()

        with pytest.raises(IllegalOperation, match="group_id"):
            await consumer.commit()
        with pytest.raises(ConfigurationError, match="group_id"):
            consumer.subscribe([topic])
        with pytest.raises(IllegalStateError, match="not assigned"):
            consumer.seek(TopicPartition(topic, 5), 0)
        with pytest.raises(ValueError, match="seek"):
            consumer.seek(tp0, -3)
        with pytest.raises(InvalidTopicNameError):
            consumer.assign([TopicPartition("bad name", 0)])
        assert consumer.partitions_for_topic(topic) == {0, 1}
        assert topic in await consumer.topics()
        assert (await consumer.beginning_offsets([tp0])) == {tp0: 0}


async def test_getone_iteration_and_records(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 5)
    tp = TopicPartition(topic, 0)
    consumer = GroupConsumer(bootstrap_servers=bootstrap_servers, auto_offset_reset="earliest")
    await consumer.start()
    consumer.assign([tp])
    first = await asyncio.wait_for(consumer.getone(), 30)
    assert (first.topic, first.partition, first.offset, first.key, first.value) == (
        topic,
        0,
        0,
        b"k0",
        b"v0",
    )
    seen = []
    async for record in consumer:
        seen.append(record.offset)
        if record.offset == 4:
            break
    assert seen == [1, 2, 3, 4]

    # getone waiting on an empty partition is ended by stop(), not left hanging.
    waiter = asyncio.create_task(consumer.getone())
    await asyncio.sleep(0.3)  # let it block on the empty partition
    assert not waiter.done()
    await consumer.stop()
    with pytest.raises(ConsumerStoppedError):
        await asyncio.wait_for(waiter, 10)


async def test_no_reset_policy_raises(bootstrap_servers: str, kafka_topic: TopicFactory) -> None:
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 3)
    async with GroupConsumer(bootstrap_servers=bootstrap_servers, auto_offset_reset="none") as c:
        c.assign([TopicPartition(topic, 0)])
        with pytest.raises(NoOffsetForPartitionError):
            for _ in range(20):
                await c.getmany(timeout_ms=500)


async def test_commit_and_committed_with_group(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    topic = await kafka_topic(partitions=2)
    await produce(bootstrap_servers, topic, 20, partitions=2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with GroupConsumer(
        topic,
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    ) as consumer:
        await drain(consumer, 20)
        assert consumer.assignment() == {tp0, tp1}
        assert consumer.member_id
        assert consumer.generation is not None and consumer.generation >= 0
        await consumer.commit()
        assert await consumer.committed(tp0) == 10
        await consumer.commit({tp1: OffsetAndMetadata(4, "meta")})
        assert await consumer.committed(tp1) == 4

        results: list[object] = []
        task = consumer.commit_async({tp1: 7}, callback=lambda offs, exc: results.append(exc))
        await asyncio.wait_for(task, 30)
        assert results == [None]
        assert await consumer.committed(tp1) == 7
        assert await consumer.seek_to_committed(tp1) == {tp1: 7}
        assert await consumer.position(tp1) == 7

        with pytest.raises(CommitFailedError, match="not assigned") as refused:
            await consumer.commit({TopicPartition(topic, 9): 1})
        # The reason leads the message (aiokafka's class prepends a fixed paragraph).
        assert str(refused.value).startswith("CommitFailedError: cannot commit partitions")
        with pytest.raises(IllegalStateError, match="assign\\(\\) after subscribe"):
            consumer.assign([tp0])
        with pytest.raises(ValueError, match=">= 0"):
            await consumer.commit({tp0: -1})
    with pytest.raises(ConsumerStoppedError):
        await consumer.getmany()


async def test_committed_offsets_are_resumed_by_the_next_member(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 30)
    options = {
        "bootstrap_servers": bootstrap_servers,
        "group_id": group_id,
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 1000,
    }
    tp = TopicPartition(topic, 0)
    async with GroupConsumer(topic, **options) as first:
        await drain(first, 30)
        await first.commit({tp: 12})
    async with GroupConsumer(topic, **options) as second:
        got = await drain(second, 18)
        assert [o for _, o, _ in got] == list(range(12, 30))


GROUP_TIMEOUTS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


@pytest.mark.parametrize("how", ["constructor", "subscribe-before-start"])
async def test_start_returns_after_the_first_assignment_as_aiokafka(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str, how: str
) -> None:
    """aiokafka's start() waits for the first assignment (measured: 5.0 s on Tansu), so the
    usual ``await start(); await seek_to_beginning()`` must work right after it."""
    topic = await kafka_topic(partitions=2)
    await produce(bootstrap_servers, topic, 10, partitions=2)
    tps = {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    if how == "constructor":
        consumer = GroupConsumer(
            topic, bootstrap_servers=bootstrap_servers, group_id=group_id, **GROUP_TIMEOUTS
        )
    else:
        consumer = GroupConsumer(
            bootstrap_servers=bootstrap_servers, group_id=group_id, **GROUP_TIMEOUTS
        )
        consumer.subscribe([topic])
    await consumer.start()
    try:
        assert consumer.assignment() == tps
        await consumer.seek_to_beginning()  # auto_offset_reset is latest: this must matter
        for tp in tps:
            assert await asyncio.wait_for(consumer.position(tp), 30) == 0
        got = await drain(consumer, 10)
        assert sorted(o for _, o, _ in got) == sorted([0, 1, 2, 3, 4] * 2)
        tp = min(tps)
        stamp = consumer.last_poll_timestamp(tp)
        assert stamp is not None and abs(stamp - time.time() * 1000) < 60_000
        assert consumer.highwater(tp) == 5
    finally:
        await consumer.stop()


async def test_start_with_an_unknown_topic_pattern_still_joins(
    bootstrap_servers: str, group_id: str
) -> None:
    """An empty assignment is an assignment: start() returns once the member is in."""
    async with GroupConsumer(
        pattern="nothing-matches-this-.*",
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        **GROUP_TIMEOUTS,
    ) as consumer:
        assert consumer.assignment() == set()
        assert consumer.health().joined


async def test_assign_before_start_as_aiokafka(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 3)
    tp = TopicPartition(topic, 0)
    consumer = GroupConsumer(bootstrap_servers=bootstrap_servers, auto_offset_reset="earliest")
    consumer.assign([tp])
    async with consumer:
        assert consumer.assignment() == {tp}
        assert [o for _, o, _ in await drain(consumer, 3)] == [0, 1, 2]


async def test_partitions_for_a_topic_listed_by_topics(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    """After ``topics()``, ``partitions_for_topic`` knows every topic it listed, as Java's
    ``partitionsFor`` does; before, it answered only for topics the consumer tracked."""
    mine = await kafka_topic(partitions=2)
    other = await kafka_topic(partitions=3)
    consumer = GroupConsumer(bootstrap_servers=bootstrap_servers)
    await consumer.start()
    try:
        consumer.assign([TopicPartition(mine, 0)])
        assert other in await consumer.topics()
        assert consumer.partitions_for_topic(other) == {0, 1, 2}
        assert consumer.partitions_for_topic(mine) == {0, 1}
        assert consumer.partitions_for_topic("no-such-topic-anywhere") is None
    finally:
        await consumer.stop()
