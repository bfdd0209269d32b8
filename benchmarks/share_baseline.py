"""``python -m benchmarks.share_baseline``: the share-consumer peers' throughput (issue 28).

The baseline aiogroup's share consumer is to be measured against, before it exists:
records/s of Apache Kafka's Java share consumers (``ShareConsumerPerformance``, the
``kafka-share-consumer-perf-test`` tool, N threads in one JVM) and of confluent-kafka's
``ShareConsumer`` (N threads, implicit acknowledgement), 1 and 4 consumers on one topic,
on one Apache Kafka 4.4 node started here; then, with a handler that sleeps 5 ms per
record, confluent-kafka with more consumers than partitions.  Each figure is from the
consumers' start to the last record (the group join included), as the Java tool counts.
One run of each, in one process, alternating the clients; ``uptime`` is printed with the
figures (the machines are shared).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from aiokafka import AIOKafkaProducer

from aiogroup.testing.broker import unique_name
from aiogroup.testing.kafka import KafkaCluster
from aiogroup.testing.share_peers import (
    configure_share_group,
    confluent_share_rate,
    java_share_perf,
)


async def _produce(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1)
    await producer.start()
    try:
        value = b"x" * 100
        for i in range(records):
            await producer.send(topic, value, partition=i % partitions)
        await producer.flush()
    finally:
        await producer.stop()


async def _run(records: int, partitions: int, slow_records: int) -> list[dict[str, Any]]:
    cluster = await KafkaCluster().start()
    rows: list[dict[str, Any]] = []
    try:
        bootstrap = cluster.bootstrap_servers
        topic = await cluster.create_topic(unique_name("share-bench"), partitions)
        await _produce(bootstrap, topic, records, partitions)
        for consumers in (1, 4):
            for client in ("java", "confluent"):
                group = unique_name(f"share-bench-{client}-{consumers}")
                await configure_share_group(bootstrap, group)
                if client == "java":
                    result = await asyncio.to_thread(
                        java_share_perf, bootstrap, topic, group, records, threads=consumers
                    )
                else:
                    result = await asyncio.to_thread(
                        confluent_share_rate, bootstrap, topic, group, records, consumers=consumers
                    )
                rows.append(
                    {
                        "client": client,
                        "consumers": consumers,
                        "records": result.records,
                        "seconds": round(result.seconds, 2),
                        "records_per_s": round(result.records_per_s),
                        "handler_ms": 0,
                    }
                )
                print(rows[-1], flush=True)
        for consumers in (partitions, 2 * partitions, 4 * partitions):
            group = unique_name(f"share-bench-slow-{consumers}")
            await configure_share_group(bootstrap, group)
            result = await asyncio.to_thread(
                confluent_share_rate,
                bootstrap,
                topic,
                group,
                slow_records,
                consumers=consumers,
                handle_s=0.005,
            )
            rows.append(
                {
                    "client": "confluent",
                    "consumers": consumers,
                    "records": result.records,
                    "seconds": round(result.seconds, 2),
                    "records_per_s": round(result.records_per_s),
                    "handler_ms": 5,
                }
            )
            print(rows[-1], flush=True)
    finally:
        await cluster.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.share_baseline")
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--slow-records", type=int, default=2_000)
    args = parser.parse_args()
    began = time.time()
    rows = asyncio.run(_run(args.records, args.partitions, args.slow_records))
    load = os.getloadavg()
    print(json.dumps({"started": began, "load": load, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
