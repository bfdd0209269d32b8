"""One deserialization rule for every read path (Java's KIP-334), against the real broker.

Five JSON records, offset 2 not JSON.  Whatever the read path, the application gets
offsets 0 and 1, then a RecordDeserializationError naming the topic, partition and
offset 2; the position stays at 2 and every further read raises again, until the
application seeks past the record, after which 3 and 4 arrive.  Nothing is skipped
silently.  The Arrow path applies no deserializer, so it hands out all five raw.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from aiokafka import AIOKafkaProducer

from aiogroup import GroupConsumer, KafkaError, RecordDeserializationError, TopicPartition
from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration

VALUES = [b'{"n": 0}', b'{"n": 1}', b"{not json", b'{"n": 3}', b'{"n": 4}']
WAIT_S = 20


async def produce_one_batch(bootstrap: str, topic: str) -> None:
    """All five in one record batch (the walker's whole-batch path meets the bad record)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=200)
    await producer.start()
    try:
        futures = [await producer.send(topic, v, partition=0) for v in VALUES]
        metas = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    assert [m.offset for m in metas] == [0, 1, 2, 3, 4]


@asynccontextmanager
async def json_consumer(bootstrap: str, topic: str) -> AsyncIterator[GroupConsumer]:
    async with GroupConsumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        value_deserializer=json.loads,
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        yield consumer


Reader = Callable[[GroupConsumer], Awaitable[list[int]]]


async def _getmany(consumer: GroupConsumer) -> list[int]:
    got = await consumer.getmany(timeout_ms=500)
    return [r.offset for recs in got.values() for r in recs]


async def _getmany_one(consumer: GroupConsumer) -> list[int]:
    got = await consumer.getmany(timeout_ms=500, max_records=1)
    return [r.offset for recs in got.values() for r in recs]


async def _getone(consumer: GroupConsumer) -> list[int]:
    return [(await asyncio.wait_for(consumer.getone(), WAIT_S)).offset]


async def _async_for(consumer: GroupConsumer) -> list[int]:
    async def first() -> int:
        async for record in consumer:
            return int(record.offset)
        raise AssertionError("iteration ended")

    return [await asyncio.wait_for(first(), WAIT_S)]


READERS: dict[str, Reader] = {
    "getmany": _getmany,
    "getmany(max_records=1)": _getmany_one,
    "getone": _getone,
    "async for": _async_for,
}


@pytest.mark.parametrize("read", list(READERS))
async def test_bad_record_is_raised_after_the_good_ones_and_not_skipped(
    bootstrap_servers: str, kafka_topic: TopicFactory, read: str
) -> None:
    reader = READERS[read]
    topic = await kafka_topic(partitions=1)
    tp = TopicPartition(topic, 0)
    await produce_one_batch(bootstrap_servers, topic)
    async with json_consumer(bootstrap_servers, topic) as consumer:
        delivered: list[int] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while len(delivered) < 2 and loop.time() < deadline:
            delivered += await reader(consumer)
        assert delivered == [0, 1]
        for _ in range(3):  # raised again on every read: the record is never passed over
            with pytest.raises(RecordDeserializationError) as info:
                await reader(consumer)
            err = info.value
            assert isinstance(err, KafkaError)  # an aiokafka program's except clause catches it
            assert (err.tp, err.offset, err.origin) == (tp, 2, "value")
            assert f"{topic}-0" in str(err) and "offset 2" in str(err)
            assert isinstance(err.__cause__, json.JSONDecodeError)
            # aiokafka code catching the deserializer's own exception still catches it.
            assert isinstance(err, json.JSONDecodeError) and isinstance(err, ValueError)
            assert await consumer.position(tp) == 2
        consumer.seek(tp, 3)  # the application decides to skip it
        rest: list[int] = []
        deadline = loop.time() + WAIT_S
        while len(rest) < 2 and loop.time() < deadline:
            rest += await reader(consumer)
        assert rest == [3, 4]
        assert await consumer.position(tp) == 5


async def test_arrow_path_applies_no_deserializer(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    tp = TopicPartition(topic, 0)
    await produce_one_batch(bootstrap_servers, topic)
    async with json_consumer(bootstrap_servers, topic) as consumer:
        rows: list[dict[str, object]] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while len(rows) < 5 and loop.time() < deadline:
            batch = await consumer.getmany_arrow(timeout_ms=500)
            if batch is not None:
                rows += batch.to_pylist()
        assert [(r["offset"], r["value"]) for r in rows] == list(enumerate(VALUES))
        assert await consumer.position(tp) == 5
