"""The processing layer on a share consumer (KIP-932), on a real broker, judged from outside.

Only Apache Kafka serves share groups here (``AIOGROUP_BROKER=kafka``); on a broker
without them (``kafka_broker.caps.supports_share_groups`` false: Tansu) these
scenarios do not apply - tests/integration/test_share_consumer.py asserts the error a
user of such a broker gets.

Every consumer feeds one :class:`~aiogroup.testing.share_checker.ShareRecorder`, the
producer's acknowledged records go in, and after the run the broker's own view
(DescribeShareGroupOffsets) is added; :func:`check_share_history` rules on the whole:
no record held by two consumers at once, every record accepted exactly once (or
rejected), redeliveries counted up.  Each scenario takes seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from aiogroup import DeadLetter, ProcessingError, RetryPolicy, ShareConsumer, ShareProcessor
from aiogroup.share import ShareRecord
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
            "test_share_consumer.py's test_start_on_a_broker_without_share_groups_names_the_"
            "missing_api covers it"
        )
    return kafka_broker


async def produce(
    bootstrap: str, topic: str, count: int, recorder: ShareRecorder, partitions: int = 1
) -> None:
    """``count`` records spread over ``partitions``, keys k0..; recorded as produced."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % partitions
            )
            for i in range(count)
        ]
        metas = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    for p in range(partitions):
        offsets = [m.offset for m in metas if m.partition == p]
        if offsets:
            recorder.produced(topic, p, min(offsets), max(offsets))


@contextlib.asynccontextmanager
async def share_consumer(
    bootstrap: str, group: str, topic: str, recorder: ShareRecorder, name: str, **options: Any
) -> AsyncIterator[ShareConsumer]:
    options.setdefault("acknowledgement_mode", "explicit")
    c = ShareConsumer(
        topic,
        group_id=group,
        bootstrap_servers=bootstrap,
        recorder=recorder,
        recorder_name=name,
        **options,
    )
    await c.start()
    try:
        yield c
    finally:
        await c.stop(timeout=10)


