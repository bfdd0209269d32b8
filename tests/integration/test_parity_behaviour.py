"""The same aiokafka program, run with AIOKafkaConsumer and with GroupConsumer, does the same.

The drop-in promise checked by behaviour, on one broker: a typical aiokafka start-up
(subscribe in the constructor or before start(), ``await start()``, then
``seek_to_beginning()``), a manual-assignment program, and the error classes an
``except KafkaError`` block relies on.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError, UnknownTopicOrPartitionError

from aiogroup import GroupConsumer, TopicPartition
from aiogroup.errors import CommitFailedError
from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.plugin import TopicFactory

CLASSES = [AIOKafkaConsumer, GroupConsumer]
GROUP_TIMEOUTS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


async def produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        for p in range(partitions):
            for i in range(per_partition):
                await producer.send(topic, f"{p}-{i}".encode(), partition=p)
        await producer.flush()
    finally:
        await producer.stop()


async def typical_program(consumer: Any, count: int) -> dict[str, Any]:
    """What an aiokafka application does after construction; returns what it observed."""
    await consumer.start()
    try:
        seen: dict[str, Any] = {"assignment": sorted(consumer.assignment())}
        await consumer.seek_to_beginning()
        seen["positions"] = {tp.partition: await consumer.position(tp) for tp in seen["assignment"]}
        values = []
        while len(values) < count:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
            values += [r.value for records in batch.values() for r in records]
        seen["values"] = sorted(values)
        tp = seen["assignment"][0]
        seen["highwater"] = consumer.highwater(tp)
        seen["has_poll_timestamp"] = consumer.last_poll_timestamp(tp) is not None
        await consumer.commit()
        seen["committed"] = {
            tp.partition: await consumer.committed(tp) for tp in seen["assignment"]
        }
        return seen
    finally:
        await consumer.stop()


@pytest.mark.parametrize("how", ["constructor", "subscribe-before-start"])
async def test_typical_program_sees_the_same_on_both(
    bootstrap_servers: str, kafka_topic: TopicFactory, how: str
) -> None:
    topic = await kafka_topic(partitions=2)
    await produce(bootstrap_servers, topic, 5, 2)
    results = []
    for cls in CLASSES:
        options: dict[str, Any] = dict(
            bootstrap_servers=bootstrap_servers,
            group_id=unique_name("parity"),
            enable_auto_commit=False,
            **GROUP_TIMEOUTS,
        )
        if how == "constructor":
            consumer = cls(topic, **options)
        else:
            consumer = cls(**options)
            consumer.subscribe([topic])
        results.append(await typical_program(consumer, 10))
    theirs, ours = results
    assert theirs["assignment"] == [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    assert ours == theirs


async def test_manual_assignment_program_sees_the_same_on_both(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 4, 1)
    tp = TopicPartition(topic, 0)
    results = []
    for cls in CLASSES:
        consumer = cls(bootstrap_servers=bootstrap_servers, auto_offset_reset="earliest")
        consumer.assign([tp])  # before start(), as aiokafka allows
        await consumer.start()
        try:
            consumer.seek(tp, 2)
            record = await asyncio.wait_for(consumer.getone(), 30)
            results.append((record.offset, record.value, await consumer.position(tp)))
        finally:
            await consumer.stop()
    assert results[0] == results[1] == (2, b"0-2", 3)


@pytest.mark.parametrize("cls", CLASSES)
async def test_bad_input_raises_what_aiokafka_programs_catch(cls: type) -> None:
    """aiokafka raises ValueError for max_poll_records=0; aiogroup's ConfigurationError is
    one (and a KafkaError, so ``except KafkaError`` catches it too)."""
    with pytest.raises(ValueError) as caught:
        cls(bootstrap_servers="localhost:9092", max_poll_records=0)
    if cls is GroupConsumer:
        assert isinstance(caught.value, KafkaError)


async def wait_assigned(consumer: Any) -> None:
    """aiokafka's start() does not wait for the group; poll until it assigned something."""
    while not consumer.assignment():
        await consumer.getmany(timeout_ms=100)


async def unsubscribe_then_assign(consumer: Any, topic: str) -> dict[str, Any]:
    """Consume under the group to offset 20 with 6 committed, then unsubscribe() and
    assign() the partition by hand: where does the manual assignment start?"""
    tp = TopicPartition(topic, 0)
    await consumer.start()
    try:
        consumer.subscribe([topic])
        await asyncio.wait_for(wait_assigned(consumer), 30)
        await consumer.commit({tp: 6})
        consumer.seek(tp, 20)
        first = await asyncio.wait_for(consumer.getone(), 30)
        consumer.unsubscribe()
        seen: dict[str, Any] = {"under_group": first.offset}
        seen["after_unsubscribe"] = sorted(consumer.assignment())
        consumer.assign([tp])
        seen["after_assign"] = sorted(consumer.assignment())
        record = await asyncio.wait_for(consumer.getone(), 30)
        seen["first_manual"] = record.offset
        return seen
    finally:
        await consumer.stop()


async def test_unsubscribe_then_assign_starts_from_the_committed_offset(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 30, 1)
    results = []
    for cls in CLASSES:
        consumer = cls(
            bootstrap_servers=bootstrap_servers,
            group_id=unique_name("parity"),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **GROUP_TIMEOUTS,
        )
        results.append(await unsubscribe_then_assign(consumer, topic))
    theirs, ours = results
    tp = TopicPartition(topic, 0)
    assert ours == {
        "under_group": 20,
        "after_unsubscribe": [],
        "after_assign": [tp],
        "first_manual": 6,
    }
    assert ours == theirs


