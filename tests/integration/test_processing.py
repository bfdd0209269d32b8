"""The processor against a real broker: order, commits that never pass unfinished
work, restart and handoff, dead letters, stop on failure.

Committed offsets and their metadata are read from outside (an admin client's
OffsetFetch), never from the processor's own metrics.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from aiogroup import (
    AsyncConsumerRebalanceListener,
    DeadLetter,
    DeadLetterTopicError,
    GroupConsumer,
    ProcessingError,
    Processor,
    RetryPolicy,
    TopicPartition,
)
from aiogroup.cli import run as cli_run
from aiogroup.processing.dead_letter import HEADER_PREFIX
from aiogroup.processing.offset_metadata import decode
from aiogroup.testing import KafkaBroker
from aiogroup.testing.broker import unique_name
from aiogroup.testing.history import HistoryRecorder, MemberRecorder, check_history
from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration

WAIT = 30.0


async def produce(
    bootstrap: str, topic: str, records: list[tuple[int, bytes | None, bytes]]
) -> None:
    """(partition, key, value) in this order, acknowledged."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value, key=key, partition=p) for p, key, value in records
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def committed(
    bootstrap: str, group: str, topic: str
) -> dict[TopicPartition, tuple[int, str]]:
    """The broker's committed offsets and metadata (OffsetFetch by a consumer outside the
    group: it neither subscribes nor joins)."""
    checker = GroupConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    await checker.start()
    try:
        parts = checker.partitions_for_topic(topic) or set()
        if not parts:
            await checker.topics()
            parts = checker.partitions_for_topic(topic) or set()
        offsets = await checker._fetch_committed([TopicPartition(topic, p) for p in parts])
    finally:
        await checker.stop()
    return {tp: (oam.offset, oam.metadata) for tp, oam in offsets.items() if oam is not None}


async def until(
    check: Callable[[], Awaitable[bool] | bool], what: str, timeout: float = WAIT
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def make_consumer(bootstrap: str, group: str, topic: str, **options: Any) -> GroupConsumer:
    if options.get("group_protocol") != "consumer":  # classic: small session, quick beats
        options.setdefault("partition_assignment_strategy", ("range",))
        options.setdefault("session_timeout_ms", 6000)
        options.setdefault("heartbeat_interval_ms", 500)
    return GroupConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **options,
    )


@asynccontextmanager
async def running(processor: Processor) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.get_running_loop().create_task(processor.run())
    try:
        yield task
    finally:
        await asyncio.wait_for(processor.stop(), WAIT)
        if task.done() and not task.cancelled():
            task.exception()  # retrieved; the test asserts on it where it matters


class Ownership(AsyncConsumerRebalanceListener):
    """Writes a member's ownership to the history; runs after the processor's hook, so a
    revocation's window ends once the processor has drained and committed."""

    def __init__(self, rec: MemberRecorder) -> None:
        self.rec = rec

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.rec.assigned(assigned)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.rec.revoke_started(revoked)
        self.rec.revoke_ended(revoked)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.rec.lost(lost)


class Log:
    """What the handlers saw: start/finish times per record, the peak in flight."""

    def __init__(self) -> None:
        self.started: list[tuple[float, str, TopicPartition, int, bytes | None]] = []
        self.finished: dict[tuple[TopicPartition, int], float] = {}
        self.in_flight = 0
        self.peak = 0
        self.progress = asyncio.Event()

    def first_start(self, member: str) -> float:
        return min(t for t, m, *_ in self.started if m == member)

    def handler(
        self,
        member: str,
        delay: Callable[[Any], float] = lambda r: 0.005,
        rec: MemberRecorder | None = None,
    ) -> Any:
        async def handle(record: Any) -> None:
            tp = TopicPartition(record.topic, record.partition)
            self.started.append((time.monotonic(), member, tp, record.offset, record.key))
            if rec is not None:  # processing start = handed to the application
                rec.delivered(record.topic, record.partition, [record.offset])
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            try:
                await asyncio.sleep(delay(record))
            finally:
                self.in_flight -= 1
            self.finished[(tp, record.offset)] = time.monotonic()
            self.progress.set()

        return handle


