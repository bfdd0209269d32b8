"""aiogroup.spark.ingest against a real broker and a local[2] SparkSession."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pyspark  # noqa: F401  (the spark extra: a missing install fails here)
import pytest
from aiokafka import AIOKafkaProducer
from spark_session import new_session

from aiogroup.consumer import GroupConsumer
from aiogroup.errors import ConfigurationError
from aiogroup.spark import BatchInfo, IngestProgress, ingest
from aiogroup.structs import TopicPartition
from aiogroup.testing.plugin import TopicFactory

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = new_session("aiogroup-ingest-tests")
    yield session
    session.stop()


async def produce(
    servers: str, topic: str, count: int, partitions: int, first: int = 0
) -> dict[TopicPartition, int]:
    producer = AIOKafkaProducer(bootstrap_servers=servers, linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, str(i).encode(), partition=i % partitions)
            for i in range(first, first + count)
        ]
        results = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    ends: dict[TopicPartition, int] = {}
    for meta in results:
        tp = TopicPartition(topic, meta.partition)
        ends[tp] = max(ends.get(tp, 0), meta.offset + 1)
    return ends


def member(servers: str, group: str) -> GroupConsumer:
    return GroupConsumer(
        bootstrap_servers=servers,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )


class Recorder:
    """Collects what a member's batch function saw, and checks every commit against it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str) -> None:
        self.loop = loop
        self.name = name
        self.lock = threading.Lock()
        self.rows: list[tuple[int, int, bytes]] = []
        self.returned: list[BatchInfo] = []
        self.unbacked_commits: list[dict[TopicPartition, int]] = []
        self.commits = 0
        self.progressed = asyncio.Event()
        self.threshold = 0

    def handle(self, frame: Any, info: BatchInfo) -> None:
        rows = frame.select("partition", "offset", "value").collect()
        with self.lock:
            self.rows.extend((r.partition, r.offset, bytes(r.value)) for r in rows)
            self.returned.append(info)
            if len(self.rows) >= self.threshold:
                self.loop.call_soon_threadsafe(self.progressed.set)

    def spy_on(self, consumer: GroupConsumer) -> None:
        original = consumer.commit

        async def commit(offsets: Any = None) -> None:
            # Every committed offset must be the end of a batch whose function returned.
            with self.lock:
                ends = [info.ranges for info in self.returned]
            for tp, offset in dict(offsets).items():
                if not any(r.get(tp, (None, None))[1] == offset for r in ends):
                    self.unbacked_commits.append({tp: offset})
            self.commits += 1
            await original(offsets)

        consumer.commit = commit  # type: ignore[method-assign]


