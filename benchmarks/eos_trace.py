"""``python -m benchmarks.eos_trace``: the requests of aiogroup's transform loop, timed.

Why (issue 27): at 100 records a transaction, a transaction is its round trips, so
what decides its rate is which requests wait for which.  This runs the ``aiogroup-batch``
transform of :mod:`benchmarks.eos` on one Apache Kafka node started here and times every
request the client sends (each ``AIOKafkaConnection.send`` until its answer, on the
client's clock): per request type the count and the median and 90th percentile round
trip, then the requests of one transaction from the previous EndTxn's answer.  More
AddOffsetsToTxn (or AddPartitionsToTxn) than transactions are the ones the coordinator
answered CONCURRENT_TRANSACTIONS.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import sys
import time
import uuid
from typing import Any

from aiokafka.conn import AIOKafkaConnection

from benchmarks import eos

#: (request type, sent, answered) on ``time.perf_counter``'s clock.
Event = tuple[str, float, float]


def traced(events: list[Event]) -> None:
    """Make every connection's ``send`` record its request's round trip in ``events``."""
    original = AIOKafkaConnection.send

    def send(self: AIOKafkaConnection, request: Any, expect_response: bool = True) -> Any:
        sent = time.perf_counter()
        answer = original(self, request, expect_response)
        if not expect_response:
            return answer

        async def timed() -> Any:
            try:
                return await answer
            finally:
                events.append((type(request).__name__, sent, time.perf_counter()))

        return timed()

    AIOKafkaConnection.send = send  # type: ignore[method-assign]


def report(events: list[Event], result: dict[str, Any], sample: int) -> list[str]:
    """Per request type: count, median and p90 round trip; then transaction ``sample``."""
    rate = result["transactions"] / result["seconds"]
    lines = [f"{result['transactions']} transactions in {result['seconds']:.2f} s: {rate:.1f}/s"]
    by_type: dict[str, list[float]] = collections.defaultdict(list)
    for name, sent, answered in events:
        by_type[name].append((answered - sent) * 1000)
    for name, trips in sorted(by_type.items(), key=lambda kv: -len(kv[1])):
        p90 = sorted(trips)[int(len(trips) * 0.9)]
        lines.append(
            f"  {name:32s} n={len(trips):5d}  median {statistics.median(trips):6.2f} ms"
            f"  p90 {p90:6.2f} ms"
        )
    ordered = sorted(events, key=lambda e: e[1])
    ends = [e for e in ordered if e[0].startswith("EndTxn")]
    if len(ends) > sample + 1:
        start, stop = ends[sample][2], ends[sample + 1][2]
        lines.append(f"  transaction {sample + 1}, ms from the previous EndTxn's answer:")
        for name, sent, answered in ordered:
            if sent <= stop and answered >= start and not name.startswith("Fetch"):
                began, ended = 1000 * (sent - start), 1000 * (answered - start)
                lines.append(f"    {name:32s} {began:7.2f} -> {ended:7.2f}")
    return lines


async def main(args: argparse.Namespace) -> None:
    from aiogroup.testing import KafkaBroker

    events: list[Event] = []
    traced(events)
    async with KafkaBroker() as broker:
        if broker.mode not in ("kafka", "kafka-cluster", "external"):
            raise SystemExit(
                "run with AIOGROUP_BROKER=kafka: the embedded broker has no transactions"
            )
        source = await broker.create_topic(f"trace-in-{uuid.uuid4().hex[:8]}", eos.PARTITIONS)
        await asyncio.get_running_loop().run_in_executor(
            None, eos.produce_input, broker.bootstrap_servers, source, args.records
        )
        for rep in range(args.reps):
            output = await broker.create_topic(f"trace-out-{uuid.uuid4().hex[:8]}", 1)
            spec = {
                "client": "aiogroup-batch",
                "bootstrap": broker.bootstrap_servers,
                "input": source,
                "output": output,
                "group": f"trace-{uuid.uuid4().hex[:8]}",
                "transactional_id": f"trace-{uuid.uuid4().hex[:8]}",
                "records": args.records,
                "batch": args.batch,
                "max_seconds": 120.0,
            }
            events.clear()
            result = await eos.aiogroup_worker(spec)
            print(f"rep {rep + 1}: " + "\n".join(report(events, result, args.sample)))


def cli(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.eos_trace", description=__doc__)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--sample", type=int, default=50, help="which transaction to lay out")
    asyncio.run(main(parser.parse_args(argv)))


if __name__ == "__main__":
    cli(sys.argv[1:])
