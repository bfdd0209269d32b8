"""format("aiogroup") against a real broker and a local[2] SparkSession.

Each test checks the records that landed in a parquet sink against what was
produced (by partition and offset), and the group's committed offsets against the
ends computed from the producer's own results - never against ListOffsets, which
the embedded test broker answers inexactly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyspark  # noqa: F401  (the spark extra: a missing install fails here)
import pytest
from aiokafka import AIOKafkaProducer
from spark_session import new_session

from aiogroup.consumer import GroupConsumer
from aiogroup.spark import register
from aiogroup.structs import TopicPartition
from aiogroup.testing import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark]

GROUP_TIMEOUTS = {"kafka.session.timeout.ms": "6000", "kafka.heartbeat.interval.ms": "1000"}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = new_session(
        "aiogroup-spark-tests", **{"spark.sql.streaming.noDataProgressEventInterval": "200"}
    )
    register(session)
    yield session
    session.stop()


def produce(
    broker: KafkaBroker, topic: str, count: int, partitions: int, first: int = 0
) -> dict[TopicPartition, int]:
    """Produce values first..first+count-1 round-robin; returns the end offset per partition."""

    async def run() -> dict[TopicPartition, int]:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap_servers, linger_ms=5, max_batch_size=256 * 1024
        )
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

    return asyncio.run(run())


def committed(
    broker: KafkaBroker, group: str, tps: list[TopicPartition]
) -> dict[TopicPartition, int | None]:
    async def run() -> dict[TopicPartition, int | None]:
        consumer = GroupConsumer(bootstrap_servers=broker.bootstrap_servers, group_id=group)
        await consumer.start()
        try:
            return {tp: await consumer.committed(tp) for tp in tps}
        finally:
            await consumer.stop()

    return asyncio.run(run())


def source(spark: Any, broker: KafkaBroker, topic: str, group: str, **options: str) -> Any:
    reader = (
        spark.readStream.format("aiogroup")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("subscribe", topic)
        .option("kafka.group.id", group)
        .option("startingOffsets", "earliest")
    )
    for key, value in {**GROUP_TIMEOUTS, **options}.items():
        reader = reader.option(key, value)
    return reader.load()


def sink_rows(spark: Any, path: Path) -> list[tuple[int, int, bytes]]:
    if not (path / "_spark_metadata").exists():
        return []
    frame = spark.read.parquet(str(path)).select("partition", "offset", "value")
    return [(r.partition, r.offset, bytes(r.value)) for r in frame.collect()]


def expected_values(count: int) -> list[bytes]:
    return sorted(str(i).encode() for i in range(count))


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.5)


def new_topic(broker: KafkaBroker, partitions: int) -> str:
    from aiogroup.testing.broker import unique_name

    return asyncio.run(broker.create_topic(unique_name("spark"), partitions))


def test_available_now_lands_every_record_once_and_commits_the_ends(
    spark: Any, kafka_broker: KafkaBroker, group_id: str, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker, 4)
    total = 100_000
    ends = produce(kafka_broker, topic, total, 4)

    query = (
        source(spark, kafka_broker, topic, group_id)
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(240), "availableNow query did not finish"
    assert query.exception() is None

    rows = sink_rows(spark, tmp_path / "out")
    assert len(rows) == total
    assert len({(p, o) for p, o, _ in rows}) == total
    assert sorted(v for _, _, v in rows) == expected_values(total)
    assert committed(kafka_broker, group_id, sorted(ends)) == ends


def test_restart_from_checkpoint_loses_and_duplicates_nothing(
    spark: Any, kafka_broker: KafkaBroker, group_id: str, tmp_path: Path
) -> None:
    topic = new_topic(kafka_broker, 2)
    first = 20_000
    produce(kafka_broker, topic, first, 2)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def start(**trigger: Any) -> Any:
        return (
            source(spark, kafka_broker, topic, group_id, maxOffsetsPerTrigger="2000")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    query = start(processingTime="0 seconds")
    wait_for(
        lambda: sum(p["numInputRows"] for p in query.recentProgress) >= 4_000,
        180,
        "two batches of the first run",
    )
    query.stop()
    after_stop = len(sink_rows(spark, out))
    assert 0 < after_stop < first, "the first run should have stopped mid-stream"

    more = 5_000
    ends = produce(kafka_broker, topic, more, 2, first=first)
    query = start(availableNow=True)
    assert query.awaitTermination(240), "restarted query did not finish"
    assert query.exception() is None

    rows = sink_rows(spark, out)
    assert len({(p, o) for p, o, _ in rows}) == len(rows), "a record was written twice"
    assert sorted(v for _, _, v in rows) == expected_values(first + more)
    assert committed(kafka_broker, group_id, sorted(ends)) == ends


def _owned(query: Any) -> set[int] | None:
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return None
    latest = progress["sources"][0].get("latestOffset")
    if not latest:
        return set()
    import json

    parsed = json.loads(latest) if isinstance(latest, str) else latest
    return {int(p) for parts in parsed.values() for p in parts}


def test_two_queries_in_one_group_split_the_partitions(
    spark: Any, kafka_broker: KafkaBroker, group_id: str, tmp_path: Path
) -> None:
    partitions = 4
    topic = new_topic(kafka_broker, partitions)
    queries = []
    for name in ("a", "b"):
        queries.append(
            source(spark, kafka_broker, topic, group_id)
            .writeStream.format("parquet")
            .queryName(f"split_{name}_{group_id.replace('-', '_')}")
            .option("path", str(tmp_path / name))
            .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
    try:

        def settled() -> bool:
            owned = [_owned(q) for q in queries]
            if any(o is None or not o for o in owned):
                return False
            a, b = owned
            assert a is not None and b is not None
            return not (a & b) and (a | b) == set(range(partitions))

        wait_for(settled, 120, "both queries to own disjoint halves of the partitions")
        owned = [_owned(q) for q in queries]

        total = 8_000
        produce(kafka_broker, topic, total, partitions)
        wait_for(
            lambda: sum(len(sink_rows(spark, tmp_path / n)) for n in ("a", "b")) >= total,
            120,
            "all records in the two sinks",
        )
        per_query = [sink_rows(spark, tmp_path / n) for n in ("a", "b")]
    finally:
        for q in queries:
            q.stop()

    for rows, mine in zip(per_query, owned, strict=True):
        assert rows, "each query should have consumed something"
        assert {p for p, _, _ in rows} <= (mine or set())
    union = per_query[0] + per_query[1]
    assert len({(p, o) for p, o, _ in union}) == len(union) == total
    assert sorted(v for _, _, v in union) == expected_values(total)


def test_bad_option_fails_the_query_at_start(spark: Any, kafka_broker: KafkaBroker) -> None:
    reader = (
        spark.readStream.format("aiogroup")
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers)
        .option("kafka.group.id", "g")
        .option("subscribe", "a")
        .option("subscribePattern", "b.*")
    )
    with pytest.raises(Exception, match="subscribePattern"):
        reader.load()