@pytest.mark.parametrize("ordering", ["key", "partition", "unordered"])
async def test_ordering_modes_hold_and_run_concurrently(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str, ordering: str
) -> None:
    topic = await kafka_topic(partitions=2)
    records = [(i % 2, b"k%d" % (i % 7), b"%d" % i) for i in range(140)]
    await produce(bootstrap_servers, topic, records)
    consumer = make_consumer(bootstrap_servers, group_id, topic)
    await consumer.start()
    log = Log()
    processor = Processor(
        consumer,
        log.handler("a", lambda r: 0.002 * (int(r.value) % 5)),
        concurrency=20,
        ordering=ordering,  # type: ignore[arg-type]
        commit_interval_ms=200,
    )
    try:
        async with running(processor):
            await until(lambda: len(log.finished) == 140, "all 140 records processed")
    finally:
        await consumer.stop()
    assert len(log.started) == 140  # each once
    lanes: dict[Any, list[int]] = defaultdict(list)
    for t, _, tp, offset, key in log.started:
        lane = {"key": (tp, key), "partition": tp, "unordered": (tp, offset)}[ordering]
        if lanes[lane]:
            previous = lanes[lane][-1]
            assert offset > previous, f"{lane}: {offset} started after {previous}"
            assert log.finished[(tp, previous)] <= t, f"{lane}: {offset} overlapped {previous}"
        lanes[lane].append(offset)
    assert log.peak > 1  # concurrency actually used (2 partitions, 7 keys, or unordered)
    if ordering != "partition":
        assert log.peak > 2  # more than one record of a partition at once
    # The broker's view: everything committed, nothing left in the metadata.
    offsets = await committed(bootstrap_servers, group_id, topic)
    assert {tp.partition: o for tp, (o, _) in offsets.items()} == {0: 70, 1: 70}
    assert all(meta == "" for _, meta in offsets.values())


