"""The native decoder against the pure-Python Arrow path: ``python -m benchmarks.native_bench``.

    .venv/bin/python -m benchmarks.native_bench [--reps 3] [--no-broker]

Two views, each alternating ``AIOGROUP_NATIVE=0`` (pure Python) and ``=1`` (the
``aiogroup_native`` module) in one process, so both see the same machine load:

* ``decode`` (no broker) - 100 v2 batches of 500 records built in memory (100 B
  uncompressed, 1 KiB lz4), walked into a ``ColumnBuilder`` and turned into one
  RecordBatch: records/s of the decode alone, best of 3 per repetition.
* ``getmany_arrow`` - the test broker (``AIOGROUP_BROKER`` picks it), one topic of 4
  partitions per variant (1,000,000 x 100 B uncompressed, 300,000 x 1 KiB lz4),
  produced outside the clock; each drain is a fresh assign-mode consumer reading
  everything with ``getmany_arrow(max_records=100_000)``.  The clock starts after
  the first batch (connection and first fetch excluded); records/s and the process
  CPU seconds of the drain.

Prints one JSON object (medians, min-max) at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import struct
import time
from typing import Any

VARIANTS = [(100, "none", 1_000_000), (1024, "lz4", 300_000)]
CODEC_IDS = {"none": 0, "lz4": 3}


def _mode(native: bool) -> None:
    os.environ["AIOGROUP_NATIVE"] = "1" if native else "0"


def _record_set(size: int, codec: int) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    rng = random.Random(0)
    out = bytearray()
    for b in range(100):
        builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 30)
        for i in range(500):
            value = rng.randbytes(size // 2) * 2
            builder.append(i, 1_700_000_000_000 + i, b"%d" % i, value, [])
        batch = bytearray(builder.build())
        struct.pack_into(">q", batch, 0, b * 500)
        out += batch  # the CRC does not cover the base offset
    return bytes(out)


def decode_rates(size: int, codec: int, native: bool) -> float:
    from aiogroup._fetch.arrow import ColumnBuilder
    from aiogroup._fetch.decoding import Chunk, split_batches
    from aiogroup._fetch.walker import walk
    from aiogroup._state.subscription import PartitionState, SubscriptionState
    from aiogroup.structs import TopicPartition

    data = _record_set(size, codec)
    _mode(native)
    best = float("inf")
    rows = 0
    for _ in range(3):
        st = PartitionState(TopicPartition("t", 0), SubscriptionState().default_reset)
        st.seek(0)
        started = time.perf_counter()
        batches = split_batches(data)
        chunk = Chunk(
            st,
            st.epoch,
            0,
            batches,
            len(data),
            end_offset=batches[-1].next_offset,
            check_crcs=True,
            aborted=None,
            data=data,
        )
        sink = ColumnBuilder()
        walk(chunk, 1 << 30, sink)
        rows = sink.to_record_batch().num_rows
        best = min(best, time.perf_counter() - started)
    return rows / best


async def drain(servers: str, topic: str, records: int, partitions: int) -> tuple[float, float]:
    from aiogroup import GroupConsumer
    from aiogroup.structs import TopicPartition

    consumer = GroupConsumer(bootstrap_servers=servers, auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        first = await consumer.getmany_arrow(timeout_ms=10_000, max_records=100_000)
        seen = first.num_rows if first is not None else 0
        counted = records - seen
        wall, cpu = time.perf_counter(), time.process_time()
        deadline = time.monotonic() + 300
        while seen < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"read {seen} of {records} records of {topic} in 5 minutes")
            batch = await consumer.getmany_arrow(timeout_ms=1000, max_records=100_000)
            if batch is not None:
                seen += batch.num_rows
        return counted / (time.perf_counter() - wall), time.process_time() - cpu
    finally:
        await consumer.stop()


def _summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


async def broker_rates(reps: int) -> dict[str, Any]:
    from aiogroup.testing import KafkaBroker
    from aiogroup.testing.broker import unique_name
    from benchmarks.spark_bench import produce

    broker = KafkaBroker()
    await broker.start()
    out: dict[str, Any] = {"broker": broker.mode}
    try:
        for size, codec, n in VARIANTS:
            topic = unique_name("native")
            await broker.create_topic(topic, 4)
            await produce(broker.bootstrap_servers, topic, n, 4, size, codec)
            runs: dict[str, list[tuple[float, float]]] = {"pure": [], "native": []}
            for _ in range(reps):
                for name in ("pure", "native"):
                    _mode(name == "native")
                    runs[name].append(await drain(broker.bootstrap_servers, topic, n, 4))
                    print(f"getmany_arrow {size}B-{codec} {name}: {runs[name][-1]}", flush=True)
            out[f"{size}B-{codec}"] = {
                name: {
                    "records_per_second": _summary([r for r, _ in rs]),
                    "cpu_seconds": _summary([c for _, c in rs]),
                }
                for name, rs in runs.items()
            }
    finally:
        await broker.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-broker", action="store_true", help="the decode view only")
    args = parser.parse_args()
    from aiogroup._fetch.native import native_decoder

    _mode(True)
    if native_decoder() is None:
        raise SystemExit("aiogroup_native is not installed: make install (needs cargo)")
    report: dict[str, Any] = {
        "loadavg_before": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "decode": {},
    }
    for size, codec, _ in VARIANTS:
        rates: dict[str, list[float]] = {"pure": [], "native": []}
        for _ in range(args.reps):
            for name in ("pure", "native"):
                rates[name].append(decode_rates(size, CODEC_IDS[codec], name == "native"))
        report["decode"][f"{size}B-{codec}"] = {k: _summary(v) for k, v in rates.items()}
        print(f"decode {size}B-{codec}: {report['decode'][f'{size}B-{codec}']}", flush=True)
    if not args.no_broker:
        report["getmany_arrow"] = asyncio.run(broker_rates(args.reps))
    report["loadavg_after"] = os.getloadavg()
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
