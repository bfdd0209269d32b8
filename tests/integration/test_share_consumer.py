"""The share consumer (KIP-932) on a real broker, judged from outside.

Only Apache Kafka serves share groups here (``AIOGROUP_BROKER=kafka``); on a broker
without them (``kafka_broker.caps.supports_share_groups`` false: Tansu) the scenarios
do not apply, and one test asserts what a user of such a broker gets instead: a clear
error from ``start()`` naming the missing API.

Every aiogroup consumer feeds one :class:`~aiogroup.testing.share_checker.ShareRecorder`
(its ``recorder`` hook), the producer's acknowledged records go in too, and after the
run the broker's own view (DescribeShareGroupOffsets: start offset and lag) is added;
:func:`~aiogroup.testing.share_checker.check_share_history` rules on the whole.  Groups
get ``share.auto.offset.reset=earliest`` and, where a test needs it, a lock of seconds
(:func:`~aiogroup.testing.share_peers.configure_share_group`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from aiogroup import ShareConsumer, ShareRecord
from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.plugin import TopicFactory
from aiogroup.testing.share_checker import ShareRecorder, check_share_history
from aiogroup.testing.share_peers import configure_share_group, record_broker_view

pytestmark = pytest.mark.integration

#: The broker's default delivery limit (group.share.delivery.count.limit).
DELIVERY_LIMIT = 5
WAIT = 30.0


@pytest.fixture
def share_broker(kafka_broker: KafkaBroker) -> KafkaBroker:
    if not kafka_broker.caps.supports_share_groups:
        pytest.skip(
            "not applicable: this broker serves no share groups (caps.supports_share_groups); "
            "test_start_on_a_broker_without_share_groups_names_the_missing_api covers it"
        )
    return kafka_broker


async def produce(
    bootstrap: str,
    topic: str,
    count: int,
    recorder: ShareRecorder | None = None,
    partition: int = 0,
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    try:
        metas = [
            await producer.send_and_wait(
                topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=partition
            )
            for i in range(count)
        ]
    finally:
        await producer.stop()
    if recorder is not None:
        recorder.produced(topic, partition, metas[0].offset, metas[-1].offset)


@contextlib.asynccontextmanager
async def consumer(
    bootstrap: str, group: str, topic: str, **options: Any
) -> AsyncIterator[ShareConsumer]:
    c = ShareConsumer(topic, group_id=group, bootstrap_servers=bootstrap, **options)
    await c.start()
    try:
        yield c
    finally:
        await c.stop(timeout=10)


async def collect(c: ShareConsumer, count: int, timeout: float = WAIT) -> list[ShareRecord]:
    got: list[ShareRecord] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(got) < count and loop.time() < deadline:
        batch = await c.getmany(timeout_ms=500)
        for records in batch.values():
            got.extend(records)
    return got


async def test_consume_with_implicit_acknowledgement_accepts_every_record_once(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group)
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 20, recorder)
    async with consumer(bootstrap, group, topic, recorder=recorder, recorder_name="c1") as c:
        got = await collect(c, 20)
        assert sorted(r.offset for r in got) == list(range(20))
        assert all(r.delivery_count == 1 for r in got)
        assert got[0].value == b"v0" and got[0].key == b"k0"
        # The next poll accepts them (implicit mode); commit() sends it now.
        await c.getmany(timeout_ms=0)
        results = await c.commit()
        assert c.metrics.share_snapshot()["acknowledged"].get("accept") == 20, results
    await record_broker_view(recorder, bootstrap, group)
    report = check_share_history(recorder.events(), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()
    assert report.records == 20
