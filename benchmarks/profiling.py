"""Where getmany's time goes: ``python -m benchmarks.profiling micro|getmany|gc [--py-spy]``.

``micro`` needs no broker: it decodes one record batch of 5,000 records of 100 B
with aiokafka's decoder (the one aiogroup and aiokafka both use) and times each
layer per record - iterating the batch, reading the fields a ConsumerRecord needs,
building the ConsumerRecord - so the floor that any per-record API pays on this
machine is a measured number, not a guess.

``getmany`` starts the embedded broker, produces 1,000,000 records of 100 B to 8
partitions, and drains them alternately with aiogroup's and aiokafka's getmany
(assign mode, defaults), three times each, in child processes; ``--py-spy`` also
samples one aiogroup drain and prints the lines with the most own time.

``gc`` drains the same backlog with ``getmany`` and ``getmany_arrow`` three ways:
as shipped (the fetcher pauses the cyclic GC while it builds records), with that
pause taken out, and with the collector off for the whole drain; it prints the CPU
seconds of each, so what the pause saves is a measured number.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

RECORDS = 1_000_000
PARTITIONS = 8


def micro(batch_records: int = 5000, rounds: int = 100) -> dict[str, float]:
    """Nanoseconds per record for each layer of the per-record path."""
    from aiokafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from aiokafka.structs import ConsumerRecord

    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, 0, 1 << 22)
    for i in range(batch_records):
        builder.append(i, 1_700_000_000_000 + i, None, bytes(100), [])
    data = bytes(builder.build())

    def iterate() -> None:
        for _ in DefaultRecordBatch(data):
            pass

    def fields() -> None:
        [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in DefaultRecordBatch(data)]

    def records() -> None:
        cr = ConsumerRecord
        [
            cr(
                "t",
                0,
                r.offset,
                r.timestamp,
                0,
                (k := r.key),
                (v := r.value),
                None,
                -1 if k is None else len(k),
                -1 if v is None else len(v),
                tuple(h) if (h := r.headers) else (),
            )
            for r in DefaultRecordBatch(data)
        ]

    out: dict[str, float] = {}
    for name, fn in (("iterate", iterate), ("read fields", fields), ("ConsumerRecord", records)):
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            for _ in range(rounds):
                fn()
            best = min(best, time.perf_counter() - started)
        out[name] = best / (rounds * batch_records) * 1e9
    return out


class _NoPause:
    """Stands in for the ``gc`` module inside aiogroup._fetch.fetcher: collections not paused."""

    @staticmethod
    def isenabled() -> bool:
        return False  # the fetcher then leaves the collector as it is: running


async def _drain(client: str, bootstrap: str, topic: str, collector: str = "default") -> str:
    """Drain the topic once; prints ``records/s cpu_seconds``.

    ``collector``: ``default`` (as shipped: aiogroup pauses the GC while it builds
    records), ``unpaused`` (aiogroup's pause taken out), ``off`` (gc.disable() for the
    whole drain: what no collection at all would give).
    """
    import gc

    from aiokafka import AIOKafkaConsumer

    from aiogroup import GroupConsumer, TopicPartition

    if collector == "unpaused":
        import aiogroup._fetch.fetcher

        aiogroup._fetch.fetcher.gc = _NoPause  # type: ignore[assignment]
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer: Any
    if client.startswith("aiogroup"):
        consumer = GroupConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    else:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
        )
    if client == "aiogroup-arrow":
        import pyarrow  # noqa: F401  (imported before the timed span)
    await consumer.start()
    try:
        consumer.assign(tps)
        n = 0
        if collector == "off":
            gc.disable()
        started, cpu0 = time.perf_counter(), time.process_time()
        while n < RECORDS:
            if client == "aiogroup-arrow":
                batch = await consumer.getmany_arrow(timeout_ms=1000)
                n += 0 if batch is None else batch.num_rows
                continue
            for recs in (await consumer.getmany(timeout_ms=1000)).values():
                n += len(recs)
        rate = n / (time.perf_counter() - started)
        return f"{rate} {time.process_time() - cpu0}"
    finally:
        gc.enable()
        await consumer.stop()


def _child(argv: list[str], py_spy: str | None = None) -> str:
    cmd = [sys.executable, "-m", "benchmarks.profiling", "_drain", *argv]
    if py_spy is not None:
        spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
        cmd = [spy, "record", "-r", "200", "-f", "raw", "-o", py_spy, "--", *cmd]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
    return done.stdout.strip().splitlines()[-1]


def _top_lines(raw: str, n: int = 12) -> list[tuple[float, str]]:
    own: collections.Counter[str] = collections.Counter()
    total = 0
    with open(raw) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            total += int(count)
            own[stack.split(";")[-1]] += int(count)
    return [(100 * c / total, frame) for frame, c in own.most_common(n)]


def getmany(py_spy: bool) -> None:
    from aiogroup.testing import SyncKafkaBroker
    from benchmarks.data import PAYLOADS, produce

    with SyncKafkaBroker() as broker:
        topic = broker.create_topic(partitions=PARTITIONS)
        produce(broker.bootstrap_servers, topic, PAYLOADS["100B"], RECORDS, PARTITIONS)
        rates: dict[str, list[float]] = {"aiogroup": [], "aiokafka": []}
        for _ in range(3):
            for client in rates:
                got = _child([client, broker.bootstrap_servers, topic])
                rates[client].append(float(got.split()[0]))
        for client, got in rates.items():
            print(f"{client:9s} getmany: " + ", ".join(f"{r:,.0f}" for r in got) + " records/s")
        ratio = sorted(rates["aiogroup"])[1] / sorted(rates["aiokafka"])[1]
        print(f"median ratio aiogroup/aiokafka: {ratio:.2f}x")
        if py_spy:
            with tempfile.TemporaryDirectory() as tmp:
                raw = os.path.join(tmp, "getmany.txt")
                _child(["aiogroup", broker.bootstrap_servers, topic], py_spy=raw)
                print("\nown time by line, one aiogroup drain (py-spy):")
                for pct, frame in _top_lines(raw):
                    print(f"  {pct:5.1f}%  {frame}")


def collector() -> None:
    """CPU seconds of one drain with the GC as shipped, unpaused, and off."""
    from aiogroup.testing import SyncKafkaBroker
    from benchmarks.data import PAYLOADS, produce

    settings = ("default", "unpaused", "off")
    with SyncKafkaBroker() as broker:
        topic = broker.create_topic(partitions=PARTITIONS)
        produce(broker.bootstrap_servers, topic, PAYLOADS["100B"], RECORDS, PARTITIONS)
        cpu: dict[tuple[str, str], list[float]] = {}
        for _ in range(3):
            for client in ("aiogroup", "aiogroup-arrow"):
                for setting in settings:
                    got = _child([client, broker.bootstrap_servers, topic, setting])
                    cpu.setdefault((client, setting), []).append(float(got.split()[1]))
        print(f"CPU seconds per {RECORDS:,}-record drain, median of 3 (min-max):")
        for (client, setting), values in cpu.items():
            values.sort()
            print(f"  {client:15s} {setting:9s} {values[1]:.2f} ({values[0]:.2f}-{values[-1]:.2f})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profiling", description=__doc__)
    parser.add_argument("what", choices=["micro", "getmany", "gc", "_drain"])
    parser.add_argument("rest", nargs="*")
    parser.add_argument("--py-spy", action="store_true", help="sample one drain with py-spy")
    args = parser.parse_args(argv)
    if args.what == "_drain":
        print(asyncio.run(_drain(*args.rest)))
    elif args.what == "micro":
        for name, ns in micro().items():
            print(f"{name:15s} {ns:6.0f} ns/record (cumulative)")
    elif args.what == "gc":
        collector()
    else:
        getmany(args.py_spy)


if __name__ == "__main__":
    main()
