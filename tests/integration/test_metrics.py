"""metrics(), health(), the Prometheus and OpenTelemetry exporters, on a real broker."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from aiogroup import GroupConsumer, TopicPartition
from aiogroup.testing.broker import KafkaBroker
from aiogroup.testing.plugin import TopicFactory

GROUP_TIMEOUTS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


async def produce(bootstrap: str, topic: str, count: int) -> int:
    """Produce ``count`` records to partition 0; the log end from the producer's acks."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, b"v" * 10, key=b"k", partition=0) for _ in range(count)
        ]
        return max(m.offset for m in await asyncio.gather(*futures)) + 1
    finally:
        await producer.stop()


async def test_metrics_count_what_was_delivered_and_lag_from_the_high_watermark(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    topic = await kafka_topic(partitions=1)
    log_end = await produce(bootstrap_servers, topic, 50)
    tp = TopicPartition(topic, 0)
    async with GroupConsumer(
        topic,
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        auto_offset_reset="earliest",
        max_poll_records=20,
        **GROUP_TIMEOUTS,
    ) as consumer:
        got = 0
        while got < 20:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
            got += sum(len(v) for v in batch.values())
        snap = consumer.metrics()
        assert snap.records_consumed == got == 20
        assert snap.bytes_consumed == 20 * (1 + 10)
        assert snap.records_per_second > 0
        assert snap.fetch_latency.count >= 1 and snap.fetch_latency.avg_ms is not None
        assert snap.rebalances == 1 and snap.last_rebalance_seconds is not None
        assert snap.member_state == "STABLE"
        part = snap.partitions[tp]
        # The high watermark the broker reported with the fetch is the producer's log end.
        assert part.highwater == log_end == 50
        assert part.lag == log_end - 20 == snap.total_lag
        await consumer.commit()
        assert consumer.metrics().commit_latency.count == 1
        while consumer.metrics().heartbeat_latency.count == 0:
            await consumer.getmany(timeout_ms=500)
        since = consumer.metrics().seconds_since_last_heartbeat
        assert since is not None and since >= 0
        health = consumer.health()
        assert health.live and health.ready and health.joined and health.broker_reachable
        assert health.as_dict()["reasons"] == []
        snap = consumer.metrics()
        assert snap.as_dict()["partitions"][f"{topic}-0"]["lag"] == snap.partitions[tp].lag


async def test_health_before_start_and_after_stop(bootstrap_servers: str) -> None:
    consumer = GroupConsumer(bootstrap_servers=bootstrap_servers)
    assert not consumer.health().live
    async with consumer:
        assert consumer.health().ready  # group-less, connected
    assert not consumer.health().live


class _Seen(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.event = asyncio.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        self.event.set()


async def test_broker_outage_shows_in_health_and_as_an_error_log() -> None:
    """The issue: with the broker dead, getmany() returned {} forever and nothing said so."""
    handler = _Seen()
    logger = logging.getLogger("aiogroup.health")
    logger.addHandler(handler)
    try:
        async with KafkaBroker() as broker:
            topic = await broker.create_topic(partitions=1)
            consumer = GroupConsumer(
                topic,
                bootstrap_servers=broker.bootstrap_servers,
                group_id="outage",
                request_timeout_ms=5000,
                **GROUP_TIMEOUTS,
            )
            await consumer.start()
            try:
                assert consumer.health().ready
                await broker.stop()

                async def poll_until_logged() -> None:
                    while not handler.event.is_set():
                        assert await consumer.getmany(timeout_ms=200) == {}

                await asyncio.wait_for(poll_until_logged(), 60)
                health = consumer.health()
                assert not health.broker_reachable and not health.ready
                assert "session_timeout_ms" in " ".join(health.reasons)
                assert any("unreachable" in m for m in handler.messages)
            finally:
                await consumer.abort()
    finally:
        logger.removeHandler(handler)


async def test_prometheus_exporter(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    import prometheus_client

    from aiogroup.prometheus import register_prometheus

    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 5)
    registry = prometheus_client.CollectorRegistry()
    async with GroupConsumer(
        topic,
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        auto_offset_reset="earliest",
        **GROUP_TIMEOUTS,
    ) as consumer:
        register_prometheus(consumer, registry)
        got = 0
        while got < 5:
            got += sum(len(v) for v in (await consumer.getmany(timeout_ms=1000)).values())
        text = prometheus_client.generate_latest(registry).decode()
        labels = f'client_id="aiogroup",group_id="{group_id}"'
        assert f"aiogroup_consumer_records_total{{{labels}}} 5.0" in text
        assert f'aiogroup_consumer_lag{{{labels},partition="0",topic="{topic}"}} 0.0' in text
        assert f"aiogroup_consumer_ready{{{labels}}} 1.0" in text


async def test_opentelemetry_metrics(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from aiogroup.otel import instrument

    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 3)
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("test")
    async with GroupConsumer(
        topic,
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        auto_offset_reset="earliest",
        **GROUP_TIMEOUTS,
    ) as consumer:
        instrument(consumer, meter)
        got = 0
        while got < 3:
            got += sum(len(v) for v in (await consumer.getmany(timeout_ms=1000)).values())
        data = reader.get_metrics_data()
        points = {
            m.name: [p.value for p in m.data.data_points]
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for m in sm.metrics
        }
        assert points["aiogroup.consumer.records"] == [3]
        assert points["aiogroup.consumer.lag"] == [0]
        assert points["aiogroup.consumer.ready"] == [1]


async def test_rebalances_are_counted_under_the_consumer_protocol(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """KIP-848 has no JoinGroup: a rebalance, for a member, is a reconciliation - from
    its first callback to the end of on_partitions_assigned.  The first member's count
    follows its reconciliations (one per assigned callback); a second member's arrival
    takes partitions from it - one more, the broker's group epoch moving on."""
    if not kafka_broker.caps.supports_consumer_protocol:
        pytest.skip("the consumer protocol needs a broker that speaks KIP-848")
    from aiogroup import AsyncConsumerRebalanceListener

    class Count(AsyncConsumerRebalanceListener):
        def __init__(self) -> None:
            self.assigned = 0
            self.revoked: set[TopicPartition] = set()

        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            self.revoked |= revoked

        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            self.assigned += 1

    bootstrap = kafka_broker.bootstrap_servers
    topic = await kafka_topic(partitions=4)
    options: dict[str, Any] = {"bootstrap_servers": bootstrap, "group_id": group_id}
    options["group_protocol"] = "consumer"
    a_events = Count()
    async with GroupConsumer(**options) as a:
        a.subscribe([topic], listener=a_events)
        # The assignment shows before on_partitions_assigned has run (as in Java's
        # consumer): wait for the reconciliation to end, not for the partitions alone.
        while len(a.assignment()) < 4 or not a_events.assigned or a.metrics().rebalance_in_progress:
            await asyncio.wait_for(a.getmany(timeout_ms=200), 30)
        first = a.metrics()
        assert first.rebalances == a_events.assigned >= 1
        assert first.last_rebalance_seconds is not None and not first.rebalance_in_progress
        async with GroupConsumer(topic, **options) as b:
            while len(a.assignment()) + len(b.assignment()) != 4 or not b.assignment():
                await asyncio.wait_for(
                    asyncio.gather(a.getmany(timeout_ms=200), b.getmany(timeout_ms=200)), 30
                )
            assert a_events.revoked  # a gave partitions to b
            while a.metrics().rebalance_in_progress:  # its assigned callback may still run
                await asyncio.wait_for(a.getmany(timeout_ms=200), 30)
            assert a.metrics().rebalances == a_events.assigned > first.rebalances
            assert b.metrics().rebalances >= 1
