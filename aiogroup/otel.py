"""OpenTelemetry metrics for ``GroupConsumer.metrics()`` (install ``aiogroup[otel]``).

Observable instruments read a snapshot when the SDK's reader collects, so the
consumer does no work per record.  ``instrument(consumer, meter)`` registers them
on a meter (the global meter provider's ``aiogroup`` meter unless given).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry.metrics import CallbackOptions, Observation
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        "aiogroup.otel needs opentelemetry-api: pip install 'aiogroup[otel]'"
    ) from exc

from aiogroup.processing.processor import metrics_partition

if TYPE_CHECKING:
    from aiogroup.consumer import GroupConsumer
    from aiogroup.metrics import MetricsSnapshot

__all__ = ["instrument"]


def instrument(consumer: GroupConsumer, meter: Any = None) -> list[Any]:
    """Create observable instruments for ``consumer``; returns them (keep a reference)."""
    meter = meter or otel_metrics.get_meter("aiogroup")
    attrs = {"client_id": consumer.config.client_id, "group_id": consumer.config.group_id or ""}

    def one(read: Callable[[MetricsSnapshot], float | None]) -> Callable[..., Iterable[Any]]:
        def callback(options: CallbackOptions) -> Iterable[Any]:
            value = read(consumer.metrics())
            return [] if value is None else [Observation(value, attrs)]

        return callback

    def lag(options: CallbackOptions) -> Iterable[Any]:
        snap = consumer.metrics()
        return [
            Observation(p.lag, {**attrs, "topic": tp.topic, "partition": tp.partition})
            for tp, p in snap.partitions.items()
            if p.lag is not None
        ]

    def processing(key: str) -> Callable[..., Iterable[Any]]:
        def callback(options: CallbackOptions) -> Iterable[Any]:
            snap = consumer.metrics().processing
            value = None if snap is None else snap[key]
            return [] if value is None else [Observation(value, attrs)]

        return callback

    def per_partition(key: str) -> Callable[..., Iterable[Any]]:
        def callback(options: CallbackOptions) -> Iterable[Any]:
            snap = consumer.metrics().processing
            out = []
            for name, part in (snap or {}).get("partitions", {}).items():
                if part[key] is not None:
                    tp = metrics_partition(name)
                    out.append(
                        Observation(
                            part[key], {**attrs, "topic": tp.topic, "partition": tp.partition}
                        )
                    )
            return out

        return callback

    def ready(options: CallbackOptions) -> Iterable[Any]:
        return [Observation(1 if consumer.health().ready else 0, attrs)]

    counter = meter.create_observable_counter
    gauge = meter.create_observable_gauge
    return [
        counter("aiogroup.consumer.records", [one(lambda s: s.records_consumed)], unit="{record}"),
        counter("aiogroup.consumer.bytes", [one(lambda s: s.bytes_consumed)], unit="By"),
        gauge("aiogroup.consumer.records_rate", [one(lambda s: s.records_per_second)]),
        gauge("aiogroup.consumer.fetch_latency_avg", [one(lambda s: s.fetch_latency.avg_ms)], "ms"),
        gauge(
            "aiogroup.consumer.heartbeat_latency_avg",
            [one(lambda s: s.heartbeat_latency.avg_ms)],
            "ms",
        ),
        gauge(
            "aiogroup.consumer.commit_latency_avg", [one(lambda s: s.commit_latency.avg_ms)], "ms"
        ),
        counter("aiogroup.consumer.rebalances", [one(lambda s: s.rebalances)]),
        gauge(
            "aiogroup.consumer.seconds_since_heartbeat",
            [one(lambda s: s.seconds_since_last_heartbeat)],
            "s",
        ),
        gauge("aiogroup.consumer.lag", [lag], unit="{record}"),
        gauge("aiogroup.consumer.ready", [ready]),
        # The running processor (aiogroup.processing); no points while none runs.
        gauge("aiogroup.processing.in_flight", [processing("in_flight")], unit="{record}"),
        gauge("aiogroup.processing.queued", [processing("queued")], unit="{record}"),
        counter("aiogroup.processing.finished", [processing("finished")], unit="{record}"),
        counter("aiogroup.processing.retried", [processing("retried")], unit="{attempt}"),
        counter(
            "aiogroup.processing.dead_lettered", [processing("dead_lettered")], unit="{record}"
        ),
        counter("aiogroup.processing.failed", [processing("failed")], unit="{record}"),
        gauge(
            "aiogroup.processing.oldest_in_flight_age",
            [processing("oldest_in_flight_age_s")],
            unit="s",
        ),
        gauge("aiogroup.processing.unfinished", [per_partition("unfinished")], unit="{record}"),
        gauge("aiogroup.processing.commit_gap", [per_partition("gap")], unit="{record}"),
    ]
