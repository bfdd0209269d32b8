"""The broker fixture itself: it answers, makes topics, round-trips records, and cleans up."""

from __future__ import annotations

import os

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from aiogroup.testing import KafkaBroker
from aiogroup.testing.plugin import TopicFactory


async def test_roundtrip_10000_records(bootstrap_servers: str, kafka_topic: TopicFactory) -> None:
    topic = await kafka_topic(partitions=1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, f"value-{i}".encode(), partition=0) for i in range(10_000)
        ]
        for fut in futures:
            await fut
    finally:
        await producer.stop()

    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        seen: list[tuple[int, bytes]] = []
        while len(seen) < 10_000:
            batch = await consumer.getmany(tp, timeout_ms=2000)
            got = [(r.offset, r.value) for r in batch.get(tp, [])]
            assert got or seen, "no records arrived"
            seen.extend(got)  # type: ignore[arg-type]
    finally:
        await consumer.stop()
    assert [o for o, _ in seen] == list(range(10_000))
    assert [v for _, v in seen] == [f"value-{i}".encode() for i in range(10_000)]


async def test_broker_process_is_gone_after_stop() -> None:
    broker = KafkaBroker()
    await broker.start()
    pid = broker.pid
    if broker.mode == "embedded":
        assert pid is not None
        os.kill(pid, 0)  # alive while running
    topic = await broker.create_topic(partitions=3)
    assert topic.startswith("topic-")
    await broker.stop()
    if pid is not None:
        # The process is reaped by stop(); signalling it must fail.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            pass
        else:
            raise AssertionError(f"broker pid {pid} still alive after stop()")


async def test_start_failure_names_the_mode(monkeypatch: object) -> None:
    import pytest

    mp = monkeypatch
    assert isinstance(mp, pytest.MonkeyPatch)
    mp.setenv("AIOGROUP_TANSU", "/nonexistent/tansu")
    mp.delenv("AIOGROUP_BOOTSTRAP", raising=False)
    mp.delenv("AIOGROUP_BROKER", raising=False)
    from aiogroup.testing import BrokerStartError

    with pytest.raises(BrokerStartError, match="embedded mode: Tansu binary missing"):
        await KafkaBroker().start()
