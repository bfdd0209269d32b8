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
    ]
