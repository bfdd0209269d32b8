"""Configuration and message handling shared by both confluent-kafka adapters."""

from __future__ import annotations

import uuid
from typing import Any

from benchmarks.adapters.base import Polled, Variant, merge_range

#: librdkafka's consume() batch size; 10k amortises the per-call cost without huge lists.
BATCH = 10_000

VARIANTS = {
    "defaults": Variant("defaults", f"librdkafka defaults, consume(num_messages={BATCH})"),
    "tuned": Variant(
        "tuned",
        "fetch.queue.backoff.ms=10 (default 1000: the fetcher idles once its queue is full)",
        {"fetch.queue.backoff.ms": 10},
    ),
    "tuned-crc": Variant(
        "tuned-crc",
        "tuned with check.crcs=true (librdkafka's default is false; aiogroup's and Java's "
        "check_crcs default is true): a like-against-like row",
        {"fetch.queue.backoff.ms": 10, "check.crcs": True},
    ),
    "kip848": Variant(
        "kip848",
        "tuned with group.protocol=consumer (KIP-848; Apache Kafka 4 only)",
        {"fetch.queue.backoff.ms": 10, "group.protocol": "consumer"},
    ),
}


def config(
    bootstrap_servers: str, variant: Variant, group_id: str | None, **extra: Any
) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        # librdkafka insists on a group id even for assign(); a fresh one commits nothing.
        "group.id": group_id or f"bench-assign-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
    }
    conf.update(variant.options)
    conf.update(extra)
    if group_id is not None:
        from benchmarks import timeline

        # A traced member (join scenarios) reports its heartbeats, as the others do.
        conf.update(timeline.librdkafka_options())
    return conf


def group_config(
    cooperative: bool, session_timeout_ms: int, heartbeat_interval_ms: int, variant: Variant
) -> dict[str, Any]:
    if variant.options.get("group.protocol") == "consumer":
        return {}  # librdkafka refuses the classic options with the consumer protocol
    return {
        "partition.assignment.strategy": "cooperative-sticky" if cooperative else "range",
        "session.timeout.ms": session_timeout_ms,
        "heartbeat.interval.ms": heartbeat_interval_ms,
    }


def tally(messages: list[Any], track: bool) -> Polled:
    out = Polled()
    for m in messages:
        err = m.error()
        if err is not None:
            if err.fatal():
                raise RuntimeError(f"librdkafka fatal error: {err}")
            continue
        out.count += 1
        out.nbytes += len(m.value())
        if track:
            off = m.offset()
            merge_range(out.ranges, m.partition(), off, off)
    return out


def partitions_of(tps: list[Any]) -> list[int]:
    return sorted(tp.partition for tp in tps)