async def until(what: str, check: Callable[[], bool], timeout: float = WAIT) -> None:
    """Poll a processor's metrics (no event to await there) until ``check``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.02)


async def judged(recorder: ShareRecorder, bootstrap: str, group: str) -> Any:
    await record_broker_view(recorder, bootstrap, group)
    report = check_share_history(recorder.events(), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()
    return report


async def test_every_record_is_accepted_exactly_once_by_two_concurrent_processors(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(2)
    group = unique_name("shareproc")
    await configure_share_group(bootstrap, group)
    recorder = ShareRecorder()
    total = 300
    await produce(bootstrap, topic, total, recorder, partitions=2)
    handled: list[tuple[int, int]] = []
    running = 0
    most_running = 0
    all_done = asyncio.Event()

    async def handle(record: ShareRecord) -> None:
        nonlocal running, most_running
        running += 1
        most_running = max(most_running, running)
        try:
            await asyncio.sleep(0.005)
        finally:
            running -= 1
        handled.append((record.partition, record.offset))
        if len(handled) >= total:
            all_done.set()

    async with (
        share_consumer(bootstrap, group, topic, recorder, "a", max_poll_records=50) as a,
        share_consumer(bootstrap, group, topic, recorder, "b", max_poll_records=50) as b,
    ):
        procs = [ShareProcessor(c, handle, concurrency=25) for c in (a, b)]
        runs = [asyncio.create_task(p.run()) for p in procs]
        await asyncio.wait_for(all_done.wait(), WAIT)
        for p in procs:
            await p.stop()
        await asyncio.gather(*runs)
        metrics = [p.metrics() for p in procs]
        health = a.health()
    assert sorted(handled) == sorted(set(handled)), "a record handled twice"
    assert len(handled) == total
    assert most_running > 1, "handlers never overlapped"
    assert sum(m["accepted"] for m in metrics) == total, metrics
    assert sum(m["lock_lost"] for m in metrics) == 0, metrics
    assert all(m["in_flight"] == 0 and m["held"] == 0 for m in metrics), metrics
    assert health.ready and health.joined and health.session_alive, health
    assert [s.open for s in health.leader_sessions] == [True], health  # one node: one leader
    assert health.member_epoch is not None and health.member_epoch > 0
    assert health.seconds_since_last_heartbeat is not None
    after = a.health()  # stopped: not live, and says so
    assert (after.live, after.ready, after.member_state) == (False, False, "stopped")
    assert "consumer is stopped" in after.reasons
    report = await judged(recorder, bootstrap, group)
    assert report.accepted == total and report.records == total


async def test_a_record_failing_every_attempt_is_rejected_and_archived(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("shareproc")
    await configure_share_group(bootstrap, group)
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 10, recorder)
    ended = asyncio.Event()
    seen: set[int] = set()
    calls: dict[int, int] = {}

    async def handle(record: ShareRecord) -> None:
        calls[record.offset] = calls.get(record.offset, 0) + 1
        if record.offset == 3:
            raise ValueError("poison")
        seen.add(record.offset)
        if len(seen) == 9:
            ended.set()

    async with share_consumer(bootstrap, group, topic, recorder, "c") as c:
        proc = ShareProcessor(
            c,
            handle,
            concurrency=4,
            retry=RetryPolicy(attempts=2, backoff_ms=0),
            on_failure="reject",
        )
        run = asyncio.create_task(proc.run())
        await asyncio.wait_for(ended.wait(), WAIT)
        await until("the poison record failed", lambda: proc.metrics()["failed"] == 1)
        await proc.stop()
        await run
        m = proc.metrics()
    assert calls[3] == 2  # two attempts, then rejected: never delivered again
    assert (m["rejected"], m["accepted"], m["retried"], m["failed"]) == (1, 9, 1, 1), m
    report = await judged(recorder, bootstrap, group)
    assert (report.rejected, report.accepted, report.redeliveries) == (1, 9, 0)


async def test_a_failing_record_goes_to_the_dead_letter_topic_with_its_origin(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    dlq = await kafka_topic(1)
    group = unique_name("shareproc")
    await configure_share_group(bootstrap, group)
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 5, recorder)
    done: set[int] = set()
    all_tried = asyncio.Event()

    async def handle(record: ShareRecord) -> None:
        done.add(record.offset)
        if len(done) == 5:
            all_tried.set()
        if record.key == b"k2":
            raise KeyError("no such order")

    async with share_consumer(bootstrap, group, topic, recorder, "d") as c:
        proc = ShareProcessor(
            c,
            handle,
            retry=RetryPolicy(attempts=3, backoff_ms=1),
            on_failure=DeadLetter(topic=dlq),
        )
        run = asyncio.create_task(proc.run())
        await asyncio.wait_for(all_tried.wait(), WAIT)
        await until("the record dead-lettered", lambda: proc.metrics()["dead_lettered"] == 1)
        await proc.stop()
        await run
        m = proc.metrics()
    assert (m["dead_lettered"], m["accepted"], m["retried"]) == (1, 5, 2), m
    reader = AIOKafkaConsumer(dlq, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await reader.start()
    try:
        letter = await asyncio.wait_for(reader.getone(), WAIT)
    finally:
        await reader.stop()
    headers = dict(letter.headers)
    assert (letter.key, letter.value) == (b"k2", b"v2")
    assert headers["aiogroup.dlq.topic"] == topic.encode()
    assert headers["aiogroup.dlq.partition"] == b"0"
    assert headers["aiogroup.dlq.offset"] == b"2"
    assert headers["aiogroup.dlq.exception"] == b"KeyError"
    assert headers["aiogroup.dlq.attempts"] == b"3"
    report = await judged(recorder, bootstrap, group)
    assert report.accepted == 5  # the dead-lettered one accepted after its produce


async def test_a_handler_running_three_lock_durations_keeps_its_record(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("shareproc")
    lock_ms = 1500
    await configure_share_group(bootstrap, group, lock_ms=lock_ms)
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 1, recorder)
    started = asyncio.Event()
    finished = asyncio.Event()

    async def slow(record: ShareRecord) -> None:
        started.set()
        await asyncio.sleep(3 * lock_ms / 1000)
        finished.set()

    # No auto_renew on the consumer: the processor keeps the locks of what it holds.
    async with (
        share_consumer(bootstrap, group, topic, recorder, "slow") as c,
        share_consumer(
            bootstrap, group, topic, recorder, "other", acknowledgement_mode="implicit"
        ) as other,
    ):
        proc = ShareProcessor(c, slow)
        run = asyncio.create_task(proc.run())
        await asyncio.wait_for(started.wait(), WAIT)
        stolen: list[ShareRecord] = []
        while not finished.is_set():  # the other member polls all along
            for records in (await other.getmany(timeout_ms=200)).values():
                stolen.extend(records)
        await proc.stop()
        await run
        m = proc.metrics()
    assert stolen == []
    assert m["renewed"] >= 2 and m["accepted"] == 1 and m["lock_lost"] == 0, m
    report = await judged(recorder, bootstrap, group)
    assert (report.accepted, report.redeliveries, report.lock_expiries) == (1, 0, 0)
    assert report.renewals >= 2


async def test_stop_mid_processing_releases_unfinished_records_to_another_consumer(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("shareproc")
    await configure_share_group(bootstrap, group)  # the 30 s lock: a release, not expiry
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 6, recorder)
    started: set[int] = set()
    all_started = asyncio.Event()
    never = asyncio.Event()

    async def stuck(record: ShareRecord) -> None:
        started.add(record.offset)
        if len(started) == 4:
            all_started.set()
        await never.wait()

    got: list[ShareRecord] = []
    six = asyncio.Event()

    async def read(c: ShareConsumer) -> None:
        async for record in c:
            got.append(record)
            c.acknowledge(record)
            if len(got) == 6:
                six.set()

    async with (
        share_consumer(bootstrap, group, topic, recorder, "first") as first,
        share_consumer(bootstrap, group, topic, recorder, "second") as second,
    ):
        # 4 slots, 8 held at most: 4 records start, 2 wait for a slot.
        proc = ShareProcessor(first, stuck, concurrency=4, drain_timeout_ms=200)
        run = asyncio.create_task(proc.run())
        await asyncio.wait_for(all_started.wait(), WAIT)
        await until("all 6 records held", lambda: proc.metrics()["held"] == 6)
        # The other worker's ShareFetch waits at the broker (all 6 are locked to first):
        # the records first releases go to it.
        reader = asyncio.create_task(read(second))
        await until(
            "second's ShareFetch waiting",
            lambda: any(s.open and s.request_in_flight for s in second.health().leader_sessions),
        )
        # The worker stops: its processor first (drains 200 ms, cancels, RELEASEs all 6),
        # then the close carries the RELEASEs - no ShareFetch of first's in between.
        await first.stop()
        await run
        m = proc.metrics()
        assert (m["released"], m["accepted"], m["held"], m["lock_lost"]) == (6, 0, 0, 0), m
        await asyncio.wait_for(six.wait(), WAIT)
        await second.commit()
        reader.cancel()
    assert sorted((r.offset, r.delivery_count) for r in got) == [(o, 2) for o in range(6)]
    report = await judged(recorder, bootstrap, group)
    assert (report.accepted, report.releases) == (6, 6)


async def test_a_processor_stopped_alone_leaves_its_released_records_to_the_next_member(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """ShareProcessor.stop() with its consumer running on: the records it RELEASEs go to
    the next member at their second delivery.  Before, the consumer's next read-ahead
    ShareFetch took them back (delivery 2) for a consumer nobody polled, so the next
    member waited for the 30 s lock and got them at delivery 3."""
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("shareproc")
    await configure_share_group(bootstrap, group)  # the 30 s lock: a release, not expiry
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 6, recorder)
    started: set[int] = set()
    all_started = asyncio.Event()
    never = asyncio.Event()

    async def stuck(record: ShareRecord) -> None:
        started.add(record.offset)
        if len(started) == 4:
            all_started.set()
        await never.wait()

    got: list[ShareRecord] = []
    six = asyncio.Event()

    async def read(c: ShareConsumer) -> None:
        async for record in c:
            got.append(record)
            c.acknowledge(record)
            if len(got) == 6:
                six.set()

    async with share_consumer(bootstrap, group, topic, recorder, "first") as first:
        proc = ShareProcessor(first, stuck, concurrency=4, drain_timeout_ms=200)
        run = asyncio.create_task(proc.run())
        await asyncio.wait_for(all_started.wait(), WAIT)
        await until("all 6 records held", lambda: proc.metrics()["held"] == 6)
        await proc.stop()  # the consumer runs on; nobody polls it
        await run
        m = proc.metrics()
        assert (m["released"], m["accepted"], m["held"]) == (6, 0, 0), m
        # Another member joins after the release: the records are there for it.
        async with share_consumer(bootstrap, group, topic, recorder, "second") as second:
            reader = asyncio.create_task(read(second))
            await asyncio.wait_for(six.wait(), WAIT)
            await second.commit()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        assert first.health().records_acquired == 0  # it took nothing back
    assert sorted((r.offset, r.delivery_count) for r in got) == [(o, 2) for o in range(6)]
    report = await judged(recorder, bootstrap, group)
    assert (report.accepted, report.releases, report.redeliveries) == (6, 6, 6)


async def test_stop_on_failure_raises_and_the_failed_record_comes_back(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("shareproc")
    await configure_share_group(bootstrap, group)
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 1, recorder)
    deliveries: list[int] = []
    second = asyncio.Event()

    async def handle(record: ShareRecord) -> None:
        deliveries.append(record.delivery_count)
        if record.delivery_count == 1:
            raise RuntimeError("first time fails")
        second.set()

    async with share_consumer(bootstrap, group, topic, recorder, "s") as c:
        proc = ShareProcessor(c, handle, retry=RetryPolicy(attempts=1))
        with pytest.raises(ProcessingError, match="first time fails") as caught:
            await asyncio.wait_for(proc.run(), WAIT)
        assert caught.value.offset == 0 and caught.value.attempts == 1
        # Released: the failed record, and the same record again if the read under way
        # when the processor stopped had acquired it anew (taken, never started).
        released = proc.metrics()["released"]
        assert released in (1, 2), proc.metrics()
        again = ShareProcessor(c, handle)  # a processor runs once: a new one goes on
        run = asyncio.create_task(again.run())
        await asyncio.wait_for(second.wait(), WAIT)
        await again.stop()  # sends the ACCEPT and waits for its answer
        await run
        assert again.metrics()["accepted"] == 1
    assert deliveries == [1, 1 + released]  # delivered again, its count raised
    report = await judged(recorder, bootstrap, group)
    assert (report.accepted, report.releases, report.redeliveries) == (1, released, released)


async def test_a_record_whose_lock_ran_out_mid_handler_is_counted_lost_not_accepted(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("shareproc")
    lock_ms = 1000
    await configure_share_group(bootstrap, group, lock_ms=lock_ms)
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 1, recorder)
    deliveries: list[int] = []
    accepted_again = asyncio.Event()

    async def handle(record: ShareRecord) -> None:
        deliveries.append(record.delivery_count)
        if record.delivery_count == 1:
            # The whole process stalls (a stand-in for a long GC pause or a frozen
            # host): no RENEW can go out, and the broker takes the lock back.
            time.sleep(2.5 * lock_ms / 1000)  # noqa: ASYNC251 - the stall is the point
        else:
            accepted_again.set()

    async with share_consumer(bootstrap, group, topic, recorder, "stalled") as c:
        proc = ShareProcessor(c, handle)
        run = asyncio.create_task(proc.run())
        await asyncio.wait_for(accepted_again.wait(), WAIT)
        await proc.stop()
        await run
        m = proc.metrics()
    # Both deliveries finished their handler; only the second one's ACCEPT held.
    assert deliveries == [1, 2]
    assert (m["finished"], m["accepted"]) == (2, 1), m
    report = await judged(recorder, bootstrap, group)
    assert report.accepted == 1 and report.redeliveries == 1
    # The late ACCEPT's refusal counts even when it rode on a ShareFetch whose answer
    # acquired the record again (the share fetcher settles acknowledgements first).
    assert m["lock_lost"] == 1, m
