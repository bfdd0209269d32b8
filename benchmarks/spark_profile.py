"""Where the Spark paths spend their time: ``python -m benchmarks.spark_profile``.

    .venv/bin/python -m benchmarks.spark_profile [--records 1000000] [--partitions 4]
        [--max-offsets 250000] [--batch 100000] [--parts reader,source,ingest]

One broker, one topic produced once (outside every clock), one warm ``local[2]``
session.  Three views:

* ``reader`` - the executor Python worker's work without Spark: ``read_range`` over
  each partition's whole range in this process, under cProfile, with the time to
  the first Arrow batch (consumer construction, bootstrap, metadata, connection,
  first fetch) split from the rest, then the same ranges read a second time (a
  reused worker).  Prints the functions with the most cumulative time.
* ``source`` - ``format("aiogroup")`` with ``Trigger.AvailableNow`` and
  ``maxOffsetsPerTrigger``: per micro-batch, Spark's own ``durationMs`` breakdown
  (``latestOffset`` and ``commitOffsets`` are the streaming-source process's calls,
  ``addBatch`` the executors' tasks plus the sink), the rows and the number of
  input partitions (tasks) the batch planned; the executors' per-range timings
  come from a reader subclass that appends one JSON line per ``read()`` to a file.
* ``ingest`` - ``ingest()`` with the time split into collecting (the driver's
  event loop), ``createDataFrame`` and the write (the worker thread), the number
  of partitions ``createDataFrame`` made per batch, and whether Arrow is enabled.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from aiogroup.spark.source import AiogroupDataSource, AiogroupStreamReader

_TIMINGS_ENV = "AIOGROUP_SPARK_PROFILE_FILE"


class TimedReader(AiogroupStreamReader):
    """The source's reader, with each executor ``read()`` timed into a JSON-lines file."""

    def read(self, partition: Any) -> Iterator[Any]:
        started = time.perf_counter()
        first: float | None = None
        rows = chunks = 0
        for batch in super().read(partition):
            if first is None:
                first = time.perf_counter() - started
            rows += batch.num_rows
            chunks += 1
            yield batch
        path = os.environ.get(_TIMINGS_ENV)
        if path:
            rng = partition.offset_range
            line = {
                "pid": os.getpid(),
                "range": [rng.partition, rng.from_offset, rng.until_offset],
                "first_batch_s": first,
                "total_s": time.perf_counter() - started,
                "rows": rows,
                "chunks": chunks,
            }
            with open(path, "a") as out:
                out.write(json.dumps(line) + "\n")


class TimedSource(AiogroupDataSource):
    @classmethod
    def name(cls) -> str:
        return "aiogroup_timed"

    def streamReader(self, schema: Any) -> TimedReader:
        return TimedReader(self.source_options)


def profile_reader(servers: str, topic: str, partitions: int) -> None:
    from aiogroup.spark.options import parse_options
    from aiogroup.spark.partition_reader import read_range
    from aiogroup.spark.ranges import OffsetRange
    from aiogroup.spark.watermarks import end_offsets
    from aiogroup.structs import TopicPartition

    async def ends() -> dict[TopicPartition, int]:
        from aiokafka.client import AIOKafkaClient

        client = AIOKafkaClient(bootstrap_servers=servers)
        await client.bootstrap()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            return await end_offsets(client, tps, read_committed=False, timeout=30)
        finally:
            await client.close()

    options = parse_options(
        {"kafka.bootstrap.servers": servers, "kafka.group.id": "p", "subscribe": topic}
    )
    ranges = [
        OffsetRange(topic, tp.partition, 0, end) for tp, end in sorted(asyncio.run(ends()).items())
    ]
    for attempt in ("first read in this process", "second read (reused worker)"):
        prof = cProfile.Profile()
        total_rows = 0
        started = time.perf_counter()
        firsts = []
        for rng in ranges:
            t0 = time.perf_counter()
            prof.enable()
            it = read_range(options, rng)
            batch = next(it)
            firsts.append(time.perf_counter() - t0)
            total_rows += batch.num_rows
            for batch in it:
                total_rows += batch.num_rows
            prof.disable()
        elapsed = time.perf_counter() - started
        print(
            f"reader, {attempt}: {total_rows} rows in {elapsed:.2f}s = "
            f"{total_rows / elapsed:,.0f} rows/s; time to first batch per range "
            f"{', '.join(f'{f * 1000:.0f}ms' for f in firsts)}"
        )
        pstats.Stats(prof).sort_stats("cumulative").print_stats(18)


