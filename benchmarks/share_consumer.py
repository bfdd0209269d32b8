"""``python -m benchmarks.share_consumer``: aiogroup's share consumer against its peers (issue 28).

What issue 28 asks, in one run on one Apache Kafka 4.4 node started here: records/s of
1 and 4 aiogroup :class:`~aiogroup.share.ShareConsumer` s on one topic against
confluent-kafka's ``ShareConsumer`` and Java's ``kafka-share-consumer-perf-test``
(``ShareConsumerPerformance``), the runners of :mod:`benchmarks.share_baseline`; then,
with a handler that awaits 5 ms per record, throughput against the number of consumers
beyond the partition count (aiogroup and confluent-kafka; Java's tool has no handler).
Targets: ahead of confluent-kafka, within 2x of Java.

Measured as the Java tool measures: from the consumers' creation to the last record,
the group join included, each client in a fresh share group reading the same backlog
(``share.auto.offset.reset=earliest``), implicit acknowledgement, batch-optimized
acquisition (Java's default ``share.acquire.mode``; librdkafka's ShareFetch v1 has no
other; aiogroup's ``acquire_mode="batch_optimized"``) - plus aiogroup with its default,
strict record-limit acquisition (``aiogroup-record-limit``).  Each row also has the CPU
the run took, the client's and the broker JVM's: on a shared machine records/s follow
the load, CPU per record much less.  aiogroup's N
consumers run on this process's one event loop (as an asyncio service would);
confluent-kafka's run in N threads of this process (librdkafka's own threads under
them); Java's in N threads of one JVM.  ``--rounds`` repeats the whole set, clients
alternating inside each round, so each figure has a spread; a target is "met" only when
every run says so, "not met" when every run says the opposite, and "not shown" when
the ranges overlap.  ``uptime``'s load is printed with the figures: the machine is shared.
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
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiogroup import ShareConsumer
from aiogroup.testing.broker import unique_name
from aiogroup.testing.kafka import KafkaCluster
from aiogroup.testing.share_peers import (
    PerfResult,
    configure_share_group,
    confluent_share_rate,
    java_share_perf,
)
from benchmarks.share_baseline import _produce
from benchmarks.stats import Summary, summarize


async def aiogroup_share_rate(
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    *,
    consumers: int = 1,
    handle_s: float = 0.0,
    max_poll_records: int = 500,
    timeout_s: float = 300.0,
    stats: dict[str, float] | None = None,
    **options: Any,
) -> tuple[PerfResult, float]:
    """``consumers`` aiogroup share consumers on this loop (implicit acknowledgement)
    read ``records`` records between them; measured as :func:`java_share_perf` measures
    (from the consumers' creation to the last record, the join included).  ``handle_s``:
    each record's handler awaits that long (one record at a time per consumer).  Also
    returns the seconds to the first record (the join and the first fetch): how much of
    the figure is start-up.  ``stats``, when given, receives ``cpu_s``: this process's
    CPU seconds from the first record to the last (is the drain CPU-bound here?)."""
    got = 0
    cpu0: list[float] = []
    done = asyncio.Event()
    began = time.monotonic()
    first: list[float] = []
    members = [
        ShareConsumer(
            topic,
            group_id=group,
            bootstrap_servers=bootstrap,
            client_id=f"aio-{n}",
            max_poll_records=max_poll_records,
            **options,
        )
        for n in range(consumers)
    ]

    async def run(c: ShareConsumer) -> None:
        nonlocal got
        await c.start()
        while not done.is_set():
            batch = await c.getmany(timeout_ms=200)
            if batch and not first:
                first.append(time.monotonic() - began)
                cpu0.append(time.process_time())
            for rs in batch.values():
                if handle_s:
                    for _ in rs:
                        await asyncio.sleep(handle_s)
                got += len(rs)
            if got >= records:
                done.set()

    tasks = [asyncio.create_task(run(c)) for c in members]
    try:
        finished = asyncio.create_task(done.wait())
        await asyncio.wait([finished, *tasks], timeout=timeout_s, return_when="FIRST_COMPLETED")
        for t in tasks:
            if t.done() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
        if not done.is_set():
            raise TimeoutError(f"{consumers} aiogroup share consumer(s) read {got} of {records}")
        seconds = time.monotonic() - began
        if stats is not None and cpu0:
            stats["cpu_s"] = time.process_time() - cpu0[0]
    finally:
        done.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(c.stop(timeout=10) for c in members), return_exceptions=True)
    result = PerfResult(got, seconds, got / seconds, time.monotonic() - began)
    return result, first[0] if first else float("nan")


#: aiogroup's ``max_poll_records`` in the runs with a handler (the acquisition limit).
SLOW_MAX_POLL_RECORDS = 10


#: The clients of the runs without a handler.  ``aiogroup`` acquires as its peers do
#: (batch-optimized: Java's default ``share.acquire.mode``, and all librdkafka's ShareFetch
#: v1 can ask for); ``aiogroup-record-limit`` is aiogroup's default, strict
#: ``max_poll_records`` acquisition (KIP-1206), which costs the broker about twice the
#: CPU per record (docs/benchmarks/share.md).
CLIENTS = ("aiogroup", "confluent", "java", "aiogroup-record-limit")


@dataclass
class Cpu:
    """CPU seconds (user + system) used so far: this process (aiogroup's consumers, or
    confluent-kafka's with librdkafka's threads), its children (Java's JVM) and the
    brokers' JVMs (/proc)."""

    own: float
    children: float
    broker: float

    @classmethod
    def now(cls, cluster: KafkaCluster | None) -> Cpu:
        own = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        broker = 0.0
        for node in cluster.nodes if cluster is not None else ():
            if node.process is not None:
                stat = Path(f"/proc/{node.process.pid}/stat").read_text()
                fields = stat.rsplit(")", 1)[1].split()
                broker += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return cls(own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime, broker)

    def since(self, before: Cpu) -> Cpu:
        return Cpu(
            self.own - before.own, self.children - before.children, self.broker - before.broker
        )


async def _measure(
    client: str,
    bootstrap: str,
    topic: str,
    records: int,
    consumers: int,
    handle_s: float = 0.0,
    cluster: KafkaCluster | None = None,
) -> tuple[PerfResult, float | None, Cpu]:
    """One run of ``client``; also the CPU it took (the client's and the broker's,
    from the consumers' creation to their close)."""
    group = unique_name(f"share-bench-{client}-{consumers}")
    await configure_share_group(bootstrap, group)
    before = Cpu.now(cluster)
    r, first = await _measure_one(client, bootstrap, topic, group, records, consumers, handle_s)
    return r, first, Cpu.now(cluster).since(before)


async def _measure_one(
    client: str,
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    consumers: int,
    handle_s: float,
) -> tuple[PerfResult, float | None]:

    if client == "java":
        r = await asyncio.to_thread(
            java_share_perf, bootstrap, topic, group, records, threads=consumers
        )
        return r, None
    if client == "confluent":
        r = await asyncio.to_thread(
            confluent_share_rate,
            bootstrap,
            topic,
            group,
            records,
            consumers=consumers,
            handle_s=handle_s,
        )
        return r, None
    # With a handler, a consumer holds what one fetch acquired until it has handled it
    # all: 500 records (the default) would leave consumers past the first few idle, and
    # so would batch-optimized acquisition (a fetch takes whole batches of ~120).
    batch = client == "aiogroup" and not handle_s
    return await aiogroup_share_rate(
        bootstrap,
        topic,
        group,
        records,
        consumers=consumers,
        handle_s=handle_s,
        max_poll_records=SLOW_MAX_POLL_RECORDS if handle_s else 500,
        acquire_mode="batch_optimized" if batch else "record_limit",
    )


async def _run(
    records: int, partitions: int, slow_records: int, rounds: int, slow_consumers: list[int]
) -> list[dict[str, Any]]:
    cluster = await KafkaCluster().start()
    rows: list[dict[str, Any]] = []
    try:
        bootstrap = cluster.bootstrap_servers
        topic = await cluster.create_topic(unique_name("share-bench"), partitions)
        await _produce(bootstrap, topic, records, partitions)
        # Untimed: the broker's first share group creates __share_group_state and loads
        # its coordinators (measured: the first client paid ~3 s more than the others).
        await _measure("aiogroup", bootstrap, topic, min(records, 1_000), 1)
        for round_ in range(rounds):
            for consumers in (1, 4):
                # Rotated per round: no client always runs first (JIT, page cache).
                order = list(CLIENTS)
                order = order[round_ % 4 :] + order[: round_ % 4]
                for client in order:
                    r, first, cpu = await _measure(
                        client, bootstrap, topic, records, consumers, cluster=cluster
                    )
                    rows.append(_row(client, consumers, 0, round_, r, first, cpu))
            for consumers in slow_consumers:
                for client in ("aiogroup", "confluent"):
                    r, first, cpu = await _measure(
                        client, bootstrap, topic, slow_records, consumers, 0.005, cluster
                    )
                    rows.append(_row(client, consumers, 5, round_, r, first, cpu))
    finally:
        await cluster.stop()
    return rows


def _row(
    client: str,
    consumers: int,
    handler_ms: int,
    round_: int,
    r: PerfResult,
    first: float | None,
    cpu: Cpu,
) -> dict[str, Any]:
    row = {
        "client": client,
        "consumers": consumers,
        "handler_ms": handler_ms,
        "round": round_,
        "records": r.records,
        "seconds": round(r.seconds, 2),
        "records_per_s": round(r.records_per_s),
        "load": round(os.getloadavg()[0], 1),
        # The client's CPU (Java's: its JVM, a child process) and the broker's, per run.
        "client_cpu_s": round(cpu.children if client == "java" else cpu.own, 2),
        "broker_cpu_s": round(cpu.broker, 2),
    }
    if first is not None:
        row["first_record_s"] = round(first, 2)
    print(row, flush=True)
    return row


def _rates(rows: list[dict[str, Any]], client: str, consumers: int, handler_ms: int) -> list[float]:
    return [
        float(r["records_per_s"])
        for r in rows
        if (r["client"], r["consumers"], r["handler_ms"]) == (client, consumers, handler_ms)
    ]


def verdict(ours: Summary, theirs: Summary, factor: float = 1.0) -> str:
    """ "met" when every run of ours beats every run of theirs scaled by ``factor``,
    "not met" when every run says the opposite, else "not shown (ranges overlap)"."""
    if ours.min > theirs.max * factor:
        return "met (every run)"
    if ours.max < theirs.min * factor:
        return "not met (every run)"
    return "not shown (ranges overlap)"


def report(rows: list[dict[str, Any]], slow_consumers: list[int]) -> list[str]:
    out = [
        "| consumers | handler | client | records/s median | min-max | runs |",
        "|---|---|---|---|---|---|",
    ]
    keys = [(c, 0) for c in (1, 4)] + [(c, 5) for c in slow_consumers]
    for consumers, handler in keys:
        for client in CLIENTS:
            rates = _rates(rows, client, consumers, handler)
            if not rates:
                continue
            s = summarize(rates)
            out.append(
                f"| {consumers} | {handler} ms | {client} | {s.median:,.0f} | "
                f"{s.min:,.0f}-{s.max:,.0f} | {s.n} |"
            )
    out.append("")
    for consumers in (1, 4):
        aio = summarize(_rates(rows, "aiogroup", consumers, 0))
        conf = summarize(_rates(rows, "confluent", consumers, 0))
        java = summarize(_rates(rows, "java", consumers, 0))
        out.append(
            f"- {consumers} consumer(s): aiogroup/confluent {aio.median / conf.median:.2f}x at the "
            f"median, ahead of confluent-kafka: {verdict(aio, conf)}; aiogroup/Java "
            f"{aio.median / java.median:.2f}x, within 2x of Java: {verdict(aio, java, 0.5)}"
        )
        strict = _rates(rows, "aiogroup-record-limit", consumers, 0)
        if strict:
            lim = summarize(strict)
            out.append(
                f"  - aiogroup-record-limit (the default acquisition): "
                f"{lim.median / conf.median:.2f}x of confluent-kafka ({verdict(lim, conf)}), "
                f"{lim.median / java.median:.2f}x of Java ({verdict(lim, java, 0.5)})"
            )
    out.extend(_after_join(rows))
    out.extend(_cpu_lines(rows))
    return out


def _cpu_lines(rows: list[dict[str, Any]]) -> list[str]:
    """CPU per 1,000 records, client and broker, median per client (no handler): what
    the shared machine's load does not move much, unlike records/s."""
    out = []
    for consumers in (1, 4):
        cells = []
        for client in CLIENTS:
            mine = [
                r
                for r in rows
                if (r["client"], r["consumers"], r["handler_ms"]) == (client, consumers, 0)
                and "client_cpu_s" in r
            ]
            if not mine:
                continue
            own = statistics.median(1000 * r["client_cpu_s"] / r["records"] for r in mine)
            broker = statistics.median(1000 * r["broker_cpu_s"] / r["records"] for r in mine)
            cells.append(f"{client} {own * 1000:.1f} + broker {broker * 1000:.1f}")
        out.append(f"- CPU ms per 1,000 records, {consumers} consumer(s): " + "; ".join(cells))
    return out


def _after_join(rows: list[dict[str, Any]]) -> list[str]:
    """How much of aiogroup's figures is the join: the seconds to the first record, and
    the rate from it to the last (rows with ``first_record_s``, no handler)."""
    out = []
    for consumers in (1, 4):
        timed = [
            r
            for r in rows
            if (r["client"], r["consumers"], r["handler_ms"]) == ("aiogroup", consumers, 0)
            and "first_record_s" in r
            and r["seconds"] > r["first_record_s"]
        ]
        if not timed:
            continue
        firsts = summarize([float(r["first_record_s"]) for r in timed])
        drains = summarize([r["records"] / (r["seconds"] - r["first_record_s"]) for r in timed])
        out.append(
            f"- aiogroup, {consumers} consumer(s): first record "
            f"{firsts.min:.2f}-{firsts.max:.2f} s after creation (the join); "
            f"from it to the last, {drains.median:,.0f} records/s "
            f"at the median ({drains.min:,.0f}-{drains.max:,.0f})"
        )
    return out


async def _profile(records: int, partitions: int, reps: int, top: int) -> None:
    """aiogroup alone, one consumer draining ``records``: ``reps`` timed drains, then
    one under cProfile (its top functions by own time and by cumulative time).  Cheap
    enough to run between changes; the comparison with the peers is the full run's."""
    cluster = await KafkaCluster().start()
    try:
        bootstrap = cluster.bootstrap_servers
        topic = await cluster.create_topic(unique_name("share-prof"), partitions)
        await _produce(bootstrap, topic, records, partitions)
        await _measure("aiogroup", bootstrap, topic, min(records, 1_000), 1)
        for _ in range(reps):
            r, first, _cpu = await _measure("aiogroup", bootstrap, topic, records, 1)
            print(
                f"drain: {r.records} records in {r.seconds:.2f} s = {r.records_per_s:,.0f}/s "
                f"(first record {first:.2f} s; load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
        prof = cProfile.Profile()
        prof.enable()
        r, _, _cpu = await _measure("aiogroup", bootstrap, topic, records, 1)
        prof.disable()
        print(f"under cProfile: {r.records_per_s:,.0f} records/s, {r.seconds:.2f} s")
        for key in ("tottime", "cumulative"):
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats(key).print_stats(top)
            print(out.getvalue())
    finally:
        await cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.share_consumer")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--slow-records", type=int, default=2_000)
    parser.add_argument("--slow-consumers", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--profile",
        type=int,
        metavar="REPS",
        help="aiogroup alone: REPS timed one-consumer drains, then one under cProfile",
    )
    args = parser.parse_args()
    if args.profile is not None:
        asyncio.run(_profile(args.records, args.partitions, args.profile, 30))
        return
    began = time.time()
    rows = asyncio.run(
        _run(args.records, args.partitions, args.slow_records, args.rounds, args.slow_consumers)
    )
    print(json.dumps({"started": began, "load": os.getloadavg(), "rows": rows}))
    print("\n".join(report(rows, args.slow_consumers)))


if __name__ == "__main__":
    main()
