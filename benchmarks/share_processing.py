"""``python -m benchmarks.share_processing``: the share processor against the plain loop.

Issue 28's processing row, one run on one Apache Kafka 4.4 node started here: 2 and 4
share consumers on one 2-partition topic, each record's handler awaiting 5 ms - read
with the plain loop (``getmany``, one record at a time, implicit acknowledgement:
:func:`benchmarks.share_consumer.aiogroup_share_rate`, the same runner as that
benchmark's handler rows) and through :class:`~aiogroup.processing.ShareProcessor` at
``concurrency=100`` (explicit acknowledgement, every record ACCEPTed).  Measured the
same way for both: from the consumers' creation to the last record handled, the group
join included, each run in a fresh share group reading the same backlog.  The plain
loop's ceiling is 200 records/s per consumer (1 / 5 ms); the processor's is
``concurrency`` times that.  Ratios from one run; ``uptime``'s load is printed with the
figures (the machine is shared).

Runs on 2026-11-27 (Kafka 4.4, 2 shared cores, other benchmarks running), the figures
including each run's join (1-2 s of the 3-5 s the processor rows took):

* task per record: 2 consumers 256 records/s (plain loop) against 7,472 (processor), 29x;
  4 consumers 406 against 6,815, 17x (load 5.1-5.6);
* a handler task going on with the next record (as Processor): 2 consumers 258 against
  8,632, 33x; 4 consumers 423 against 12,886, 30x (load 3.7-4.2).

Every one of the 40,000 records ACCEPTed and confirmed in each run, no lock lost.  The
processor rows sit below their ceiling (20,000 records/s per consumer): all consumers
share this process's one event loop, on a loaded machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from aiogroup import ShareConsumer, ShareProcessor
from aiogroup.testing.broker import unique_name
from aiogroup.testing.kafka import KafkaCluster
from aiogroup.testing.share_peers import configure_share_group
from benchmarks.share_baseline import _produce
from benchmarks.share_consumer import SLOW_MAX_POLL_RECORDS, aiogroup_share_rate

HANDLER_S = 0.005


async def processor_rate(
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    *,
    consumers: int,
    concurrency: int,
    timeout_s: float = 300.0,
) -> tuple[float, float, dict[str, int]]:
    """(records/s, seconds, summed processor counters) of ``consumers`` share consumers,
    each through a ShareProcessor whose handler awaits 5 ms, handling ``records``."""
    handled = 0
    done = asyncio.Event()
    began = time.monotonic()

    async def handle(record: Any) -> None:
        nonlocal handled
        await asyncio.sleep(HANDLER_S)
        handled += 1
        if handled >= records:
            done.set()

    members = [
        ShareConsumer(
            topic,
            group_id=group,
            bootstrap_servers=bootstrap,
            client_id=f"aio-proc-{n}",
            acknowledgement_mode="explicit",
            max_poll_records=concurrency,
        )
        for n in range(consumers)
    ]
    procs = [ShareProcessor(c, handle, concurrency=concurrency) for c in members]

    async def run(c: ShareConsumer, p: ShareProcessor) -> None:
        await c.start()
        await p.run()

    tasks = [asyncio.create_task(run(c, p)) for c, p in zip(members, procs, strict=True)]
    try:
        finished = asyncio.create_task(done.wait())
        await asyncio.wait([finished, *tasks], timeout=timeout_s, return_when="FIRST_COMPLETED")
        for t in tasks:
            if t.done() and t.exception() is not None:
                raise t.exception()  # type: ignore[misc]
        if not done.is_set():
            raise TimeoutError(f"{consumers} processors handled {handled} of {records}")
        seconds = time.monotonic() - began
    finally:
        await asyncio.gather(*(p.stop() for p in procs), return_exceptions=True)
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(c.stop(timeout=10) for c in members), return_exceptions=True)
    totals: dict[str, int] = {}
    for p in procs:
        for k, v in p.metrics().items():
            if isinstance(v, int):
                totals[k] = totals.get(k, 0) + v
    return handled / seconds, seconds, totals


async def _run(records: int, slow_records: int, consumers_list: list[int]) -> list[dict[str, Any]]:
    cluster = await KafkaCluster().start()
    rows: list[dict[str, Any]] = []
    try:
        bootstrap = cluster.bootstrap_servers
        topic = await cluster.create_topic(unique_name("share-proc-bench"), 2)
        await _produce(bootstrap, topic, records, 2)
        # Untimed: the first share group creates __share_group_state (seconds).
        warm = unique_name("share-proc-warm")
        await configure_share_group(bootstrap, warm)
        await aiogroup_share_rate(bootstrap, topic, warm, 200, consumers=1)
        for consumers in consumers_list:
            group = unique_name(f"share-proc-loop-{consumers}")
            await configure_share_group(bootstrap, group)
            r, _ = await aiogroup_share_rate(
                bootstrap,
                topic,
                group,
                slow_records,
                consumers=consumers,
                handle_s=HANDLER_S,
                max_poll_records=SLOW_MAX_POLL_RECORDS,
            )
            rows.append(_row("plain loop", consumers, r.records, r.seconds, r.records_per_s))
            group = unique_name(f"share-proc-proc-{consumers}")
            await configure_share_group(bootstrap, group)
            rate, seconds, totals = await processor_rate(
                bootstrap, topic, group, records, consumers=consumers, concurrency=100
            )
            row = _row("ShareProcessor c=100", consumers, records, seconds, rate)
            row.update(
                {k: totals.get(k, 0) for k in ("accepted", "lock_lost", "renewed", "released")}
            )
            rows.append(row)
    finally:
        await cluster.stop()
    return rows


def _row(client: str, consumers: int, records: int, seconds: float, rate: float) -> dict[str, Any]:
    row = {
        "client": client,
        "consumers": consumers,
        "records": records,
        "seconds": round(seconds, 2),
        "records_per_s": round(rate),
        "load": round(os.getloadavg()[0], 1),
    }
    print(row, flush=True)
    return row


def report(rows: list[dict[str, Any]]) -> list[str]:
    out = [
        "| consumers | 5 ms handler through | records | records/s | load |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['consumers']} | {r['client']} | {r['records']:,} | "
            f"{r['records_per_s']:,} | {r['load']} |"
        )
    for consumers in sorted({r["consumers"] for r in rows}):
        loop = next(r for r in rows if r["consumers"] == consumers and r["client"] == "plain loop")
        proc = next(r for r in rows if r["consumers"] == consumers and r["client"] != "plain loop")
        out.append(
            f"- {consumers} consumers: processor/plain loop "
            f"{proc['records_per_s'] / loop['records_per_s']:.1f}x"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.share_processing")
    parser.add_argument("--records", type=int, default=40_000)
    parser.add_argument("--slow-records", type=int, default=1_000)
    parser.add_argument("--consumers", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args()
    began = time.time()
    rows = asyncio.run(_run(args.records, args.slow_records, args.consumers))
    print(json.dumps({"started": began, "load": os.getloadavg(), "rows": rows}))
    print("\n".join(report(rows)))


if __name__ == "__main__":
    main()
