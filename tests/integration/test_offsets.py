"""ListOffsets helpers against the real broker."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from aiokafka import AIOKafkaClient, AIOKafkaProducer
from aiokafka.errors import KafkaTimeoutError

from aiogroup._fetch import offset_lookups as offsets
from aiogroup.structs import TopicPartition
from aiogroup.testing import KafkaBroker
from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration


@asynccontextmanager
async def connected(bootstrap: str) -> AsyncIterator[AIOKafkaClient]:
    # Not a fixture: async fixtures run on the session loop, tests on their own.
    c = AIOKafkaClient(bootstrap_servers=bootstrap, retry_backoff_ms=20)
    await c.bootstrap()
    try:
        yield c
    finally:
        await c.close()


async def _produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> dict[int, int]:
    """Send records one flush at a time; returns the true log end offset per partition."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    ends: dict[int, int] = {}
    try:
        for partition, count in per_partition.items():
            for i in range(count):
                md = await producer.send_and_wait(topic, f"r{i}".encode(), partition=partition)
                ends[partition] = md.offset + 1
    finally:
        await producer.stop()
    return ends


async def test_beginning_and_end_offsets(
    bootstrap_servers: str, kafka_topic: TopicFactory, kafka_broker: KafkaBroker
) -> None:
    topic = await kafka_topic(partitions=3)
    ends = await _produce(bootstrap_servers, topic, {0: 5, 1: 2})
    tps = [TopicPartition(topic, p) for p in range(3)]
    async with connected(bootstrap_servers) as c:
        assert await offsets.beginning_offsets(c, tps, timeout=10) == dict.fromkeys(tps, 0)
        listed = await offsets.list_offsets(
            c, dict.fromkeys(tps, offsets.LATEST_TIMESTAMP), read_committed=False, timeout=10
        )
        found = await offsets.end_offsets(c, tps, read_committed=False, timeout=10)
    # ListOffsets(latest): the log end (5, 2, 0).  Every record here is its own batch,
    # so a broker without caps.list_offsets_latest_is_log_end (Tansu: the last batch's
    # base offset + 1) answers it too; test_broker's caps test covers a batch of several.
    for p, end in {**ends, 2: 0}.items():
        value = listed[tps[p]]
        assert value is not None and value.offset == end
    # end_offsets confirms the end with the high watermark: the true end on both.
    assert found == {tps[0]: ends[0], tps[1]: ends[1], tps[2]: 0}


async def test_offsets_for_times(
    bootstrap_servers: str, kafka_topic: TopicFactory, kafka_broker: KafkaBroker
) -> None:
    topic = await kafka_topic(partitions=1)
    tp = TopicPartition(topic, 0)
    before = int(time.time() * 1000) - 60_000
    await _produce(bootstrap_servers, topic, {0: 3})
    future = int(time.time() * 1000) + 3_600_000
    async with connected(bootstrap_servers) as c:
        found = await offsets.offsets_for_times(c, {tp: before}, read_committed=False, timeout=10)
        later = await offsets.offsets_for_times(c, {tp: future}, read_committed=False, timeout=10)
    value = found[tp]
    assert value is not None
    assert value.offset == 0
    assert value.timestamp >= before
    # Kafka answers "no such record" (None); without
    # caps.list_offsets_future_timestamp_is_none (Tansu) offset 0 with timestamp -1.
    if kafka_broker.caps.list_offsets_future_timestamp_is_none:
        assert later[tp] is None
    else:
        assert (later[tp].offset, later[tp].timestamp) == (0, -1)  # type: ignore[union-attr]


async def test_unknown_partition_times_out_naming_it(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    missing = TopicPartition(topic, 7)
    async with connected(bootstrap_servers) as c:
        with pytest.raises(KafkaTimeoutError, match=f"{topic}-7"):
            await offsets.beginning_offsets(c, [missing], timeout=0.5)