async def wait_until(
    check: Callable[[], Any], changed: asyncio.Event, timeout: float, what: str
) -> None:
    """Re-check after every signalled change (a batch committed) until ``check`` holds."""

    async def loop() -> None:
        while not await check():
            await changed.wait()
            changed.clear()

    try:
        await asyncio.wait_for(loop(), timeout)
    except (asyncio.TimeoutError, TimeoutError):
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_ingest_while_a_second_member_joins(
    spark: Any, bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    partitions, total = 4, 10_000
    topic = await kafka_topic(partitions=partitions)
    ends = await produce(bootstrap_servers, topic, total, partitions)

    async def produce_more(count: int) -> None:
        nonlocal total
        more = await produce(bootstrap_servers, topic, count, partitions, first=total)
        total += count
        ends.update(more)

    b_assigned = asyncio.Event()

    class BListener:
        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            if assigned:
                b_assigned.set()

        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            pass

    loop = asyncio.get_running_loop()
    recorders = {name: Recorder(loop, name) for name in ("a", "b")}
    recorders["a"].threshold = 2_000
    consumers = {name: member(bootstrap_servers, group_id) for name in recorders}
    stops = {name: asyncio.Event() for name in recorders}
    progress: list[IngestProgress] = []
    batch_done = asyncio.Event()

    def on_progress(snapshot: IngestProgress) -> None:
        progress.append(snapshot)
        batch_done.set()

    tasks: dict[str, asyncio.Task[IngestProgress]] = {}

    async def launch(name: str, listener: object | None = None) -> None:
        consumer = consumers[name]
        await consumer.start()
        recorders[name].spy_on(consumer)
        tasks[name] = loop.create_task(
            ingest(
                consumer,
                spark,
                recorders[name].handle,
                topics=[topic],
                listener=listener,
                max_records=1_000,
                max_interval=0.5,
                on_revoke="finish",
                on_progress=on_progress,
                stop=stops[name],
            )
        )

    checker = member(bootstrap_servers, group_id)
    await checker.start()
    try:
        await launch("a")
        await asyncio.wait_for(recorders["a"].progressed.wait(), 120)
        await launch("b", BListener())
        # Keep records flowing into every partition while B joins, so that A is busy
        # during the rebalance and B has records of its own once it owns partitions.
        while not b_assigned.is_set():
            await produce_more(400)
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(b_assigned.wait(), 0.2)
        await produce_more(4_000)

        async def all_committed() -> bool:
            for tp, end in ends.items():
                if await checker.committed(tp) != end:
                    return False
            return True

        await wait_until(
            all_committed, batch_done, 180, "the group to commit every partition's end"
        )
        for name in stops:
            stops[name].set()
        results = await asyncio.wait_for(asyncio.gather(*tasks.values()), 60)
    finally:
        for name, task in tasks.items():
            stops[name].set()
            if not task.done():
                task.cancel()
        for consumer in consumers.values():
            await consumer.stop()
        await checker.stop()

    seen = recorders["a"].rows + recorders["b"].rows
    assert recorders["b"].rows, "the second member should have taken over partitions"
    assert sorted(v for _, _, v in seen) == sorted(str(i).encode() for i in range(total))
    assert len({(p, o) for p, o, _ in seen}) == len(seen), "finish mode processed a record twice"
    for rec in recorders.values():
        assert rec.commits > 0
        assert rec.unbacked_commits == [], f"{rec.name} committed before a batch returned"
    assert sum(r.records for r in results) == total
    assert progress and progress[-1].batches >= 1
    assert all(p.records_per_second > 0 for p in progress)


def test_a_batch_emptied_by_a_revoke_does_not_cut_spark_short(spark: Any) -> None:
    """The cause of a lost batch found on Apache Kafka: Spark stops reading at a 0-row batch.

    A revoke filters the revoked partitions out of the batches already collected; one
    that held only those partitions becomes empty.  Handed to createDataFrame in the
    middle of a table, Spark's Arrow reader ended there, the rows after it never
    reached the batch function, and their offsets were committed anyway.
    """
    import pyarrow as pa

    from aiogroup.spark.ingest import _table_for_spark, _without

    def batch(partition: int, first: int) -> pa.RecordBatch:
        return pa.record_batch(
            {
                "topic": pa.array(["t"] * 3),
                "partition": pa.array([partition] * 3, pa.int32()),
                "offset": pa.array(range(first, first + 3), pa.int64()),
            }
        )

    collected = [batch(2, 0), batch(0, 0), batch(2, 3)]
    revoked = [_without(b, {TopicPartition("t", 0)}) for b in collected]
    assert [b.num_rows for b in revoked] == [3, 0, 3]  # the shape that lost records
    table = _table_for_spark(revoked)
    assert table is not None
    rows = spark.createDataFrame(table).select("offset").collect()
    assert sorted(r.offset for r in rows) == [0, 1, 2, 3, 4, 5]
    assert _table_for_spark([b.slice(0, 0) for b in collected]) is None


async def test_ingest_refuses_auto_commit(spark: Any, bootstrap_servers: str) -> None:
    consumer = GroupConsumer(bootstrap_servers=bootstrap_servers, group_id="g")
    with pytest.raises(ConfigurationError, match="enable_auto_commit"):
        await ingest(consumer, spark, lambda df, info: None, topics=["t"])
