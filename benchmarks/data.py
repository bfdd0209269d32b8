"""Topics full of benchmark records, produced once and shared by every client.

Producing a million records takes longer than consuming them with the fastest
client, so each payload variant gets one topic for the whole run; consumers read
it from the beginning in assign mode or under a fresh group id.  librdkafka's
producer is used because it is the quickest way to fill a topic from Python.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Payload:
    """One way of filling a topic: value size, compressibility and batch compression."""

    name: str
    value_bytes: int
    compression: str  # "none", "lz4", "zstd"
    compressible: bool

    def describe(self) -> str:
        kind = "text-like" if self.compressible else "random"
        comp = "uncompressed" if self.compression == "none" else f"{self.compression} batches"
        return f"{self.value_bytes} B {kind} values, {comp}"


PAYLOADS: dict[str, Payload] = {
    p.name: p
    for p in (
        Payload("100B", 100, "none", False),
        Payload("1KiB", 1024, "none", False),
        Payload("100B-lz4", 100, "lz4", True),
        Payload("100B-zstd", 100, "zstd", True),
    )
}


@dataclass(frozen=True)
class Dataset:
    """A produced topic: how many records each partition holds (its end offset)."""

    topic: str
    payload: str
    partitions: int
    records: int
    per_partition: dict[int, int]
    value_bytes_total: int
    produce_seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "payload": self.payload,
            "partitions": self.partitions,
            "records": self.records,
            "per_partition": {str(k): v for k, v in self.per_partition.items()},
            "value_bytes_total": self.value_bytes_total,
            "produce_seconds": self.produce_seconds,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Dataset:
        return cls(
            topic=data["topic"],
            payload=data["payload"],
            partitions=int(data["partitions"]),
            records=int(data["records"]),
            per_partition={int(k): int(v) for k, v in data["per_partition"].items()},
            value_bytes_total=int(data["value_bytes_total"]),
            produce_seconds=float(data["produce_seconds"]),
        )


def _value_pool(payload: Payload, size: int = 4096) -> list[bytes]:
    """Distinct values to cycle through: random bytes, or JSON-ish events that compress ~3x."""
    rng = random.Random(payload.name)
    pool: list[bytes] = []
    for i in range(size):
        if payload.compressible:
            event = {
                "user": f"user-{rng.randrange(10_000):05d}",
                "event": rng.choice(("click", "view", "purchase", "scroll")),
                "page": f"/p/{rng.randrange(500)}",
                "seq": i,
            }
            raw = json.dumps(event, separators=(",", ":")).encode()
            raw = (raw + b" " * payload.value_bytes)[: payload.value_bytes]
        else:
            raw = rng.randbytes(payload.value_bytes)
        pool.append(raw)
    return pool


def produce(
    bootstrap_servers: str, topic: str, payload: Payload, records: int, partitions: int
) -> Dataset:
    """Fill ``topic`` (already created) round-robin over its partitions and wait for acks."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_097_151,
            "compression.type": payload.compression,
            "acks": 1,
            "enable.idempotence": False,
        }
    )
    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    pool = _value_pool(payload)
    per_partition = dict.fromkeys(range(partitions), 0)
    started = time.monotonic()
    for i in range(records):
        part = i % partitions
        while True:
            try:
                producer.produce(
                    topic, pool[i % len(pool)], partition=part, on_delivery=on_delivery
                )
                break
            except BufferError:
                producer.poll(0.05)
        per_partition[part] += 1
        if i % 10_000 == 0:
            producer.poll(0)
    remaining = producer.flush(120)
    elapsed = time.monotonic() - started
    if remaining or errors:
        raise KafkaException(
            f"producing {topic}: {remaining} undelivered, {len(errors)} errors "
            f"(first: {errors[:1]})"
        )
    return Dataset(
        topic=topic,
        payload=payload.name,
        partitions=partitions,
        records=records,
        per_partition=per_partition,
        value_bytes_total=records * payload.value_bytes,
        produce_seconds=elapsed,
    )


def topic_name(prefix: str) -> str:
    return f"bench-{prefix}-{os.getpid()}-{time.monotonic_ns() % 1_000_000}"
