"""Prometheus exporter for ``GroupConsumer.metrics()`` (install ``aiogroup[prometheus]``).

A custom collector rather than counters updated on the hot path: Prometheus pulls,
so the snapshot is taken only when it scrapes, and the consumer does no extra work
per record.  ``register_prometheus(consumer)`` adds the collector to a registry
(the default one unless given) and returns it, so it can be unregistered after
``stop()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

try:
    from prometheus_client.core import REGISTRY, CounterMetricFamily, GaugeMetricFamily
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        "aiogroup.prometheus needs prometheus_client: pip install 'aiogroup[prometheus]'"
    ) from exc

from aiogroup.processing.processor import metrics_partition

if TYPE_CHECKING:
    from aiogroup.consumer import GroupConsumer

__all__ = ["ConsumerCollector", "register_prometheus"]

PREFIX = "aiogroup_consumer"


class ConsumerCollector:
    """Turns one consumer's ``metrics()`` and ``health()`` into Prometheus families."""

    def __init__(self, consumer: GroupConsumer) -> None:
        self._consumer = consumer

    def describe(self) -> list[Any]:
        return []  # an unchecked collector: metric families vary with the assignment

    def collect(self) -> Iterator[Any]:
        c = self._consumer
        snap = c.metrics()
        health = c.health()
        base = ["client_id", "group_id"]
        values = [c.config.client_id, c.config.group_id or ""]

        def counter(name: str, doc: str, value: float) -> Any:
            fam = CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=base)
            fam.add_metric(values, value)
            return fam

        def gauge(name: str, doc: str, value: float | None) -> Any:
            fam = GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=base)
            if value is not None:
                fam.add_metric(values, value)
            return fam

        yield counter("records", "Records handed to the application", snap.records_consumed)
        yield counter("bytes", "Key+value bytes handed to the application", snap.bytes_consumed)
        yield gauge("records_per_second", "Records/s over the last 30 s", snap.records_per_second)
        yield gauge("bytes_per_second", "Bytes/s over the last 30 s", snap.bytes_per_second)
        for name, stats in (
            ("fetch", snap.fetch_latency),
            ("heartbeat", snap.heartbeat_latency),
            ("commit", snap.commit_latency),
        ):
            yield counter(f"{name}_requests", f"{name} requests answered", stats.count)
            yield counter(f"{name}_errors", f"{name} requests failed", stats.errors)
            yield counter(
                f"{name}_latency_seconds_total",
                f"Sum of {name} latencies",
                stats.total_ms / 1000,
            )
            yield gauge(
                f"{name}_latency_seconds_max", f"Slowest {name} so far", stats.max_ms / 1000
            )
        yield counter("rebalances", "Completed rebalances (first join included)", snap.rebalances)
        yield counter(
            "rebalance_seconds_total", "Time spent rebalancing", snap.total_rebalance_seconds
        )
        yield gauge(
            "last_rebalance_seconds", "Duration of the last rebalance", snap.last_rebalance_seconds
        )
        yield counter("partitions_lost", "Partitions lost (not revoked)", snap.partitions_lost)
        yield gauge(
            "seconds_since_heartbeat",
            "Age of the last successful heartbeat",
            snap.seconds_since_last_heartbeat,
        )
        yield gauge("seconds_since_poll", "Age of the last poll", snap.seconds_since_last_poll)
        yield gauge("ready", "1 when health().ready", 1.0 if health.ready else 0.0)
        yield gauge("live", "1 when health().live", 1.0 if health.live else 0.0)
        yield gauge(
            "broker_reachable",
            "1 when a request succeeded recently",
            float(health.broker_reachable),
        )
        state = GaugeMetricFamily(
            f"{PREFIX}_member_state", "1 for the member's current state", labels=[*base, "state"]
        )
        state.add_metric([*values, snap.member_state], 1.0)
        yield state
        lag = GaugeMetricFamily(
            f"{PREFIX}_lag",
            "High watermark minus position, per assigned partition",
            labels=[*base, "topic", "partition"],
        )
        for tp, part in sorted(snap.partitions.items()):
            if part.lag is not None:
                lag.add_metric([*values, tp.topic, str(tp.partition)], part.lag)
        yield lag
        if snap.processing is not None:
            yield from _processing_families(snap.processing, base, values)


#: Processor counters (monotonic) and gauges: (key in ``Processor.metrics()``, name, help).
_PROCESSING_COUNTERS = (
    ("finished", "finished", "Records whose handler finished (dead-lettered included)"),
    ("retried", "retried", "Handler attempts retried after an exception or timeout"),
    ("dead_lettered", "dead_lettered", "Records produced to the dead-letter topic"),
    ("failed", "failed", "Records that failed for good (stop mode)"),
)
_PROCESSING_GAUGES = (
    ("in_flight", "in_flight", "Handlers running now"),
    ("queued", "queued", "Records received, waiting for their turn"),
    ("oldest_in_flight_age_s", "oldest_in_flight_seconds", "Age of the oldest running handler"),
    ("paused_partitions", "paused_partitions", "Partitions paused past their unfinished bound"),
)


def _processing_families(
    processing: dict[str, Any], base: list[str], values: list[str]
) -> Iterator[Any]:
    """The running processor's figures (``aiogroup.processing``), when there is one."""
    prefix = f"{PREFIX}_processing"
    for key, name, doc in _PROCESSING_COUNTERS:
        fam = CounterMetricFamily(f"{prefix}_{name}", doc, labels=base)
        fam.add_metric(values, processing[key])
        yield fam
    for key, name, doc in _PROCESSING_GAUGES:
        level = GaugeMetricFamily(f"{prefix}_{name}", doc, labels=base)
        if processing[key] is not None:
            level.add_metric(values, processing[key])
        yield level
    labels = [*base, "topic", "partition"]
    unfinished = GaugeMetricFamily(
        f"{prefix}_unfinished", "Records received and not finished, per partition", labels=labels
    )
    gap = GaugeMetricFamily(
        f"{prefix}_commit_gap",
        "Records finished and committable but not yet committed, per partition",
        labels=labels,
    )
    for key, part in sorted(processing["partitions"].items()):
        tp = metrics_partition(key)
        tp_values = [*values, tp.topic, str(tp.partition)]
        unfinished.add_metric(tp_values, part["unfinished"])
        if part["gap"] is not None:
            gap.add_metric(tp_values, part["gap"])
    yield unfinished
    yield gap


def register_prometheus(consumer: GroupConsumer, registry: Any = None) -> ConsumerCollector:
    """Register a collector for ``consumer``; unregister it with ``registry.unregister``."""
    collector = ConsumerCollector(consumer)
    (REGISTRY if registry is None else registry).register(collector)
    return collector
