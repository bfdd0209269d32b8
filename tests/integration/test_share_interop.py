"""aiogroup's share consumer in one share group with other clients, judged from outside.

Issue 28 asks for interop: aiogroup's ``ShareConsumer`` with confluent-kafka's
``ShareConsumer`` (librdkafka) and with Apache Kafka's own Java share consumer
(``VerifiableShareConsumer``, from the broker's tools jars), each in one share group on
one partition.  Every member writes into one history
(:mod:`aiogroup.testing.share_peers` turns what each peer shows into events); the
broker's start offset and lag are added after the run; the share checker rules.
Apache Kafka only (``AIOGROUP_BROKER=kafka``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from aiogroup import ShareConsumer
from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.plugin import TopicFactory
from aiogroup.testing.share_checker import ShareRecorder, check_share_history
from aiogroup.testing.share_peers import (
    ConfluentSharePeer,
    JavaSharePeer,
    configure_share_group,
    record_broker_view,
)
from tests.integration.test_share_consumer import DELIVERY_LIMIT, members_assigned, produce

pytestmark = pytest.mark.integration

TOTAL = 300
WAIT = 45.0


@pytest.fixture
def share_broker(kafka_broker: KafkaBroker) -> KafkaBroker:
    if not kafka_broker.caps.supports_share_groups:
        pytest.skip(
            "not applicable: this broker serves no share groups (caps.supports_share_groups)"
        )
    return kafka_broker


async def run_aiogroup(c: ShareConsumer, mine: list[int], others: Callable[[], set[int]]) -> None:
    """Consume (implicit acknowledgement) until every record was seen by someone (the
    peer's records are read from its thread's list at each poll)."""
    while len(set(mine) | others()) < TOTAL:
        for records in (await c.getmany(timeout_ms=200, max_records=20)).values():
            for r in records:
                mine.append(r.offset)
                await asyncio.sleep(0.003)  # a handler that awaits: the peer gets its share
    await c.commit()


async def test_with_confluent_kafkas_share_consumer(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    pytest.importorskip("confluent_kafka", minversion="2.15")
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group)
    recorder = ShareRecorder()
    peer = ConfluentSharePeer("confluent", bootstrap, topic, group, recorder, lock_ms=30_000)
    peer.handle_s = 0.003
    peer.start()
    c = ShareConsumer(
        topic,
        group_id=group,
        bootstrap_servers=bootstrap,
        recorder=recorder,
        recorder_name="aiogroup",
    )
    await c.start()
    mine: list[int] = []
    try:
        await members_assigned(bootstrap, group, 2)
        seen = lambda: {o for _, _, o, _ in list(peer.consumed)}  # noqa: E731
        # Both poll before the records exist: a share consumer acquires only for a
        # poll, so one that has not polled yet would leave them all to the other.
        polling = asyncio.create_task(run_aiogroup(c, mine, seen))
        await produce(bootstrap, topic, TOTAL, recorder)
        await asyncio.wait_for(polling, WAIT)
    finally:
        await c.stop()
        await asyncio.to_thread(peer.stop)
    assert not peer.errors, peer.errors
    assert mine and peer.consumed, "both clients read the one partition"
    await record_broker_view(recorder, bootstrap, group)
    report = check_share_history(recorder.events(), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()
    assert report.records == TOTAL


async def test_with_kafkas_java_share_consumer(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group)
    recorder = ShareRecorder()
    peer = JavaSharePeer(
        "java", bootstrap, topic, group, recorder, lock_ms=30_000, ack_pattern=("accept",)
    )
    peer.start()
    c = ShareConsumer(
        topic,
        group_id=group,
        bootstrap_servers=bootstrap,
        recorder=recorder,
        recorder_name="aiogroup",
    )
    await c.start()
    mine: list[int] = []
    try:
        await members_assigned(bootstrap, group, 2)
        seen = lambda: {o for _, _, o in peer.consumed()}  # noqa: E731
        # Both poll before the records exist: a share consumer acquires only for a
        # poll, so one that has not polled yet would leave them all to the other.
        polling = asyncio.create_task(run_aiogroup(c, mine, seen))
        await produce(bootstrap, topic, TOTAL, recorder)
        await asyncio.wait_for(polling, WAIT)
    finally:
        await c.stop()
        await asyncio.to_thread(peer.stop)
        peer.cleanup()
    assert mine and peer.consumed(), "both clients read the one partition"
    await record_broker_view(recorder, bootstrap, group)
    report = check_share_history(recorder.events(), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()
    assert report.records == TOTAL
