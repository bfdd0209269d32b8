"""Records/s from Kafka into a parquet sink: aiogroup's Spark source, ingest(), and a baseline.

    .venv/bin/python -m benchmarks.spark_bench [--records 200000] [--partitions 4]
        [--value-bytes 100] [--batch 10000] [--modes source,ingest,baseline] [--json out.json]

One run produces the records once, then drains the same topic three ways, each with
a fresh consumer group and its own parquet directory:

* ``source``   - ``format("aiogroup")`` with ``Trigger.AvailableNow`` into a parquet sink
                 (group member in the streaming-source process, executors read ranges);
* ``ingest``   - ``aiogroup.spark.ingest``: a GroupConsumer in the driver, Arrow batches,
                 ``spark.createDataFrame(arrow)``, ``df.write.parquet`` per batch;
* ``baseline`` - a kafka-python ``KafkaConsumer`` in the driver, rows as Python tuples,
                 ``spark.createDataFrame(rows, schema)`` and ``df.write.parquet`` per batch.

The clock runs from "start consuming" to "every record is in parquet"; the number of
rows in each sink is checked, so a mode that loses or repeats records fails loudly
instead of looking fast.  Uses ``AIOGROUP_BOOTSTRAP`` when set, else the embedded broker.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from aiogroup.consumer import GroupConsumer
from aiogroup.spark import register, spark_schema
from aiogroup.spark.ingest import ingest
from aiogroup.testing import KafkaBroker
from aiogroup.testing.broker import unique_name


async def produce(servers: str, topic: str, records: int, partitions: int, size: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=servers, linger_ms=10, max_batch_size=512 * 1024)
    await producer.start()
    try:
        pad = b"x" * max(0, size - 12)
        futures = []
        for i in range(records):
            futures.append(
                await producer.send(
                    topic, b"%012d" % i + pad, key=b"%d" % i, partition=i % partitions
                )
            )
            if len(futures) >= 20_000:
                await asyncio.gather(*futures)
                futures.clear()
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def count_rows(spark: Any, path: Path) -> int:
    return int(spark.read.parquet(str(path)).count())


def run_source(spark: Any, servers: str, topic: str, out: Path) -> float:
    started = time.perf_counter()
    query = (
        spark.readStream.format("aiogroup")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("kafka.group.id", unique_name("bench-source"))
        .option("startingOffsets", "earliest")
        .option("kafka.session.timeout.ms", "6000")
        .option("kafka.heartbeat.interval.ms", "1000")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(out) + "-checkpoint")
        .trigger(availableNow=True)
        .start()
    )
    if not query.awaitTermination(1800):
        query.stop()
        raise RuntimeError("source benchmark did not finish within 30 minutes")
    if query.exception() is not None:
        raise RuntimeError(f"source query failed: {query.exception()}")
    return time.perf_counter() - started


async def run_ingest(
    spark: Any, servers: str, topic: str, out: Path, records: int, batch: int
) -> float:
    consumer = GroupConsumer(
        bootstrap_servers=servers,
        group_id=unique_name("bench-ingest"),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    seen = 0

    def handle(frame: Any, info: Any) -> None:
        nonlocal seen
        frame.write.mode("append").parquet(str(out))
        seen += info.num_records
        if seen >= records:
            loop.call_soon_threadsafe(stop.set)

    await consumer.start()
    started = time.perf_counter()
    try:
        await ingest(
            consumer, spark, handle, topics=[topic], max_records=batch, max_interval=1.0, stop=stop
        )
    finally:
        await consumer.stop()
    return time.perf_counter() - started


def run_baseline(
    spark: Any, servers: str, topic: str, out: Path, records: int, batch: int
) -> float:
    from kafka import KafkaConsumer

    schema = spark_schema()
    started = time.perf_counter()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=servers,
        group_id=unique_name("bench-baseline"),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        max_poll_records=batch,
    )
    seen = 0
    try:
        while seen < records:
            polled = consumer.poll(timeout_ms=1000, max_records=batch)
            rows = [
                (
                    r.key,
                    r.value,
                    r.topic,
                    r.partition,
                    r.offset,
                    datetime.fromtimestamp(r.timestamp / 1000, tz=timezone.utc),
                    r.timestamp_type,
                    [(k, v) for k, v in (r.headers or [])],
                )
                for recs in polled.values()
                for r in recs
            ]
            if not rows:
                continue
            spark.createDataFrame(rows, schema).write.mode("append").parquet(str(out))
            consumer.commit()
            seen += len(rows)
    finally:
        consumer.close()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch", type=int, default=10_000, help="records per driver batch")
    parser.add_argument("--modes", default="source,ingest,baseline")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - {"source", "ingest", "baseline"}
    if unknown:
        parser.error(f"unknown mode(s): {', '.join(sorted(unknown))}")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    async def make_topic(broker: KafkaBroker) -> str:
        topic = await broker.create_topic(unique_name("spark-bench"), args.partitions)
        await produce(
            broker.bootstrap_servers, topic, args.records, args.partitions, args.value_bytes
        )
        return topic

    broker = KafkaBroker()
    asyncio.run(broker.start())
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aiogroup-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    results: dict[str, dict[str, float]] = {}
    try:
        topic = asyncio.run(make_topic(broker))
        spark.range(10).count()  # JVM and Python workers warm before any clock starts
        with tempfile.TemporaryDirectory(prefix="aiogroup-spark-bench-") as tmp:
            for mode in modes:
                out = Path(tmp) / mode
                servers = broker.bootstrap_servers
                if mode == "source":
                    elapsed = run_source(spark, servers, topic, out)
                elif mode == "ingest":
                    elapsed = asyncio.run(
                        run_ingest(spark, servers, topic, out, args.records, args.batch)
                    )
                else:
                    elapsed = run_baseline(spark, servers, topic, out, args.records, args.batch)
                rows = count_rows(spark, out)
                if rows != args.records:
                    raise RuntimeError(f"{mode}: {rows} rows in parquet, expected {args.records}")
                results[mode] = {"seconds": elapsed, "records_per_second": args.records / elapsed}
                print(
                    f"{mode:>8}: {args.records} records in {elapsed:7.2f}s = "
                    f"{args.records / elapsed:10.0f} records/s",
                    flush=True,
                )
    finally:
        spark.stop()
        asyncio.run(broker.stop())
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"args": vars(args) | {"json": str(args.json)}, "results": results}, indent=2
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
