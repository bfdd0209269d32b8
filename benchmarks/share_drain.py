"""``python -m benchmarks.share_drain``: a share consumer's drain rate after its join (issue 28).

Why: :mod:`benchmarks.share_consumer` measures as Java's perf tool does - from the
consumers' creation to the last record - and with its 200,000 records about half of
that is the join (the broker's ``group.share.assignment.interval.ms``, ~1 s, paid alike
by every client): the ranking then follows the noise of a sub-second drain.  This
splits the two on a larger backlog: seconds to the first record, then records/s from
the first record to the last.

Both clients with the same ``max_poll_records`` (librdkafka sends it as the ShareFetch's
MaxRecords and BatchSize, as aiogroup does), batch-optimized acquisition, implicit
acknowledgement, each in a fresh share group reading the same backlog on one Apache
Kafka 4.4 node started here; aiogroup's consumers on this process's one event loop,
confluent-kafka's in one thread each.  Rounds alternate the clients.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from typing import Any

from aiogroup.testing.broker import unique_name
from aiogroup.testing.kafka import KafkaCluster
from aiogroup.testing.share_peers import configure_share_group, confluent_share_rate
from benchmarks.share_baseline import _produce
from benchmarks.share_consumer import aiogroup_share_rate


async def _run(
    records: int, partitions: int, consumers: list[int], rounds: int, max_poll_records: int
) -> list[dict[str, Any]]:
    cluster = await KafkaCluster().start()
    rows: list[dict[str, Any]] = []
    try:
        bootstrap = cluster.bootstrap_servers
        topic = await cluster.create_topic(unique_name("share-drain"), partitions)
        await _produce(bootstrap, topic, records, partitions)
        # Untimed: the broker's first share group loads its coordinators.
        warm = unique_name("warm")
        await configure_share_group(bootstrap, warm)
        await aiogroup_share_rate(bootstrap, topic, warm, min(records, 1_000))
        for round_ in range(rounds):
            for n in consumers:
                order = ["confluent", "aiogroup"][:: 1 if round_ % 2 else -1]
                for client in order:
                    group = unique_name(f"drain-{client}")
                    await configure_share_group(bootstrap, group)
                    if client == "confluent":
                        result = await asyncio.to_thread(
                            confluent_share_rate,
                            bootstrap,
                            topic,
                            group,
                            records,
                            consumers=n,
                            max_poll_records=max_poll_records,
                            timeout_s=300.0,
                        )
                        total, first = result.seconds, result.first_seconds or float("nan")
                    else:
                        result, first = await aiogroup_share_rate(
                            bootstrap,
                            topic,
                            group,
                            records,
                            consumers=n,
                            max_poll_records=max_poll_records,
                            acquire_mode="batch_optimized",
                        )
                        total = result.seconds
                    row = {
                        "client": client,
                        "consumers": n,
                        "round": round_,
                        "first_s": round(first, 3),
                        "drain_per_s": round(records / (total - first)),
                        "load": round(os.getloadavg()[0], 1),
                    }
                    rows.append(row)
                    print(row, flush=True)
    finally:
        await cluster.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.share_drain")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--consumers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-poll-records", type=int, default=500)
    args = parser.parse_args()
    rows = asyncio.run(
        _run(args.records, args.partitions, args.consumers, args.rounds, args.max_poll_records)
    )
    for n in args.consumers:
        ours = sorted(
            r["drain_per_s"] for r in rows if r["client"] == "aiogroup" and r["consumers"] == n
        )
        theirs = sorted(
            r["drain_per_s"] for r in rows if r["client"] == "confluent" and r["consumers"] == n
        )
        print(
            f"{n} consumer(s), max_poll_records {args.max_poll_records}: aiogroup {ours} "
            f"confluent-kafka {theirs} records/s after the first record"
        )


if __name__ == "__main__":
    main()