async def test_max_uncommitted_bounds_the_work_no_answered_commit_covers(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """max_uncommitted=8 with the 5 s default interval: at every handler start the
    processor's count of started, uncovered records is <= 8, so it commits (and waits
    for the answers) long before the interval; it learns from its first commit whether
    the broker keeps commit metadata; every record is processed once and committed."""
    bootstrap = kafka_broker.bootstrap_servers
    topic = await kafka_topic(partitions=2)
    records = [(i % 2, b"k%d" % (i % 5), b"%d" % i) for i in range(200)]
    await produce(bootstrap, topic, records)
    consumer = make_consumer(bootstrap, group_id, topic)
    await consumer.start()
    log = Log()
    seen: list[int] = []
    inner = log.handler("a", lambda r: 0.002)

    async def handle(record: Any) -> None:
        seen.append(processor.metrics()["uncommitted"])
        await inner(record)

    processor = Processor(consumer, handle, concurrency=8, max_uncommitted=8)
    try:
        async with running(processor):
            await until(lambda: len(log.finished) == 200, "all 200 records processed")
            kept = processor._metadata_kept
            waits = processor.metrics()["commit_waits"]
    finally:
        await consumer.stop()
    assert len(log.started) == 200  # each once
    assert max(seen) <= 8, f"{max(seen)} records at risk at a start"
    assert waits > 0  # the bound, not the 5 s interval, made the commits
    assert kept is kafka_broker.caps.keeps_commit_metadata
    offsets = await committed(bootstrap, group_id, topic)
    assert {tp.partition: o for tp, (o, _) in offsets.items()} == {0: 100, 1: 100}


async def test_commit_stays_at_a_blocked_record_and_a_restart_skips_the_finished(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """The restart's skip needs the broker to keep commit metadata; Tansu drops it
    (caps.keeps_commit_metadata), so there the restart processes 5..19 again."""
    bootstrap_servers = kafka_broker.bootstrap_servers
    keeps_metadata = kafka_broker.caps.keeps_commit_metadata
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, [(0, b"k%d" % i, b"%d" % i) for i in range(20)])
    tp = TopicPartition(topic, 0)
    release = asyncio.Event()
    seen: list[int] = []

    async def blocking(record: Any) -> None:
        seen.append(record.offset)
        if record.offset == 5:
            await release.wait()

    consumer = make_consumer(bootstrap_servers, group_id, topic)
    await consumer.start()
    processor = Processor(
        consumer,
        blocking,
        concurrency=50,
        ordering="key",
        commit_interval_ms=100,
        drain_timeout_ms=300,
    )
    try:
        async with running(processor):
            await until(lambda: len(seen) == 20, "all 20 records started")

            await until(lambda: processor.metrics()["finished"] == 19, "19 records finished")

            async def listed() -> bool:
                offsets = await committed(bootstrap_servers, group_id, topic)
                return tp in offsets and (offsets[tp][1] != "" or not keeps_metadata)

            await until(listed, "a commit listing the finished records")
            await asyncio.sleep(0.3)  # three more commit intervals: still not past 5
            offset, metadata = (await committed(bootstrap_servers, group_id, topic))[tp]
            assert offset == 5  # the blocked record, never past it
            assert decode(offset, metadata) == ([(6, 20)] if keeps_metadata else [])
            snapshot = consumer.metrics().processing  # folded into the consumer's metrics
            assert snapshot is not None and snapshot["in_flight"] == 1
            assert snapshot["oldest_in_flight_age_s"] > 0.3
            assert snapshot["partitions"][f"{topic}[0]"] == {
                "finished_offset": 5,
                "committed_offset": 5,
                "gap": 0,
                "unfinished": 1,
            }
    finally:
        await consumer.stop()  # the revoke: drains 300 ms, cancels offset 5, commits
    assert not release.is_set()
    offset, metadata = (await committed(bootstrap_servers, group_id, topic))[tp]
    assert (offset, decode(offset, metadata)) == (5, [(6, 20)] if keeps_metadata else [])
    # The CLI's lag view shows the progress: 15 behind the commit, 14 of them finished.
    out = io.StringIO()
    assert await cli_run(["-b", bootstrap_servers, "--json", "lag", group_id], out=out) == 0
    (row,) = json.loads(out.getvalue())
    assert (row["committed"], row["high_watermark"], row["lag"]) == (5, 20, 15)
    if keeps_metadata:
        assert (row["finished_ahead"], row["unprocessed"]) == (14, 1)
    else:
        assert (row["finished_ahead"], row["unprocessed"]) == (0, 15)

    # A restart processes only the record that was unfinished.
    again: list[int] = []

    async def record_it(record: Any) -> None:
        again.append(record.offset)

    consumer = make_consumer(bootstrap_servers, group_id, topic)
    await consumer.start()
    processor = Processor(consumer, record_it, commit_interval_ms=100)
    try:
        async with running(processor):

            async def all_committed() -> bool:
                return (await committed(bootstrap_servers, group_id, topic)).get(tp, (0, ""))[
                    0
                ] == 20

            await until(all_committed, "the commit to reach 20")
    finally:
        await consumer.stop()
    if keeps_metadata:
        assert again == [5]
        assert processor.metrics()["skipped_finished_before"] == 14
    else:
        assert again == list(range(5, 20))


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky", "consumer-protocol"])
async def test_a_joining_member_never_processes_a_partition_at_once_with_the_first(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str, strategy: str
) -> None:
    if strategy == "consumer-protocol" and not kafka_broker.caps.supports_consumer_protocol:
        pytest.skip(
            "not applicable: this broker has no consumer group protocol "
            "(caps.supports_consumer_protocol)"
        )
    bootstrap_servers = kafka_broker.bootstrap_servers
    group_options: dict[str, Any] = (
        {"group_protocol": "consumer"}
        if strategy == "consumer-protocol"
        else {"partition_assignment_strategy": (strategy,)}
    )
    topic = await kafka_topic(partitions=4)
    total = 400
    half = [(i % 4, b"k%d" % (i % 13), b"x") for i in range(total // 2)]
    await produce(bootstrap_servers, topic, half)
    history = HistoryRecorder()
    log = Log()
    members = []
    processors = []
    recorders = []
    for name in ("a", "b"):
        rec = history.member(name)
        recorders.append(rec)
        consumer = make_consumer(
            bootstrap_servers, group_id, topic, listener=Ownership(rec), **group_options
        )
        processor = Processor(
            consumer,
            log.handler(name, lambda r: 0.02, rec),
            concurrency=4,
            ordering="key",
            commit_interval_ms=200,
        )
        members.append(consumer)
        processors.append(processor)
    tasks = []
    loop = asyncio.get_running_loop()
    try:
        await members[0].start()
        tasks.append(loop.create_task(processors[0].run()))
        await until(lambda: len(log.finished) >= 20, "A to process 20 records")
        # B joins while A works through its backlog (its handlers in flight).
        await members[1].start()
        tasks.append(loop.create_task(processors[1].run()))
        await produce(bootstrap_servers, topic, half)  # work for both after the handoff
        for p in range(4):
            history.produced(topic, p, 0, total // 4 - 1)
        await until(
            lambda: len({(tp, o) for _, _, tp, o, _ in log.started}) == total,
            "every record processed",
        )
        await until(lambda: len(log.finished) == total, "every record finished")
        assert any(m == "b" for _, m, *_ in log.started)  # B took partitions over
        assert any(m == "a" for t, m, *_ in log.started if t > log.first_start("b"))
    finally:
        for p in processors:
            await asyncio.wait_for(p.stop(), WAIT)
        for c, rec in zip(members, recorders, strict=True):
            rec.leaving()
            await c.stop()
    for task in tasks:
        assert task.done() and task.exception() is None
    # The ownership-history checker: no partition held by both members at once (a
    # holding ends when the revoke - drain and commit included - returned), every
    # record processed, nothing processed twice (no crash excuses a duplicate).
    check_history(history.events()).assert_clean()
    # Processing windows per partition: [start, finish] of each record, by member.
    windows: dict[TopicPartition, list[tuple[float, float, str]]] = defaultdict(list)
    for t, member, tp, offset, _ in log.started:
        windows[tp].append((t, log.finished.get((tp, offset), float("inf")), member))
    for tp, spans in windows.items():
        for s1, e1, m1 in spans:
            for s2, e2, m2 in spans:
                if m1 != m2:
                    assert e1 <= s2 or e2 <= s1, f"{tp}: {m1} and {m2} processed it at once"
    # Graceful handoff: the revoke drained and committed, so nothing ran twice.
    assert len(log.started) == total
    offsets = await committed(bootstrap_servers, group_id, topic)
    assert {tp.partition: o for tp, (o, _) in offsets.items()} == {p: 100 for p in range(4)}


async def test_dead_letter_topic_gets_the_failed_record_with_headers(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    topic = await kafka_topic(partitions=1)
    dlq = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, [(0, b"k", b"%d" % i) for i in range(6)])
    tp = TopicPartition(topic, 0)
    calls: dict[int, int] = defaultdict(int)

    async def poison_at_2(record: Any) -> None:
        calls[record.offset] += 1
        if record.offset == 2:
            raise ValueError("poison")

    consumer = make_consumer(bootstrap_servers, group_id, topic)
    await consumer.start()
    processor = Processor(
        consumer,
        poison_at_2,
        ordering="partition",
        retry=RetryPolicy(attempts=3, backoff_ms=10, max_backoff_ms=20),
        on_failure=DeadLetter(topic=dlq),
        commit_interval_ms=100,
    )
    try:
        async with running(processor):

            async def all_committed() -> bool:
                return (await committed(bootstrap_servers, group_id, topic)).get(tp, (0, ""))[
                    0
                ] == 6

            await until(all_committed, "the commit to pass the dead-lettered record")
    finally:
        await consumer.stop()
    assert calls == {0: 1, 1: 1, 2: 3, 3: 1, 4: 1, 5: 1}
    assert processor.metrics()["dead_lettered"] == 1
    reader = AIOKafkaConsumer(
        dlq, bootstrap_servers=bootstrap_servers, auto_offset_reset="earliest"
    )
    await reader.start()
    try:
        record = await asyncio.wait_for(reader.getone(), WAIT)
    finally:
        await reader.stop()
    headers = {k: v for k, v in record.headers}
    assert (record.key, record.value) == (b"k", b"2")
    assert headers[HEADER_PREFIX + "topic"] == topic.encode()
    assert headers[HEADER_PREFIX + "partition"] == b"0"
    assert headers[HEADER_PREFIX + "offset"] == b"2"
    assert headers[HEADER_PREFIX + "exception"] == b"ValueError"
    assert headers[HEADER_PREFIX + "message"] == b"poison"
    assert headers[HEADER_PREFIX + "attempts"] == b"3"


async def test_a_missing_dead_letter_topic_is_an_error_at_start(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    topic = await kafka_topic(partitions=1)
    consumer = make_consumer(bootstrap_servers, group_id, topic)
    await consumer.start()
    missing = unique_name("no-such-dlq")
    try:
        processor = Processor(consumer, lambda r: None, on_failure=DeadLetter(topic=missing))
        with pytest.raises(DeadLetterTopicError, match=missing):
            await asyncio.wait_for(processor.run(), WAIT)
    finally:
        await consumer.stop()


async def test_stop_mode_raises_and_commits_nothing_past_the_failure(
    bootstrap_servers: str,
    kafka_topic: TopicFactory,
    group_id: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, [(0, None, b"%d" % i) for i in range(10)])
    tp = TopicPartition(topic, 0)
    processed: list[int] = []

    def fails_at_3(record: Any) -> None:  # a sync handler: runs in the thread pool
        if record.offset == 3:
            raise RuntimeError("cannot process 3")
        processed.append(record.offset)

    consumer = make_consumer(bootstrap_servers, group_id, topic)
    await consumer.start()
    processor = Processor(
        consumer,
        fails_at_3,
        ordering="key",
        retry=RetryPolicy(attempts=2, backoff_ms=5),
        commit_interval_ms=100,
    )
    try:
        with pytest.raises(ProcessingError, match=r"@3 after 2 attempt") as raised:
            await asyncio.wait_for(processor.run(), WAIT)
        assert isinstance(raised.value.__cause__, RuntimeError)
        assert raised.value.offset == 3
    finally:
        await consumer.stop()
    assert processed == [0, 1, 2]  # null keys: partition order, nothing after 3 started
    fallback = [r for r in caplog.records if "records without a key" in r.getMessage()]
    assert len(fallback) == 1  # said once in the log
    offset, _ = (await committed(bootstrap_servers, group_id, topic))[tp]
    assert offset == 3


async def test_a_record_that_overruns_its_timeout_is_retried(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, [(0, b"k", b"%d" % i) for i in range(4)])
    tp = TopicPartition(topic, 0)
    attempts: dict[int, int] = defaultdict(int)
    hung = asyncio.Event()

    async def hangs_once_at_1(record: Any) -> None:
        attempts[record.offset] += 1
        if record.offset == 1 and attempts[1] == 1:
            await hung.wait()  # never set: only the timeout ends this attempt

    consumer = make_consumer(bootstrap_servers, group_id, topic)
    await consumer.start()
    processor = Processor(
        consumer,
        hangs_once_at_1,
        record_timeout_ms=200,
        retry=RetryPolicy(attempts=2, backoff_ms=10),
        commit_interval_ms=100,
    )
    try:
        async with running(processor):

            async def all_committed() -> bool:
                return (await committed(bootstrap_servers, group_id, topic)).get(tp, (0, ""))[
                    0
                ] == 4

            await until(all_committed, "the commit to pass the timed-out record")
    finally:
        await consumer.stop()
    assert attempts == {0: 1, 1: 2, 2: 1, 3: 1}
    assert processor.metrics()["retried"] == 1
    assert consumer.metrics().processing is None  # the processor's figures left with it


async def test_lost_partitions_cancel_handlers_at_once_and_commit_nothing(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    """The member's loop freezes past its session: its partitions are lost, not revoked.

    The processor cancels their handlers before the application's ``on_partitions_lost``
    runs, and commits nothing for them (the interval is longer than the test).
    """
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, [(0, b"k%d" % i, b"%d" % i) for i in range(10)])
    events: list[str] = []
    finished: set[int] = set()

    class Listener(AsyncConsumerRebalanceListener):
        async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
            events.append("lost")

    async def blocks_at_3(record: Any) -> None:
        if record.offset == 3 and "cancelled-3" not in events:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                events.append("cancelled-3")
                raise
        finished.add(record.offset)

    consumer = make_consumer(bootstrap_servers, group_id, topic, listener=Listener())
    await consumer.start()
    processor = Processor(consumer, blocks_at_3, commit_interval_ms=600_000)
    try:
        async with running(processor):
            await until(lambda: len(finished) == 9, "the nine records other than 3")
            # The whole loop freezes on purpose: no heartbeat for more than the session.
            time.sleep(8)  # noqa: ASYNC251
            await until(lambda: "lost" in events, "on_partitions_lost")
            assert events[:2] == ["cancelled-3", "lost"]
            assert await committed(bootstrap_servers, group_id, topic) == {}
    finally:
        await consumer.stop()


async def test_a_partition_past_its_unfinished_bound_is_paused(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, [(0, b"k", b"%d" % i) for i in range(200)])
    tp = TopicPartition(topic, 0)
    release = asyncio.Event()
    done: list[int] = []

    async def blocks_first(record: Any) -> None:
        if record.offset == 0:
            await release.wait()
        done.append(record.offset)

    consumer = make_consumer(bootstrap_servers, group_id, topic)
    await consumer.start()
    processor = Processor(
        consumer, blocks_first, ordering="partition", max_unfinished_per_partition=10
    )
    try:
        async with running(processor):
            await until(lambda: tp in consumer.paused(), "the partition to be paused")
            await asyncio.sleep(0.5)  # five more reads' worth: the window does not grow
            unfinished = processor.metrics()["partitions"][f"{topic}[0]"]["unfinished"]
            assert 10 < unfinished <= 20
            release.set()
            await until(lambda: len(done) == 200, "all 200 records, once resumed")
            await until(lambda: tp not in consumer.paused(), "the partition to be resumed")
    finally:
        await consumer.stop()
    assert done == list(range(200))


async def test_the_exporters_show_the_running_processor(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    """Prometheus and OpenTelemetry carry the processor's figures while it runs: one
    handler blocked in flight, the others finished, per partition what is unfinished."""
    import prometheus_client
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from aiogroup.otel import instrument
    from aiogroup.prometheus import register_prometheus

    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, [(0, b"k%d" % i, b"%d" % i) for i in range(10)])
    release = asyncio.Event()

    async def blocking(record: Any) -> None:
        if record.offset == 3:
            await release.wait()

    consumer = make_consumer(bootstrap_servers, group_id, topic)
    await consumer.start()
    registry = prometheus_client.CollectorRegistry()
    register_prometheus(consumer, registry)
    reader = InMemoryMetricReader()
    instrument(consumer, MeterProvider(metric_readers=[reader]).get_meter("test"))
    processor = Processor(consumer, blocking, concurrency=20, ordering="key")
    try:
        async with running(processor):
            await until(lambda: processor.metrics()["finished"] == 9, "9 records finished")
            text = prometheus_client.generate_latest(registry).decode()
            points = {
                m.name: [p.value for p in m.data.data_points]
                for rm in reader.get_metrics_data().resource_metrics
                for sm in rm.scope_metrics
                for m in sm.metrics
            }
            release.set()
    finally:
        await consumer.stop()
    labels = f'client_id="aiogroup",group_id="{group_id}"'
    assert f"aiogroup_consumer_processing_in_flight{{{labels}}} 1.0" in text
    assert f"aiogroup_consumer_processing_finished_total{{{labels}}} 9.0" in text
    assert f"aiogroup_consumer_processing_dead_lettered_total{{{labels}}} 0.0" in text
    part = f'{labels},partition="0",topic="{topic}"'
    assert f"aiogroup_consumer_processing_unfinished{{{part}}} 1.0" in text
    assert points["aiogroup.processing.in_flight"] == [1]
    assert points["aiogroup.processing.finished"] == [9]
    assert points["aiogroup.processing.unfinished"] == [1]
    assert points["aiogroup.processing.oldest_in_flight_age"][0] >= 0


async def test_a_blocked_hot_key_never_stalls_the_other_keys_of_its_partition(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    """Half of one partition's records carry one key whose handler is stuck: the other
    keys' records, read among them, all finish meanwhile.  The hot key's backlog (3,000
    records, three times the processor's count bound on runnable records) waits in
    memory, bounded by bytes, instead of pausing the partition."""
    topic = await kafka_topic(partitions=1)
    records = [(0, b"hot" if i % 2 else b"k%d" % i, b"%d" % i) for i in range(6000)]
    await produce(bootstrap_servers, topic, records)
    release = asyncio.Event()
    others: set[int] = set()

    async def handler(record: Any) -> None:
        if record.key == b"hot":
            await release.wait()
        else:
            others.add(record.offset)

    consumer = make_consumer(bootstrap_servers, group_id, topic)
    await consumer.start()
    processor = Processor(consumer, handler, concurrency=100, ordering="key")
    try:
        async with running(processor):
            await until(lambda: len(others) == 3000, "the 3,000 records of other keys")
            await until(
                lambda: processor.metrics()["partitions"][f"{topic}[0]"]["unfinished"] == 3000,
                "the hot key's 3,000 records held unfinished, none dropped",
            )
            assert processor.metrics()["in_flight"] == 1  # the hot key's first, still stuck
            release.set()
            await until(lambda: processor.metrics()["finished"] == 6000, "all 6,000 records")
    finally:
        await consumer.stop()
    offsets = await committed(bootstrap_servers, group_id, topic)
    assert offsets[TopicPartition(topic, 0)][0] == 6000
