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
import importlib.util
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import IncompatibleBrokerVersion

from aiogroup import AcknowledgeType, ShareConsumer, ShareRecord
from aiogroup.errors import ConfigurationError, ConsumerStoppedError, KafkaError
from aiogroup.share import InvalidAcknowledgement
from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.plugin import TopicFactory
from aiogroup.testing.share_checker import ShareRecorder, check_share_history
from aiogroup.testing.share_peers import configure_share_group, record_broker_view

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
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


async def produce_batch(bootstrap: str, topic: str, count: int, recorder: ShareRecorder) -> None:
    """``count`` records to partition 0 in as few batches as the producer makes."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=50)
    await producer.start()
    try:
        futures = [await producer.send(topic, f"v{i}".encode(), partition=0) for i in range(count)]
        metas = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    recorder.produced(topic, 0, metas[0].offset, metas[-1].offset)


async def members_assigned(bootstrap: str, group: str, count: int) -> None:
    """Until the coordinator shows ``count`` members, each with partitions assigned
    (ShareGroupDescribe, polled: the broker offers nothing to await)."""
    from aiokafka.admin import AIOKafkaAdminClient

    from aiogroup._protocol.share_admin import (
        ShareGroupDescribeRequest,
        parse_share_group_describe,
    )

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while True:
            node = await admin.find_coordinator(group)
            found = parse_share_group_describe(
                await admin._client.send(node, ShareGroupDescribeRequest(group))
            )
            members = [m for m in found.members if m.assignment]
            if len(members) >= count:
                return
            assert loop.time() < deadline, f"{len(members)} of {count} members assigned"
            await asyncio.sleep(0.2)
    finally:
        await admin.close()


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
        # Implicit mode: commit() accepts what was handed out and sends it now.
        results = await c.commit()
        assert c.metrics.share_snapshot()["acknowledged"].get("accept") == 20, results
    await record_broker_view(recorder, bootstrap, group)
    report = check_share_history(recorder.events(), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()
    assert report.records == 20


async def test_a_fetch_max_bytes_below_one_record_batch_still_reads_every_record(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """A ShareFetch asks for MaxBytes from the records it gets, within ``fetch_max_bytes``
    (issue 28): the broker returns a fetch's first record batch whatever MaxBytes says,
    so even a limit below one batch reads on - here 500 B against batches of 4 KiB
    records, in as few batches as the producer makes - and every record is accepted
    once."""
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group)
    recorder = ShareRecorder()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=50)
    await producer.start()
    try:
        sends = [await producer.send(topic, bytes([i]) * 4096, partition=0) for i in range(30)]
        metas = await asyncio.gather(*sends)
    finally:
        await producer.stop()
    recorder.produced(topic, 0, metas[0].offset, metas[-1].offset)
    options = {"recorder": recorder, "recorder_name": "c1", "fetch_max_bytes": 500}
    async with consumer(bootstrap, group, topic, **options) as c:
        got = await collect(c, 30)
        assert sorted(r.offset for r in got) == list(range(30))
        assert all(r.value == bytes([r.offset]) * 4096 for r in got)
        await c.commit()
    await record_broker_view(recorder, bootstrap, group)
    report = check_share_history(recorder.events(), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()
    assert report.records == 30


async def test_explicit_release_redelivers_with_a_higher_delivery_count(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group)
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 3, recorder)
    called: list[tuple[int, str, bool]] = []
    three = asyncio.Event()

    async def on_results(results: dict[Any, list[Any]]) -> None:  # an async callback
        called.extend(
            (o, r.ack_type.name, r.ok) for rs in results.values() for r in rs for o in r.offsets
        )
        if len(called) >= 3:
            three.set()

    async with consumer(
        bootstrap,
        group,
        topic,
        acknowledgement_mode="explicit",
        acknowledgement_callback=on_results,
        recorder=recorder,
        recorder_name="c1",
    ) as c:
        first = await collect(c, 3)
        assert [(r.offset, r.delivery_count) for r in first] == [(0, 1), (1, 1), (2, 1)]
        c.acknowledge(first[0], AcknowledgeType.ACCEPT)
        c.acknowledge(first[1], AcknowledgeType.RELEASE)
        c.acknowledge(first[2], AcknowledgeType.ACCEPT)
        results = await c.commit()
        assert all(r.ok for rs in results.values() for r in rs), results
        await asyncio.wait_for(three.wait(), timeout=WAIT)
        assert sorted(called) == [(0, "ACCEPT", True), (1, "RELEASE", True), (2, "ACCEPT", True)]
        again = await collect(c, 1)
        assert [(r.offset, r.delivery_count) for r in again] == [(1, 2)]
        c.acknowledge(again[0])
        await c.commit()
        metrics = c.metrics.share_snapshot()
        assert metrics["delivery_count_histogram"] == {1: 3, 2: 1}
        assert metrics["acknowledged"] == {"accept": 3, "release": 1}
        assert metrics["records_acquired"] == metrics["records_delivered"] == 4
    await record_broker_view(recorder, bootstrap, group)
    report = check_share_history(recorder.events(), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()


async def test_reject_archives_the_record(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group)
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 2, recorder)
    async with consumer(
        bootstrap,
        group,
        topic,
        acknowledgement_mode="explicit",
        recorder=recorder,
        recorder_name="c1",
    ) as c:
        got = await collect(c, 2)
        c.acknowledge(got[0], AcknowledgeType.REJECT)
        c.acknowledge(got[1], AcknowledgeType.ACCEPT)
        results = await c.commit()
        assert sorted(r.ack_type.name for rs in results.values() for r in rs) == [
            "ACCEPT",
            "REJECT",
        ]
        # Nothing comes back: the rejected record is archived, not redelivered.
        assert await c.getmany(timeout_ms=1500) == {}
    await record_broker_view(recorder, bootstrap, group)
    report = check_share_history(recorder.events(), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()
    (start,) = [e for e in recorder.events() if e.kind == "broker_start"]
    assert start.lag == 0


async def test_a_poison_record_is_archived_at_the_delivery_limit(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """A record the handler always gives back (RELEASE) is delivered ``delivery_limit``
    times (2 here), then archived by the broker: never delivered again, settled."""
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group, delivery_limit=2)
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 2, recorder)  # offset 0 is the poison, 1 is fine
    counts: list[tuple[int, int]] = []
    async with consumer(
        bootstrap,
        group,
        topic,
        acknowledgement_mode="explicit",
        recorder=recorder,
        recorder_name="c1",
    ) as c:
        while sum(1 for o, _ in counts if o == 0) < 2:
            for records in (await c.getmany(timeout_ms=500)).values():
                for r in records:
                    counts.append((r.offset, r.delivery_count))
                    c.acknowledge(
                        r, AcknowledgeType.RELEASE if r.offset == 0 else AcknowledgeType.ACCEPT
                    )
            await c.commit()
        assert [n for o, n in counts if o == 0] == [1, 2]
        assert await c.getmany(timeout_ms=1500) == {}  # archived: not delivered a third time
    await record_broker_view(recorder, bootstrap, group)
    report = check_share_history(recorder.events(), delivery_limit=2)
    report.assert_clean()
    assert report.archived == 1


async def test_four_consumers_on_one_partition_never_hold_a_record_at_once(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group)
    recorder = ShareRecorder()
    total = 400
    names = ("a", "b", "c", "d")
    seen: dict[str, list[int]] = {name: [] for name in names}

    async def work(c: ShareConsumer, name: str, done: asyncio.Event) -> None:
        while not done.is_set():
            for records in (await c.getmany(timeout_ms=200)).values():
                for r in records:
                    seen[name].append(r.offset)
                    await asyncio.sleep(0.005)  # a handler that awaits 5 ms
            if sum(map(len, seen.values())) >= total:
                done.set()

    async with contextlib.AsyncExitStack() as stack:
        members = [
            await stack.enter_async_context(
                consumer(
                    bootstrap, group, topic, recorder=recorder, recorder_name=n, max_poll_records=10
                )
            )
            for n in names
        ]
        await members_assigned(bootstrap, group, len(names))
        # All at once, in large batches: a fetch could take whole batches but for the
        # strict record limit.
        await produce_batch(bootstrap, topic, total, recorder)
        done = asyncio.Event()
        await asyncio.wait_for(
            asyncio.gather(*(work(c, n, done) for c, n in zip(members, names, strict=True))),
            timeout=WAIT,
        )
        for c in members:
            await c.commit()
    assert sorted(o for offsets in seen.values() for o in offsets) == list(range(total))
    assert all(seen.values()), {n: len(o) for n, o in seen.items()}  # all four read
    # Strict acquisition (ShareFetch v2, KIP-1206): no fetch acquired more than
    # max_poll_records, though the log held the records in batches of hundreds.
    per_fetch: dict[tuple[str, float | None], int] = {}
    for e in recorder.events():
        if e.kind == "acquired":
            key = (e.consumer, e.sent)
            per_fetch[key] = per_fetch.get(key, 0) + 1
    assert per_fetch and max(per_fetch.values()) <= 10, max(per_fetch.values())
    await record_broker_view(recorder, bootstrap, group)
    report = check_share_history(recorder.events(), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()


async def test_stop_releases_unacknowledged_records_to_another_consumer_at_once(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    # A 30 s lock: a record that came back before it could only have been released.
    await configure_share_group(bootstrap, group, lock_ms=30_000)
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 6, recorder)
    first = ShareConsumer(
        topic,
        group_id=group,
        bootstrap_servers=bootstrap,
        acknowledgement_mode="explicit",
        recorder=recorder,
        recorder_name="first",
    )
    await first.start()
    got: list[ShareRecord] = []
    while len(got) < 5:  # offset 5 stays acquired but never handed out
        for records in (await first.getmany(timeout_ms=500, max_records=5 - len(got))).values():
            got.extend(records)
    assert [r.offset for r in got] == [0, 1, 2, 3, 4]
    first.acknowledge(got[0])
    loop = asyncio.get_running_loop()
    stopped_at = loop.time()
    await first.stop()
    async with consumer(bootstrap, group, topic, recorder=recorder, recorder_name="second") as c:
        again = await collect(c, 5, timeout=15)
        assert loop.time() - stopped_at < 15  # well inside the 30 s lock
        # Released (1-4, handed out) or given back by the session's close (5, never
        # handed out): Kafka 4.4 counts that delivery either way.
        assert [(r.offset, r.delivery_count) for r in again] == [
            (1, 2),
            (2, 2),
            (3, 2),
            (4, 2),
            (5, 2),
        ]
        await c.commit()
    await record_broker_view(recorder, bootstrap, group)
    report = check_share_history(recorder.events(), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()


async def test_renew_keeps_a_slow_handlers_record_past_its_lock(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    lock_ms = 1500
    await configure_share_group(bootstrap, group, lock_ms=lock_ms)
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 1, recorder)
    async with (
        consumer(
            bootstrap,
            group,
            topic,
            acknowledgement_mode="explicit",
            auto_renew=True,  # the default margin: max(lock / 4, fetch wait + 250 ms)
            recorder=recorder,
            recorder_name="slow",
        ) as slow,
        consumer(bootstrap, group, topic, recorder=recorder, recorder_name="other") as other,
    ):
        (record,) = await collect(slow, 1)
        # The handler runs 3 lock durations; the other consumer polls all along.
        stolen = await collect(other, 1, timeout=3 * lock_ms / 1000)
        assert stolen == []
        slow.acknowledge(record, AcknowledgeType.ACCEPT)
        results = await slow.commit()
        (result,) = [r for rs in results.values() for r in rs]
        assert result.ok and result.ack_type is AcknowledgeType.ACCEPT
        assert slow.metrics.lock_renewals >= 2
    await record_broker_view(recorder, bootstrap, group)
    report = check_share_history(recorder.events(), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()


async def test_a_record_whose_lock_ran_out_comes_back_and_its_old_delivery_is_refused(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    lock_ms = 1000
    await configure_share_group(bootstrap, group, lock_ms=lock_ms)
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 1, recorder)
    async with consumer(
        bootstrap,
        group,
        topic,
        acknowledgement_mode="explicit",
        recorder=recorder,
        recorder_name="late",
    ) as c:
        (record,) = await collect(c, 1)
        # The next delivery proves the lock ran out (no sleep: the broker says so).
        (again,) = await collect(c, 1)
        assert (again.offset, again.delivery_count) == (0, 2)
        with pytest.raises(InvalidAcknowledgement, match="delivered again since"):
            c.acknowledge(record)  # the first delivery is not ours any more
        c.acknowledge(again)
        results = await c.commit()
        assert [r.ok for rs in results.values() for r in rs] == [True]
    await record_broker_view(recorder, bootstrap, group)
    report = check_share_history(recorder.events(), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()
    assert report.lock_expiries == 1


async def test_bad_acknowledgements_are_refused_naming_the_problem(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group)
    await produce(bootstrap, topic, 2)
    async with (
        consumer(bootstrap, group, topic, acknowledgement_mode="explicit") as a,
        consumer(bootstrap, unique_name("share"), topic) as implicit,
    ):
        (r0, r1) = await collect(a, 2)
        a.acknowledge(r0)
        with pytest.raises(InvalidAcknowledgement, match="already acknowledged"):
            a.acknowledge(r0, AcknowledgeType.REJECT)
        with pytest.raises(InvalidAcknowledgement, match="not delivered by this consumer"):
            implicit.acknowledge(r1)
        with pytest.raises(InvalidAcknowledgement, match="RENEW needs explicit"):
            implicit.acknowledge(r1, AcknowledgeType.RENEW)
        with pytest.raises(TypeError, match="ShareRecord"):
            a.acknowledge("r1")  # type: ignore[arg-type]
        a.acknowledge(r1)
        await a.commit()


async def test_a_group_id_of_a_consumer_group_is_refused_naming_it(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    from aiogroup import GroupConsumer

    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("classic")
    classic = GroupConsumer(topic, bootstrap_servers=bootstrap, group_id=group)
    await classic.start()
    try:
        c = ShareConsumer(topic, group_id=group, bootstrap_servers=bootstrap)
        with pytest.raises(KafkaError, match=f"'{group}' is in use by a classic or consumer group"):
            await c.start()
    finally:
        await classic.stop()


async def test_subscribe_while_running_reads_the_new_topic(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    first, second = await kafka_topic(1), await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group)
    await produce(bootstrap, second, 3)
    async with consumer(bootstrap, group, first) as c:
        c.subscribe(second)
        assert c.subscription() == {second}
        got = await collect(c, 3)
        assert {(r.topic, r.offset) for r in got} == {(second, 0), (second, 1), (second, 2)}


async def test_records_never_handed_out_of_a_partition_that_leaves_are_released_at_once(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """A member stops reading a topic while it holds three of its records: one handed
    out, two still in its buffer.  The two are RELEASEd at once (another consumer gets
    them well inside the 30 s lock); the one the application holds is forgotten (its
    acknowledgement is refused, naming why) and stays locked to the member until the
    lock ends (measured on Kafka 4.4: forgetting the partition does not give it back)."""
    bootstrap = share_broker.bootstrap_servers
    first, second = await kafka_topic(1), await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group, lock_ms=30_000)
    recorder = ShareRecorder()
    await produce(bootstrap, first, 3, recorder)
    async with consumer(
        bootstrap,
        group,
        first,
        acknowledgement_mode="explicit",
        max_poll_records=3,
        recorder=recorder,
        recorder_name="mover",
    ) as mover:
        held: list[ShareRecord] = []
        while not held:
            for records in (await mover.getmany(timeout_ms=500, max_records=1)).values():
                held.extend(records)
        assert [r.offset for r in held] == [0]
        mover.subscribe(second)
        loop = asyncio.get_running_loop()
        moved_at = loop.time()
        async with consumer(bootstrap, group, first, recorder=recorder, recorder_name="other") as c:
            again = await collect(c, 2, timeout=15)
            assert loop.time() - moved_at < 15  # well inside the 30 s lock
            assert sorted((r.offset, r.delivery_count) for r in again) == [(1, 2), (2, 2)]
            await c.commit()
        with pytest.raises(InvalidAcknowledgement, match="no longer assigned"):
            mover.acknowledge(held[0])
    report = check_share_history(recorder.events(), delivery_limit=DELIVERY_LIMIT)
    assert report.by_rule("overlap") == [], report.summary()


def test_bad_options_are_refused_naming_them() -> None:
    with pytest.raises(ConfigurationError, match="group_id"):
        ShareConsumer("t", group_id="")
    with pytest.raises(ConfigurationError, match="acknowledgement_mode"):
        ShareConsumer("t", group_id="g", acknowledgement_mode="auto")
    with pytest.raises(ConfigurationError, match="auto_renew needs acknowledgement_mode"):
        ShareConsumer("t", group_id="g", auto_renew=True)
    with pytest.raises(ConfigurationError, match="max_poll_records"):
        ShareConsumer("t", group_id="g", max_poll_records=0)
    with pytest.raises(ConfigurationError, match="acquire_mode must be 'record_limit' or"):
        ShareConsumer("t", group_id="g", acquire_mode="strict")
    with pytest.raises(ConfigurationError, match=r"unknown option.*'sasl_passwrd'"):
        ShareConsumer("t", group_id="g", sasl_passwrd="x")
    with pytest.raises(ConfigurationError, match="needs an ssl_context"):
        ShareConsumer("t", group_id="g", security_protocol="SSL")
    with pytest.raises(ConfigurationError, match="at least one topic"):
        ShareConsumer("t", group_id="g").subscribe()


async def test_start_on_a_broker_without_share_groups_names_the_missing_api(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    if kafka_broker.caps.supports_share_groups:
        pytest.skip("not applicable: this broker serves share groups (the tests above run)")
    topic = await kafka_topic(1)
    c = ShareConsumer(
        topic, group_id=unique_name("share"), bootstrap_servers=kafka_broker.bootstrap_servers
    )
    with pytest.raises(IncompatibleBrokerVersion, match="ShareGroupHeartbeat \\(API key 76\\)"):
        await c.start()


async def test_the_share_worker_example_accepts_good_records_and_rejects_poison(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """docs/usage.md's example, as it is: a poison record is released, then rejected
    on its third delivery; every good record is accepted once."""
    spec = importlib.util.spec_from_file_location("share_worker", EXAMPLES / "share_worker.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for value in (b"a", b"poison", b"b"):
            await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()
    decisions: list[tuple[int, int, str]] = []
    stop = asyncio.Event()

    def done(record: ShareRecord, ack: AcknowledgeType) -> None:
        decisions.append((record.offset, record.delivery_count, ack.name))
        if ack is AcknowledgeType.REJECT:
            stop.set()

    await asyncio.wait_for(example.run(bootstrap, topic, group, stop, done), timeout=WAIT)
    assert sorted(decisions) == [
        (0, 1, "ACCEPT"),
        (1, 1, "RELEASE"),
        (1, 2, "RELEASE"),
        (1, 3, "REJECT"),
        (2, 1, "ACCEPT"),
    ]


async def test_stop_wakes_a_waiting_getone_and_ends_async_for(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    c = ShareConsumer(topic, group_id=group, bootstrap_servers=bootstrap)
    await c.start()
    waiting = asyncio.create_task(c.getone())  # no timeout: only stop() ends it
    iterating = asyncio.create_task(anext(aiter(c), None))
    await asyncio.sleep(0)  # let both start waiting (nothing is produced)
    assert not waiting.done() and not iterating.done()
    await c.stop()
    with pytest.raises(ConsumerStoppedError):
        await asyncio.wait_for(waiting, timeout=5)
    assert await asyncio.wait_for(iterating, timeout=5) is None  # StopAsyncIteration
    with pytest.raises(ConsumerStoppedError):
        await c.getmany()
    with pytest.raises(ConsumerStoppedError, match="make a new one"):
        await c.start()