@pytest.mark.parametrize("cls", CLASSES)
async def test_commit_of_a_partition_not_assigned_is_refused(
    bootstrap_servers: str, kafka_topic: TopicFactory, cls: type
) -> None:
    """Manual assignment: a commit of a partition outside assign() is an error naming it
    (aiokafka: IllegalStateError; aiogroup: CommitFailedError; both KafkaErrors)."""
    topic = await kafka_topic(partitions=2)
    consumer = cls(bootstrap_servers=bootstrap_servers, group_id=unique_name("parity"))
    consumer.assign([TopicPartition(topic, 0)])
    await consumer.start()
    try:
        with pytest.raises(KafkaError) as caught:
            await consumer.commit({TopicPartition(topic, 1): 5})
        assert await consumer.committed(TopicPartition(topic, 1)) is None
    finally:
        await consumer.stop()
    if cls is GroupConsumer:
        assert isinstance(caught.value, CommitFailedError)
        assert f"partition={1}" in str(caught.value) and "assign()" in str(caught.value)


async def test_commit_to_a_topic_that_does_not_exist_fails_at_once(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    """A group consumer without subscription may commit any offsets (as in Java), but not
    to a topic the cluster does not have: refused at once, naming it, instead of
    retrying UNKNOWN_TOPIC_OR_PARTITION until a bare timeout."""
    topic = await kafka_topic(partitions=1)
    missing = unique_name("no-such-topic")
    consumer = GroupConsumer(
        bootstrap_servers=bootstrap_servers,
        group_id=unique_name("parity"),
        request_timeout_ms=20_000,
    )
    await consumer.start()
    loop = asyncio.get_running_loop()
    try:
        began = loop.time()
        with pytest.raises(UnknownTopicOrPartitionError) as caught:
            await consumer.commit({TopicPartition(missing, 0): 1})
        took = loop.time() - began
        # A partition the topic does not have is refused the same way.
        with pytest.raises(UnknownTopicOrPartitionError, match="partition=7"):
            await consumer.commit({TopicPartition(topic, 7): 1})
        await consumer.commit({TopicPartition(topic, 0): 0})  # a real one still commits
        assert await consumer.committed(TopicPartition(topic, 0)) == 0
    finally:
        await consumer.stop()
    assert missing in str(caught.value) and "UNKNOWN_TOPIC_OR_PARTITION" in str(caught.value)
    assert took < 10.0, took  # well inside the 20 s request timeout it used to use up


@pytest.mark.parametrize("cls", CLASSES)
async def test_seek_to_beginning_and_end_return_true(
    bootstrap_servers: str, kafka_topic: TopicFactory, cls: type
) -> None:
    topic = await kafka_topic(partitions=1)
    tp = TopicPartition(topic, 0)
    consumer = cls(bootstrap_servers=bootstrap_servers)
    consumer.assign([tp])
    await consumer.start()
    try:
        assert await consumer.seek_to_beginning(tp) is True
        assert await consumer.seek_to_end() is True
    finally:
        await consumer.stop()


async def docs_program(consumer: Any, topics: list[str], count: int) -> dict[str, Any]:
    """aiokafka's documented consumer calls, in one program: ``async for`` over two
    topics with a manual commit per record, then the offset and metadata lookups,
    pause/resume and seek_to_committed.  Returns what it observed."""
    await consumer.start()
    try:
        seen: dict[str, Any] = {}
        values = []
        async for msg in consumer:
            values.append((msg.topic == topics[0], msg.partition, msg.offset, msg.value))
            await consumer.commit()
            if len(values) == count:
                break
        seen["values"] = sorted(values)
        tps = sorted(consumer.assignment())
        seen["assignment"] = [(tp.topic == topics[0], tp.partition) for tp in tps]
        seen["committed"] = [await consumer.committed(tp) for tp in tps]
        seen["beginning"] = sorted((await consumer.beginning_offsets(tps)).values())
        seen["end"] = sorted((await consumer.end_offsets(tps)).values())
        found = await consumer.offsets_for_times({tp: 0 for tp in tps})
        seen["for_times"] = sorted(v.offset for v in found.values() if v is not None)
        seen["partitions"] = [consumer.partitions_for_topic(t) for t in topics]
        seen["topics"] = set(topics) <= await consumer.topics()
        seen["subscription"] = consumer.subscription() == set(topics)
        consumer.pause(*tps)
        seen["paused"] = consumer.paused() == set(tps)
        consumer.resume(*tps)
        seen["resumed"] = consumer.paused() == set()
        consumer.seek(tps[0], 0)
        await consumer.seek_to_committed(tps[0])
        seen["after_seek_to_committed"] = await consumer.position(tps[0])
        seen["last_stable"] = consumer.last_stable_offset(tps[0]) is not None
        return seen
    finally:
        await consumer.stop()


async def test_aiokafka_documented_program_sees_the_same_on_both(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """The calls aiokafka's consumer documentation shows, run with both classes."""
    bootstrap_servers = kafka_broker.bootstrap_servers
    topics = [await kafka_topic(partitions=2), await kafka_topic(partitions=1)]
    await produce(bootstrap_servers, topics[0], 3, 2)
    await produce(bootstrap_servers, topics[1], 3, 1)
    results = []
    for cls in CLASSES:
        consumer = cls(
            *topics,
            bootstrap_servers=bootstrap_servers,
            group_id=unique_name("parity-docs"),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **GROUP_TIMEOUTS,
        )
        results.append(await docs_program(consumer, topics, 9))
    theirs, ours = results
    assert len(ours["values"]) == 9 and ours["committed"] == [3, 3, 3]
    assert ours["end"] == [3, 3, 3]
    if not kafka_broker.caps.list_offsets_latest_is_log_end:
        # Tansu answers ListOffsets(latest) below the log end; aiokafka passes that on.
        del ours["end"], theirs["end"]
    assert ours == theirs
