"""``python -m benchmarks.share_record_limit``: strict record-limit acquisition, Java as witness.

Why (issue 28): aiogroup's default acquisition, ``acquire_mode="record_limit"`` (KIP-1206:
the broker acquires at most ``max_poll_records`` records a ShareFetch), cost the broker
about three times the CPU per record of batch-optimized acquisition in
:mod:`benchmarks.share_consumer`.  Is that Kafka 4.4's strict acquisition, or aiogroup's
requests?  Java's own share consumer can acquire the same way (``share.acquire.mode=
record_limit``), so this runs, on one Apache Kafka 4.4 node started here and on the same
backlog, aiogroup and Java's ``ShareConsumerPerformance`` in both modes, each in a fresh
share group, the clients rotated per round, and reports for each run its records/s (from
the consumers' creation to the last record, as Java's tool counts) and the broker JVM's
CPU per 1,000 records.

``--request-log`` turns the broker's request log on (``kafka.request.logger`` at DEBUG:
every request and answer with the broker's own times) and sums up each run's ShareFetch
and ShareAcknowledge requests: how many, the broker's ``totalTime`` / ``localTime``
medians, records acquired per answer, acquired ranges per partition answer (a strict
limit cuts the broker's record batches), acknowledgement batches per request, and the
MaxBytes / MaxRecords / BatchSize / mode each client asked with.  The log costs the
broker CPU itself (one JSON line a request, alike for every client).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import resource
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from aiogroup.testing import kafka as kafka_fixture
from aiogroup.testing.broker import unique_name
from aiogroup.testing.kafka import KafkaCluster
from aiogroup.testing.share_peers import PerfResult, configure_share_group, java_share_perf
from benchmarks.share_baseline import _produce
from benchmarks.share_consumer import aiogroup_share_rate
from benchmarks.share_join_trace import _FIXTURE_LOG4J2, _REQUEST_LOG4J2, _cpu_seconds

#: client name -> (runner, acquire mode)
CLIENTS = {
    "aiogroup-rl": ("aiogroup", "record_limit"),
    "java-rl": ("java", "record_limit"),
    "aiogroup-batch": ("aiogroup", "batch_optimized"),
    "java-batch": ("java", "batch_optimized"),
}


def java_perf(
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    *,
    threads: int,
    properties: dict[str, str],
    timeout_s: float = 120.0,
) -> PerfResult:
    """Kafka's ``ShareConsumerPerformance`` with consumer ``properties`` (its
    ``--command-property``): :func:`aiogroup.testing.share_peers.java_share_perf`."""
    return java_share_perf(
        bootstrap,
        topic,
        group,
        records,
        threads=threads,
        timeout_s=timeout_s,
        properties=properties,
    )


async def produce_batches(
    bootstrap: str, topic: str, records: int, partitions: int, batch_records: int
) -> None:
    """``records`` records of 100 B, round-robin over the partitions, in record batches of
    exactly ``batch_records`` (the last of a partition may be short): where the batches
    divide ``max_poll_records``, a strict acquisition need not cut any of them."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, max_batch_size=1 << 20)
    await producer.start()
    try:
        value = b"x" * 100
        per_part = [records // partitions + (p < records % partitions) for p in range(partitions)]
        for p, count in enumerate(per_part):
            for start in range(0, count, batch_records):
                batch = producer.create_batch()
                for _ in range(min(batch_records, count - start)):
                    if batch.append(key=None, value=value, timestamp=None) is None:
                        raise RuntimeError(f"a batch of {batch_records} records does not fit")
                await (await producer.send_batch(batch, topic, partition=p))
    finally:
        await producer.stop()


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def request_summary(lines: list[str]) -> dict[str, Any]:
    """ShareFetch (key 78) and ShareAcknowledge (79) lines of the broker's request log,
    summed up (see the module's docstring)."""
    total: list[float] = []
    local: list[float] = []
    per_answer: list[int] = []
    ranges_per_part: list[int] = []
    ack_batches: list[int] = []
    ack_ranges: list[int] = []
    asked: Counter[str] = Counter()
    empty = acks = 0
    for line in lines:
        if "Completed request" not in line:
            continue
        start = line.index("{")
        end = line.rindex("}") + 1
        try:
            entry = json.loads(line[start:end])
        except ValueError:
            continue
        key = entry["requestHeader"]["requestApiKey"]
        if key not in (78, 79):
            continue
        request = entry.get("request") or {}
        batches = 0
        for topic in request.get("topics", []):
            for part in topic.get("partitions", []):
                for b in part.get("acknowledgementBatches", []):
                    batches += 1
                    ack_ranges.append(int(b["lastOffset"]) - int(b["firstOffset"]) + 1)
        if key == 79:
            acks += 1
            ack_batches.append(batches)
            continue
        ack_batches.append(batches)
        total.append(float(entry["totalTimeMs"]))
        local.append(float(entry["localTimeMs"]))
        asked[
            f"maxBytes {request.get('maxBytes')} maxRecords {request.get('maxRecords')} "
            f"batchSize {request.get('batchSize')} mode {request.get('shareAcquireMode')} "
            f"maxWait {request.get('maxWaitMs')}"
        ] += 1
        got = 0
        for topic in (entry.get("response") or {}).get("responses", []):
            for part in topic.get("partitions", []):
                acquired = part.get("acquiredRecords", [])
                if acquired:
                    ranges_per_part.append(len(acquired))
                for a in acquired:
                    got += int(a["lastOffset"]) - int(a["firstOffset"]) + 1
        per_answer.append(got)
        empty += got == 0
    return {
        "share_fetches": len(total),
        "empty_answers": empty,
        "share_acknowledges": acks,
        "total_ms_median": round(_median(total), 3),
        "total_s_sum": round(sum(total) / 1000, 2),
        "local_ms_median": round(_median(local), 3),
        "local_s_sum": round(sum(local) / 1000, 2),
        "records_per_answer_median": _median([float(n) for n in per_answer if n]),
        "acquired_ranges_per_partition_answer": dict(sorted(Counter(ranges_per_part).items())),
        "ack_batches_per_request": dict(sorted(Counter(ack_batches).items())),
        "ack_batch_records_median": _median([float(n) for n in ack_ranges]),
        "asked": dict(asked.most_common(4)),
    }


def _log_tail(logs: dict[int, Path], start: dict[int, int]) -> list[str]:
    lines: list[str] = []
    for node, path in logs.items():
        with path.open("rb") as f:
            f.seek(start.get(node, 0))
            lines += f.read().decode(errors="replace").splitlines()
    return lines


def _keep(path: Path, lines: list[str]) -> None:
    """Write a run's request-log lines (``--keep``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(t for t in lines if "Completed request" in t) + "\n")


async def _run(
    records: int,
    partitions: int,
    consumers: list[int],
    rounds: int,
    order: list[str],
    request_log: bool,
    max_poll_records: int,
    keep: Path | None,
    batch_records: int = 0,
    profile: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    if request_log:
        kafka_fixture._LOG4J2 = _REQUEST_LOG4J2
    try:
        cluster = await KafkaCluster().start()
    finally:
        kafka_fixture._LOG4J2 = _FIXTURE_LOG4J2
    logs = {n.node_id: n.log_path for n in cluster.nodes}
    rows: list[dict[str, Any]] = []
    try:
        bootstrap = cluster.bootstrap_servers
        topic = await cluster.create_topic(unique_name("share-rl"), partitions)
        if batch_records:
            await produce_batches(bootstrap, topic, records, partitions, batch_records)
        else:
            await _produce(bootstrap, topic, records, partitions)
        warm = unique_name("warm")
        await configure_share_group(bootstrap, warm)
        await aiogroup_share_rate(bootstrap, topic, warm, min(records, 1_000))
        for round_ in range(rounds):
            for n in consumers:
                shift = round_ % len(order)
                for client in order[shift:] + order[:shift]:
                    runner, mode = CLIENTS[client]
                    group = unique_name(f"share-rl-{client}-{n}")
                    await configure_share_group(bootstrap, group)
                    log_from = {i: p.stat().st_size for i, p in logs.items()}
                    load = os.getloadavg()[0]
                    cpu0 = _cpu_seconds(cluster)
                    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
                    kids0 = kids.ru_utime + kids.ru_stime
                    stats: dict[str, float] = {}
                    if runner == "java":
                        r = await asyncio.to_thread(
                            java_perf,
                            bootstrap,
                            topic,
                            group,
                            records,
                            threads=n,
                            properties={
                                "share.acquire.mode": mode,
                                "max.poll.records": str(max_poll_records),
                            },
                        )
                    else:
                        prof = cProfile.Profile() if client in profile else None
                        if prof is not None:
                            prof.enable()
                        r, _ = await aiogroup_share_rate(
                            bootstrap,
                            topic,
                            group,
                            records,
                            consumers=n,
                            max_poll_records=max_poll_records,
                            acquire_mode=mode,
                            stats=stats,
                        )
                        if prof is not None:
                            prof.disable()
                            out = io.StringIO()
                            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
                            print(f"== cProfile of {client} x{n}, round {round_}\n{out.getvalue()}")
                    broker = _cpu_seconds(cluster) - cpu0
                    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
                    client_cpu = (
                        kids.ru_utime + kids.ru_stime - kids0
                        if runner == "java"
                        else stats.get("cpu_s", float("nan"))
                    )
                    row: dict[str, Any] = {
                        "client": client,
                        "consumers": n,
                        "round": round_,
                        "records_per_s": round(r.records_per_s),
                        "broker_cpu_ms_per_1000": round(broker * 1e6 / records, 2),
                        # aiogroup: this process, first record to last; Java: the JVM's
                        # whole run (start-up and JIT included).
                        "client_cpu_ms_per_1000": round(client_cpu * 1e6 / records, 2),
                        "load": round(load, 1),
                    }
                    if request_log:
                        tail = _log_tail(logs, log_from)
                        row["requests"] = request_summary(tail)
                        if keep is not None:
                            _keep(keep / f"{client}-{n}-{round_}.log", tail)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        await cluster.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.share_record_limit")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--consumers", type=int, nargs="+", default=[1])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-poll-records", type=int, default=500)
    parser.add_argument("--order", nargs="+", default=list(CLIENTS), choices=list(CLIENTS))
    parser.add_argument(
        "--request-log",
        action="store_true",
        help="turn the broker's request log on and sum up each run's share requests",
    )
    parser.add_argument(
        "--batch-records",
        type=int,
        default=0,
        help="produce record batches of exactly this many records (default: the "
        "benchmarks' producer, linger 5 ms: batches of ~592 records)",
    )
    parser.add_argument(
        "--profile",
        nargs="*",
        default=[],
        choices=["aiogroup-rl", "aiogroup-batch"],
        help="cProfile these aiogroup runs (top 25 by own time; slows what it measures)",
    )
    parser.add_argument("--keep", type=Path, help="write each run's request-log lines here")
    args = parser.parse_args()
    rows = asyncio.run(
        _run(
            args.records,
            args.partitions,
            args.consumers,
            args.rounds,
            args.order,
            args.request_log,
            args.max_poll_records,
            args.keep,
            args.batch_records,
            tuple(args.profile),
        )
    )
    for client in args.order:
        for n in args.consumers:
            mine = [r for r in rows if r["client"] == client and r["consumers"] == n]
            print(
                f"{client} x{n}: records/s {[r['records_per_s'] for r in mine]}, CPU ms per "
                f"1,000 records broker {[r['broker_cpu_ms_per_1000'] for r in mine]} client "
                f"{[r['client_cpu_ms_per_1000'] for r in mine]}"
            )


if __name__ == "__main__":
    main()