def profile_source(spark: Any, servers: str, topic: str, max_offsets: int, tmp: Path) -> None:
    timings = Path(os.environ[_TIMINGS_ENV])
    spark.dataSource.register(TimedSource)
    out = tmp / "source"
    reader = (
        spark.readStream.format("aiogroup_timed")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("kafka.group.id", f"profile-{time.time_ns()}")
        .option("startingOffsets", "earliest")
        .option("kafka.session.timeout.ms", "6000")
        .option("kafka.heartbeat.interval.ms", "1000")
    )
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    started = time.perf_counter()
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp / "source-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    rows = 0
    print(f"source: wall {elapsed:.2f}s (query start to termination)")
    keys = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
    print("batch  rows     " + "  ".join(f"{k:>13}" for k in keys) + "  triggerExecution")
    for p in query.recentProgress:
        d = p["durationMs"]
        rows += p["numInputRows"]
        print(
            f"{p['batchId']:>5}  {p['numInputRows']:>7}  "
            + "  ".join(f"{d.get(k, 0):>13}" for k in keys)
            + f"  {d.get('triggerExecution', 0):>16}"
        )
    reads = [json.loads(line) for line in timings.read_text().splitlines()]
    print(f"source: {rows} rows; executor reads (one line per Spark task):")
    for r in reads:
        print(
            f"  pid {r['pid']} partition {r['range'][0]} [{r['range'][1]}, {r['range'][2]}) "
            f"{r['rows']} rows in {r['chunks']} chunks: first batch after "
            f"{r['first_batch_s'] * 1000:.0f}ms, all in {r['total_s'] * 1000:.0f}ms"
        )
    print(f"  {len(reads)} tasks in {len({r['pid'] for r in reads})} Python worker processes")


def profile_ingest(
    spark: Any, servers: str, topic: str, records: int, batch: int, tmp: Path
) -> None:
    from aiogroup.consumer import GroupConsumer
    from aiogroup.spark.ingest import SparkIngest

    out = tmp / "ingest"
    print(
        "ingest: spark.sql.execution.arrow.pyspark.enabled =",
        spark.conf.get("spark.sql.execution.arrow.pyspark.enabled"),
        "; maxRecordsPerBatch =",
        spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch"),
    )
    phases: list[tuple[float, float, int, int]] = []

    class Timed(SparkIngest):
        def _call_user(self, table: Any, info: Any) -> Any:
            t0 = time.perf_counter()
            frame = self._spark.createDataFrame(table)
            t1 = time.perf_counter()
            self._handle_batch(frame, info)
            phases.append(
                (t1 - t0, time.perf_counter() - t1, frame.rdd.getNumPartitions(), table.num_rows)
            )

    async def run() -> float:
        consumer = GroupConsumer(
            bootstrap_servers=servers,
            group_id=f"profile-ingest-{time.time_ns()}",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
        )
        await consumer.start()
        seen = 0
        loop = asyncio.get_running_loop()

        def handle(frame: Any, info: Any) -> None:
            nonlocal seen
            frame.write.mode("append").parquet(str(out))
            seen += info.num_records
            if seen >= records:
                loop.call_soon_threadsafe(runner.stop)

        runner = Timed(consumer, spark, handle, topics=[topic], max_records=batch)
        started = time.perf_counter()
        try:
            await runner.run()
        finally:
            await consumer.stop()
        return time.perf_counter() - started

    elapsed = asyncio.run(run())
    create = sum(p[0] for p in phases)
    write = sum(p[1] for p in phases)
    print(
        f"ingest: {records} rows in {elapsed:.2f}s; {len(phases)} batches; createDataFrame "
        f"{create:.2f}s, write {write:.2f}s, the rest (join, collect, commit) "
        f"{elapsed - create - write:.2f}s; partitions per batch "
        f"{sorted({p[2] for p in phases})}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--max-offsets", type=int, default=250_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--parts", default="reader,source,ingest")
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}

    from aiogroup.testing import KafkaBroker
    from aiogroup.testing.broker import unique_name
    from benchmarks.spark_bench import produce

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Python workers inherit the JVM's environment: set before the session starts.
    timings_dir = tempfile.mkdtemp(prefix="aiogroup-spark-profile-reads-")
    os.environ[_TIMINGS_ENV] = str(Path(timings_dir) / "reads.jsonl")
    broker = KafkaBroker()
    asyncio.run(broker.start())
    spark = None
    try:

        async def make_topic() -> str:
            topic = await broker.create_topic(unique_name("spark-profile"), args.partitions)
            await produce(
                broker.bootstrap_servers, topic, args.records, args.partitions, args.value_bytes
            )
            return topic

        topic = asyncio.run(make_topic())
        servers = broker.bootstrap_servers
        if "reader" in parts:
            profile_reader(servers, topic, args.partitions)
        if parts & {"source", "ingest"}:
            from pyspark.sql import SparkSession

            from aiogroup.spark import register

            spark = (
                SparkSession.builder.master("local[2]")
                .appName("aiogroup-spark-profile")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            register(spark)
            spark.range(10).count()
            with tempfile.TemporaryDirectory(prefix="aiogroup-spark-profile-") as tmp:
                if "source" in parts:
                    profile_source(spark, servers, topic, args.max_offsets, Path(tmp))
                if "ingest" in parts:
                    profile_ingest(spark, servers, topic, args.records, args.batch, Path(tmp))
    finally:
        if spark is not None:
            spark.stop()
        asyncio.run(broker.stop())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
