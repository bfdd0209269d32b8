"""The executor reader against a real broker: its memory bound and its reused consumer.

No Spark here: ``read_range`` is what a Python worker runs for one Spark task, and it
runs the same way in this process.  The topic holds far more bytes than the fetch
budget, so a reader that ignored the budget would show it in its peak.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pyarrow as pa
import pyspark  # noqa: F401
import pytest
from aiokafka import AIOKafkaProducer

from aiogroup.spark import partition_reader
from aiogroup.spark.options import parse_options
from aiogroup.spark.partition_reader import last_read_stats, read_range
from aiogroup.spark.ranges import OffsetRange
from aiogroup.structs import TopicPartition
from aiogroup.testing import KafkaBroker
from aiogroup.testing.broker import unique_name

pytestmark = [pytest.mark.integration, pytest.mark.spark]

RECORDS = 6_000
VALUE = 1024
BUDGET = 256 * 1024
# The producer's batch limit: Kafka may return one record batch above the budget
# (KIP-74), so the bound is the budget plus one batch.
BATCH_BYTES = 32 * 1024


@pytest.fixture
def topic(kafka_broker: KafkaBroker) -> str:
    async def run() -> str:
        name = await kafka_broker.create_topic(unique_name("spark-mem"), 1)
        producer = AIOKafkaProducer(
            bootstrap_servers=kafka_broker.bootstrap_servers,
            linger_ms=5,
            max_batch_size=BATCH_BYTES,
        )
        await producer.start()
        try:
            futures = [
                await producer.send(name, b"%08d" % i + b"v" * (VALUE - 8), partition=0)
                for i in range(RECORDS)
            ]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()
        return name

    return asyncio.run(run())


@pytest.fixture(autouse=True)
def fresh_pool() -> Iterator[None]:
    partition_reader._close_pool()
    yield
    partition_reader._close_pool()


def options(servers: str, topic: str) -> object:
    return parse_options(
        {
            "kafka.bootstrap.servers": servers,
            "kafka.group.id": "unused-by-readers",
            "subscribe": topic,
            "kafka.max.buffered.bytes": str(BUDGET),
            "kafka.max.partition.fetch.bytes": str(64 * 1024),
        }
    )


def values(batches: list[pa.RecordBatch]) -> list[bytes]:
    return [v for b in batches for v in b.column("value").to_pylist()]


def offsets(batches: list[pa.RecordBatch]) -> list[int]:
    return [o for b in batches for o in b.column("offset").to_pylist()]


def test_a_range_never_holds_more_than_the_fetch_budget(
    kafka_broker: KafkaBroker, topic: str
) -> None:
    opts = options(kafka_broker.bootstrap_servers, topic)
    batches = list(read_range(opts, OffsetRange(topic, 0, 0, RECORDS)))  # type: ignore[arg-type]
    assert offsets(batches) == list(range(RECORDS))
    stats = last_read_stats()
    assert stats is not None
    assert stats.fetch_budget == BUDGET
    assert RECORDS * VALUE > 20 * BUDGET, "the topic must dwarf the budget for this to mean much"
    assert 0 < stats.peak_fetch_bytes <= BUDGET + BATCH_BYTES, stats


def test_consecutive_ranges_reuse_the_worker_consumer_and_read_exactly_their_records(
    kafka_broker: KafkaBroker, topic: str
) -> None:
    opts = options(kafka_broker.bootstrap_servers, topic)
    first = list(read_range(opts, OffsetRange(topic, 0, 100, 2_000)))  # type: ignore[arg-type]
    assert offsets(first) == list(range(100, 2_000))
    stats = last_read_stats()
    assert stats is not None and not stats.reused_consumer and stats.seeked
    # Continues where the last range ended: no seek, the read-ahead is kept.
    second = list(read_range(opts, OffsetRange(topic, 0, 2_000, 4_500)))  # type: ignore[arg-type]
    assert offsets(second) == list(range(2_000, 4_500))
    stats = last_read_stats()
    assert stats is not None and stats.reused_consumer and not stats.seeked
    # A replayed (earlier) range seeks back and reads the very same records again.
    again = list(read_range(opts, OffsetRange(topic, 0, 100, 2_000)))  # type: ignore[arg-type]
    assert offsets(again) == list(range(100, 2_000))
    assert values(again) == values(first)
    stats = last_read_stats()
    assert stats is not None and stats.reused_consumer and stats.seeked
    # A range closed early (Spark cancelled the task) leaves the position unknown.
    partial = read_range(opts, OffsetRange(topic, 0, 4_500, RECORDS))  # type: ignore[arg-type]
    next(partial)
    partial.close()
    rest = list(read_range(opts, OffsetRange(topic, 0, 4_500, RECORDS)))  # type: ignore[arg-type]
    assert offsets(rest) == list(range(4_500, RECORDS))
    stats = last_read_stats()
    assert stats is not None and stats.seeked


def test_an_idle_worker_consumer_leaves_no_request_hanging_and_does_not_poll(
    kafka_broker: KafkaBroker, topic: str
) -> None:
    """Between tasks the worker's consumer idles: nothing outstanding, nothing fetched.

    A request left unanswered across a long idle spell reads, at the next range, as a
    broker that stopped answering (the consumer logs it as unreachable); and a
    consumer that kept fetching at the log end would poll the broker every
    ``fetch_max_wait_ms`` for as long as the worker idles.
    """
    opts = options(kafka_broker.bootstrap_servers, topic)
    # Read to the log end: the consumer's next fetch would wait there.
    assert offsets(list(read_range(opts, OffsetRange(topic, 0, 0, RECORDS)))) == list(  # type: ignore[arg-type]
        range(RECORDS)
    )
    pooled = partition_reader._pooled
    assert pooled is not None
    consumer = pooled.consumer
    deadline = time.monotonic() + 10
    while consumer._metrics._outstanding:
        assert time.monotonic() < deadline, (
            f"requests still outstanding while the worker idles: {consumer._metrics._outstanding}"
        )
        time.sleep(0.05)

    async def fetches_sent() -> int:
        return consumer.metrics().fetch_latency.count  # reads the loop's clock: on the loop

    fetches = pooled.run(fetches_sent(), 5, "reading the metrics")
    time.sleep(1.0)  # the idle spell itself (fetch_max_wait_ms is 10 ms)
    assert pooled.run(fetches_sent(), 5, "reading the metrics") == fetches
    assert consumer.paused() == {TopicPartition(topic, 0)}
    # The next range still continues where the last one ended, without a seek.
    more = list(read_range(opts, OffsetRange(topic, 0, RECORDS, RECORDS)))  # type: ignore[arg-type]
    assert more == []
    again = list(read_range(opts, OffsetRange(topic, 0, 10, 20)))  # type: ignore[arg-type]
    assert offsets(again) == list(range(10, 20))
    assert consumer.paused() == {TopicPartition(topic, 0)}
