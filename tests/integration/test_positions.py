"""position() must answer without the application polling first.

Resets are performed by the fetcher, so a reset asked for while the fetcher sleeps
(its read-ahead budget full, or the partition waiting for its committed offset)
must wake it; otherwise position() waits for a getmany() that may never come.
"""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer

from aiogroup import GroupConsumer, TopicPartition
from aiogroup.testing.plugin import TopicFactory

WAIT_S = 30


async def produce(bootstrap: str, topic: str, count: int) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        futures = [await producer.send(topic, b"x" * 100, partition=0) for _ in range(count)]
        metas = await asyncio.gather(*futures)
        return max(m.offset for m in metas) + 1
    finally:
        await producer.stop()


async def test_position_of_a_new_group_member_before_any_poll(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    """No committed offset: the commit-refresh task asks for a reset; position() gets it."""
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 50)
    tp = TopicPartition(topic, 0)
    assigned = asyncio.Event()

    class Listener:
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            pass

        async def on_partitions_assigned(self, added: set[TopicPartition]) -> None:
            if tp in added:
                assigned.set()

    async with GroupConsumer(
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    ) as consumer:
        consumer.subscribe([topic], listener=Listener())
        await asyncio.wait_for(assigned.wait(), WAIT_S)
        assert await consumer.position(tp, timeout_ms=WAIT_S * 1000) == 0


async def test_seek_to_beginning_with_a_full_read_ahead(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    """The fetcher has filled its budget and sleeps; the reset must still happen."""
    topic = await kafka_topic(partitions=1)
    end = await produce(bootstrap_servers, topic, 3000)
    tp = TopicPartition(topic, 0)
    async with GroupConsumer(
        bootstrap_servers=bootstrap_servers,
        auto_offset_reset="earliest",
        # Smallest budget the configuration allows: one partition fetch fills it.
        max_partition_fetch_bytes=16 * 1024,
        fetch_max_bytes=16 * 1024,
        max_buffered_bytes=16 * 1024,
    ) as consumer:
        consumer.assign([tp])
        first = await asyncio.wait_for(
            consumer.getmany(tp, timeout_ms=5000, max_records=10), WAIT_S
        )
        assert [r.offset for r in first[tp]] == list(range(10))
        position = await consumer.position(tp, timeout_ms=WAIT_S * 1000)
        assert position == 10 < end
        await consumer.seek_to_beginning(tp)
        assert await consumer.position(tp, timeout_ms=WAIT_S * 1000) == 0
        again = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=5000, max_records=5), WAIT_S)
        assert [r.offset for r in again[tp]] == list(range(5))
