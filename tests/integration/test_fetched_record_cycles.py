"""Records out of the collector's way, against the real broker: never a leaked cycle.

The fetcher untracks the records the native module builds while it holds them
(``aiogroup._fetch.young_records``).  Read from a broker with ``getmany``: the records
handed out are untracked, and a cycle the application makes through one is collected
once two more calls have built records, or once the consumer is stopped.
"""

from __future__ import annotations

import asyncio
import gc
import shutil
import weakref
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from aiogroup import GroupConsumer
from aiogroup._fetch.native import native_gc_tracking
from aiogroup.structs import ConsumerRecord, TopicPartition
from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration

if native_gc_tracking() is None:
    if shutil.which("cargo") is not None:  # make install builds it wherever cargo is
        pytest.fail("aiogroup_native lacks untrack/retrack_shared: rebuild it (make native)")
    pytest.skip(
        "the native module is not built (make install needs cargo)", allow_module_level=True
    )


async def produce(bootstrap: str, topic: str, start: int, n: int = 20) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        batch = producer.create_batch()
        for i in range(start, start + n):
            batch.append(key=None, value=b"v%d" % i, timestamp=None)
        await (await producer.send_batch(batch, topic, partition=0))
    finally:
        await producer.stop()


async def next_records(consumer: GroupConsumer, want: int) -> list[ConsumerRecord[Any, Any]]:
    got: list[ConsumerRecord[Any, Any]] = []
    async with asyncio.timeout(30):
        while len(got) < want:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                got += records
    return got


@pytest.mark.parametrize("ending", ["two more calls", "stop"])
async def test_a_cycle_through_a_fetched_record_is_collected(
    bootstrap_servers: str, kafka_topic: TopicFactory, ending: str
) -> None:
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 0)
    consumer = GroupConsumer(bootstrap_servers=bootstrap_servers, auto_offset_reset="earliest")
    await consumer.start()
    stopped = False
    try:
        consumer.assign([TopicPartition(topic, 0)])
        records = await next_records(consumer, 20)
        assert [r.value for r in records] == [b"v%d" % i for i in range(20)]
        assert not any(gc.is_tracked(r) for r in records)  # held by the fetcher
        target = records[3]
        target.note = [target]  # type: ignore[attr-defined]
        ref = weakref.ref(target)
        del records, target
        gc.collect()
        assert ref() is not None  # the fetcher still holds it
        if ending == "stop":
            await consumer.stop()
            stopped = True
        else:
            for start in (20, 40):
                await produce(bootstrap_servers, topic, start)
                assert len(await next_records(consumer, 20)) == 20
        gc.collect()
        assert ref() is None
    finally:
        if not stopped:
            await consumer.stop()


async def test_records_dropped_after_a_call_are_freed_at_the_loops_next_turn(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    """Not at the next getmany, which may be long in coming: freed by refcount, no collection."""
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 0)
    consumer = GroupConsumer(bootstrap_servers=bootstrap_servers, auto_offset_reset="earliest")
    await consumer.start()
    was = gc.isenabled()
    try:
        consumer.assign([TopicPartition(topic, 0)])
        gc.disable()
        records = await next_records(consumer, 20)
        refs = [weakref.ref(r) for r in records]
        del records
        assert all(w() is not None for w in refs)  # the fetcher holds them
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert all(w() is None for w in refs)
    finally:
        if was:
            gc.enable()
        await consumer.stop()
