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
from aiokafka.errors import KafkaError

from aiogroup import GroupConsumer, TopicPartition
from aiogroup.testing.broker import unique_name
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
