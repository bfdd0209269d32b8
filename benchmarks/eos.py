"""Exactly-once consume-transform-produce: aiogroup's TransformLoop against confluent-kafka.

``AIOGROUP_BROKER=kafka python -m benchmarks.eos [--reps 3] [--records 100000]``
writes ``docs/benchmarks/eos.md`` (a section of docs/benchmarks.md, included by
``python -m benchmarks``) and ``docs/benchmarks/eos.json``.

Why these two: both commit the input offsets inside the output's transaction with the
consumer's group metadata (KIP-447).  aiogroup: ``GroupConsumer`` plus aiokafka's
transactional ``AIOKafkaProducer`` driven by ``aiogroup.transactions.TransformLoop``.
confluent-kafka: its asyncio pair, ``AIOConsumer.consume(num_messages=B)`` and
``AIOProducer`` (``begin_transaction``, ``produce``, ``send_offsets_to_transaction``
with ``consumer_group_metadata()``, ``commit_transaction``) - librdkafka behind a
thread pool.

Each measurement is a fresh process (``--worker``): one member reads the whole input
(``--records`` records of 100 B over 4 partitions, read_committed, from the start)
and for each batch of up to B records begins a transaction, produces one output per
input (the value copied), commits the offsets in it and commits it.  The clock runs
from the first batch in hand to the commit that covers the last input; records/s and
transactions/s are over that span.  Clients alternate within each repetition; the
median and the range over repetitions are reported with the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PARTITIONS = 4
VALUE = b"x" * 100
BATCHES = (100, 1000, 10_000)
#: aiogroup twice: the transform sending record by record (``producer.send``), and
#: building the outputs into aiokafka's record batches (``create_batch``/``send_batch``,
#: aiokafka's documented bulk path, with librdkafka's 1 MiB batch size).
CLIENTS = ("aiogroup", "aiogroup-batch", "confluent")
RESULT = "EOS-RESULT "


# -- the measurement (in a worker process) ---------------------------------------------------


async def aiogroup_worker(spec: dict[str, Any]) -> dict[str, Any]:
    from aiokafka import AIOKafkaProducer

    from aiogroup import GroupConsumer
    from aiogroup.transactions import TransformLoop

    total, output = spec["records"], spec["output"]
    consumer = GroupConsumer(
        spec["input"],
        bootstrap_servers=spec["bootstrap"],
        group_id=spec["group"],
        enable_auto_commit=False,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    batched = spec["client"] == "aiogroup-batch"
    producer = AIOKafkaProducer(
        bootstrap_servers=spec["bootstrap"],
        transactional_id=spec["transactional_id"],
        linger_ms=5,  # librdkafka's default, so both batch alike
        max_batch_size=1_048_576 if batched else 16_384,
    )
    first: list[float] = []
    seen = 0

    # Neither transform awaits its deliveries: TransformLoop awaits them while the
    # offsets go out, and aborts if one failed (docs/usage.md).
    async def send_each(producer: Any, batch: dict[Any, list[Any]]) -> int:
        sent = [
            await producer.send(output, r.value, key=r.key)
            for records in batch.values()
            for r in records
        ]
        return len(sent)

    async def send_batches(producer: Any, batch: dict[Any, list[Any]]) -> int:
        sent, count = [], 0
        builder = producer.create_batch()
        for records in batch.values():
            for r in records:
                if builder.append(key=r.key, value=r.value, timestamp=None) is None:
                    sent.append(await producer.send_batch(builder, output, partition=0))
                    builder = producer.create_batch()
                    builder.append(key=r.key, value=r.value, timestamp=None)
                count += 1
        sent.append(await producer.send_batch(builder, output, partition=0))
        return count

    async def copy(producer: Any, batch: dict[Any, list[Any]]) -> None:
        nonlocal seen
        if not first:
            first.append(time.perf_counter())
        seen += await (send_batches if batched else send_each)(producer, batch)
        if seen >= total:
            await loop.stop()  # run() returns once this batch's transaction is settled

    await producer.start()
    await consumer.start()
    loop = TransformLoop(consumer, producer, copy, max_records=spec["batch"])
    await asyncio.wait_for(loop.run(), spec["max_seconds"])
    end = time.perf_counter()
    txns = loop.transactions_committed
    await consumer.stop()
    await producer.stop()
    if loop.records_committed < total:
        raise RuntimeError(f"only {loop.records_committed} of {total} committed")
    return {"seconds": end - first[0], "records": loop.records_committed, "transactions": txns}


async def confluent_worker(spec: dict[str, Any]) -> dict[str, Any]:
    from confluent_kafka import TopicPartition
    from confluent_kafka.aio import AIOConsumer, AIOProducer

    total, output = spec["records"], spec["output"]
    consumer = AIOConsumer(
        {
            "bootstrap.servers": spec["bootstrap"],
            "group.id": spec["group"],
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    producer = AIOProducer(
        {"bootstrap.servers": spec["bootstrap"], "transactional.id": spec["transactional_id"]}
    )
    await producer.init_transactions()
    await consumer.subscribe([spec["input"]])
    done = txns = 0
    first: float | None = None
    deadline = time.monotonic() + spec["max_seconds"]
    while done < total:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {done} of {total} committed")
        msgs = [m for m in await consumer.consume(num_messages=spec["batch"], timeout=0.5)]
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        if first is None:
            first = time.perf_counter()
        await producer.begin_transaction()
        sent = [await producer.produce(output, m.value(), m.key()) for m in msgs]
        ends: dict[tuple[str, int], int] = {}
        for m in msgs:
            ends[(m.topic(), m.partition())] = m.offset() + 1
        offsets = [TopicPartition(t, p, o) for (t, p), o in ends.items()]
        await producer.send_offsets_to_transaction(
            offsets, await consumer.consumer_group_metadata()
        )
        await producer.commit_transaction()
        await asyncio.gather(*sent)
        done += len(msgs)
        txns += 1
    end = time.perf_counter()
    await consumer.close()
    await producer.flush()
    assert first is not None
    return {"seconds": end - first, "records": done, "transactions": txns}


def worker_main(spec: dict[str, Any]) -> None:
    fn = confluent_worker if spec["client"] == "confluent" else aiogroup_worker
    try:
        result = {"ok": True, **asyncio.run(fn(spec))}
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    print(RESULT + json.dumps(result), flush=True)


# -- the scenario (the parent) ----------------------------------------------------------------


def produce_input(bootstrap: str, topic: str, records: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, VALUE, f"k{i}".encode(), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("input still unacknowledged after 60 s")


def run_worker(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.eos", "--worker", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT):
            return dict(json.loads(line[len(RESULT) :]))
    return {"ok": False, "error": f"exit {proc.returncode}: {proc.stderr[-500:]}"}


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


async def scenario(args: argparse.Namespace) -> dict[str, Any]:
    from aiogroup.testing import KafkaBroker

    results: dict[str, Any] = {"runs": {}, "records": args.records, "reps": args.reps}
    async with KafkaBroker() as broker:
        if broker.mode not in ("kafka", "kafka-cluster", "external"):
            raise SystemExit(
                "run with AIOGROUP_BROKER=kafka: the embedded broker has no transactions"
            )
        results["broker"] = broker.mode
        results["load_start"] = load()
        results["started"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        source = await broker.create_topic(f"eos-in-{uuid.uuid4().hex[:8]}", PARTITIONS)
        await asyncio.get_running_loop().run_in_executor(
            None, produce_input, broker.bootstrap_servers, source, args.records
        )
        for rep in range(args.reps):
            for batch in args.batches:
                shift = rep % len(CLIENTS)
                clients = CLIENTS[shift:] + CLIENTS[:shift]
                for client in clients:
                    output = await broker.create_topic(f"eos-out-{uuid.uuid4().hex[:8]}", 1)
                    spec = {
                        "client": client,
                        "bootstrap": broker.bootstrap_servers,
                        "input": source,
                        "output": output,
                        "group": f"eos-{uuid.uuid4().hex[:8]}",
                        "transactional_id": f"eos-{uuid.uuid4().hex[:8]}",
                        "records": args.records,
                        "batch": batch,
                        "max_seconds": args.max_seconds,
                    }
                    loop = asyncio.get_running_loop()
                    result = await loop.run_in_executor(
                        None, run_worker, spec, args.max_seconds + 60
                    )
                    result["load"] = load()
                    results["runs"].setdefault(f"{client}/{batch}", []).append(result)
                    brief = (
                        f"{result['records'] / result['seconds']:,.0f} records/s, "
                        f"{result['transactions'] / result['seconds']:,.1f} txn/s"
                        if result.get("ok")
                        else result.get("error")
                    )
                    print(f"rep {rep + 1} batch {batch} {client}: {brief} (load {result['load']})")
        results["load_end"] = load()
    return results


def _summary(runs: list[dict[str, Any]], key: str) -> tuple[float, float, float] | None:
    values = [r[key] / r["seconds"] for r in runs if r.get("ok")]
    if not values:
        return None
    return statistics.median(values), min(values), max(values)


def markdown(results: dict[str, Any], command: str) -> str:
    lines = [
        "## Exactly-once consume-transform-produce (issue 27)",
        "",
        f"*Apache Kafka ({results['broker']}): run {results['started']}, {results['reps']} "
        f"repetitions, {results['records']:,} input records of 100 B over {PARTITIONS} "
        f"partitions; load average (1, 5, 15 min) {results['load_start']} at the start, "
        f"{results['load_end']} at the end; `{command}`.*",
        "",
        "One member reads the whole input and, per batch of up to B records, begins a "
        "transaction, produces one output per input, commits the batch's offsets in it with "
        "the group metadata (KIP-447) and commits it. aiogroup: `TransformLoop` over "
        "aiokafka's transactional producer, the transform sending each output with "
        "`producer.send` (aiogroup) or building aiokafka record batches with "
        "`create_batch`/`send_batch` and a 1 MiB batch size (aiogroup-batch); confluent: "
        "`AIOConsumer.consume(num_messages=B)` "
        "and `AIOProducer` with `send_offsets_to_transaction(offsets, "
        "consumer_group_metadata())`. Median (min-max) over the repetitions; each run a "
        "fresh process, the clients alternating. A batch is *up to* B: each client's read "
        "returns what it has buffered, so transactions/s also says how full the batches were.",
        "",
        "| batch B | client | records/s | transactions/s | records per transaction "
        "| vs confluent |",
        "|---|---|---|---|---|---|",
    ]
    batches = sorted({int(k.split("/")[1]) for k in results["runs"]})
    for batch in batches:
        ref = _summary(results["runs"].get(f"confluent/{batch}", []), "records")
        for client in CLIENTS:
            runs = results["runs"].get(f"{client}/{batch}", [])
            rec, txn = _summary(runs, "records"), _summary(runs, "transactions")
            if rec is None or txn is None:
                errors = {r.get("error") for r in runs}
                lines.append(f"| {batch:,} | {client} | failed: {errors} | | | |")
                continue
            ok = [r for r in runs if r.get("ok")]
            per = statistics.median(r["records"] / r["transactions"] for r in ok)
            ratio = f"{rec[0] / ref[0]:.2f}x" if ref else "-"
            lines.append(
                f"| {batch:,} | {client} | {rec[0]:,.0f} ({rec[1]:,.0f}-{rec[2]:,.0f}) | "
                f"{txn[0]:,.1f} ({txn[1]:,.1f}-{txn[2]:,.1f}) | {per:,.0f} | {ratio} |"
            )
    lines += ["", *verdict(results)]
    return "\n".join(lines) + "\n"


def verdict(results: dict[str, Any]) -> list[str]:
    """The issue's target (>= confluent at every batch size), read off the medians."""
    out = []
    for batch in sorted({int(k.split("/")[1]) for k in results["runs"]}):
        ref = _summary(results["runs"].get(f"confluent/{batch}", []), "records")
        if ref is None:
            continue
        best = max(
            (
                (s[0] / ref[0], client, s)
                for client in CLIENTS[:-1]
                if (s := _summary(results["runs"].get(f"{client}/{batch}", []), "records"))
            ),
            default=None,
        )
        if best is not None:
            overlap = best[2][1] <= ref[2] and ref[1] <= best[2][2]
            # A median ahead with overlapping ranges was ahead in some runs and behind in
            # others: reported with its spread, not as met.
            if best[0] < 1:
                met = "not met"
            elif overlap:
                met = "not shown: ahead at the median, but the ranges overlap"
            else:
                met = "met (every run)"
            out.append(
                f"- B = {batch:,}: best aiogroup {best[0]:.2f}x confluent at the median "
                f"({best[1]}): {met}"
            )
    out += [
        "",
        "At B = 100 a transaction is its round trips (AddOffsetsToTxn, TxnOffsetCommit, "
        "AddPartitionsToTxn, Produce, EndTxn), so its rate is decided by which request "
        "waits for which (`python -m benchmarks.eos_trace` times each at the client). "
        "Since commit 1202488 aiogroup's TransformLoop sends AddOffsetsToTxn first, "
        "before any output, and lets TxnOffsetCommit fly while the transform runs and "
        "aiokafka adds the outputs' partition and produces them; EndTxn follows the last "
        "of both. Before, the offsets followed the outputs' AddPartitionsToTxn (the "
        "coordinator answers CONCURRENT_TRANSACTIONS to an AddOffsetsToTxn sent while an "
        "add is applied), so the five were nearly in series: traced on one node, load 2, "
        "100 transactions/s before and 142 after. A request answered "
        "CONCURRENT_TRANSACTIONS (the coordinator still writing the previous transaction's "
        "markers) is resent after 2 ms, doubling, not after the producer's 100 ms "
        "`retry_backoff_ms`: with the next transaction's first request held 1 ms after "
        "the previous end (commit 807f40b; librdkafka schedules that request on a 1 ms "
        "timer), about one transaction in ten pays one such resend. Earlier steps: "
        "the outputs leave when the transform returns instead of lingering (fbc22a1), "
        "and the 1 ms pause took aiokafka's own 20 ms resend of AddPartitionsToTxn from "
        "38-41 % of transactions to 2-5 % (66.4 to 99.1 transactions/s). From B = 1,000 the "
        "per-record work shows: aiokafka's `send()` costs "
        "tens of microseconds a record in Python, so a transform sending record by record "
        "stays under confluent's rate, and one that builds record batches passes it. "
        "librdkafka's transaction rate falls further than aiogroup's when the machine is "
        "loaded (each step crosses its threads). "
        "The ranges are wide: the machine was shared (load above).",
    ]
    return out


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.eos", description=__doc__)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--max-seconds", type=float, default=300.0)
    parser.add_argument("--docs", type=Path, default=ROOT / "docs")
    parser.add_argument(
        "--report-only", action="store_true", help="rewrite eos.md from eos.json, run nothing"
    )
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(json.loads(args.worker))
        return
    out = args.docs / "benchmarks"
    if args.report_only:
        results = json.loads((out / "eos.json").read_text())
        (out / "eos.md").write_text(markdown(results, results.get("command", "")))
        return
    if args.reps < 3:
        parser.error("--reps must be >= 3 (a median and a range need three runs)")
    args.batches = [int(b) for b in args.batches.split(",")]
    if any(b < 1 for b in args.batches) or args.records < max(args.batches):
        parser.error("batches must be >= 1 and --records at least the largest batch")
    results = asyncio.run(scenario(args))
    results["command"] = (
        "AIOGROUP_BROKER=kafka python -m benchmarks.eos " + " ".join(argv)
    ).strip()
    out.mkdir(parents=True, exist_ok=True)
    (out / "eos.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "eos.md").write_text(markdown(results, results["command"]))
    print(markdown(results, results["command"]))


if __name__ == "__main__":
    main(sys.argv[1:])
