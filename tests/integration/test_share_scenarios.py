"""Share-group (KIP-932) scenarios of issue 28, aiogroup's ShareConsumer judged from outside.

Every consumer - aiogroup's, in this process or in its own
(:mod:`aiogroup.testing.share_member`, for kill -9 and SIGSTOP), and the peers of
:mod:`aiogroup.testing.share_peers` - feeds one share history; the producer's
acknowledged records and the broker's final view (DescribeShareGroupOffsets: start
offset and lag) go in too, and :func:`~aiogroup.testing.share_checker.check_share_history`
rules on the whole.  Each scenario is short (seconds): locks and sessions of seconds
through the group's own configs (the fixture's SHARE_TEST_SETTINGS floors allow them).

Apache Kafka only (``AIOGROUP_BROKER=kafka``): the embedded Tansu serves no share
groups (``caps.supports_share_groups``); there the scenarios report themselves not
applicable and :func:`test_tansu_has_no_share_groups_and_start_says_so` asserts what a
user gets instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import IncompatibleBrokerVersion

from aiogroup import AcknowledgeType, ShareConsumer, ShareRecord
from aiogroup.cli import run as cli_run
from aiogroup.share import AckResult, InvalidAcknowledgement
from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.plugin import TopicFactory
from aiogroup.testing.process import sigstop
from aiogroup.testing.share_checker import (
    ShareEvent,
    ShareRecorder,
    ShareReport,
    check_share_history,
    load_share_history,
)
from aiogroup.testing.share_member import load_outcomes
from aiogroup.testing.share_observer import ShareGroupObserver
from aiogroup.testing.share_peers import (
    ConfluentSharePeer,
    JavaSharePeer,
    configure_share_group,
    record_broker_view,
    share_offsets,
)

pytestmark = pytest.mark.integration

#: The broker's default share.delivery.count.limit (a group may set its own).
DELIVERY_LIMIT = 5
WAIT = 60.0


@pytest.fixture
def share_broker(kafka_broker: KafkaBroker) -> KafkaBroker:
    if not kafka_broker.caps.supports_share_groups:
        pytest.skip(
            "not applicable: this broker serves no share groups (caps.supports_share_groups); "
            "test_tansu_has_no_share_groups_and_start_says_so covers it"
        )
    return kafka_broker


# -- helpers -----------------------------------------------------------------------------


async def produce(
    bootstrap: str,
    topic: str,
    count: int,
    recorder: ShareRecorder,
    *,
    partitions: int = 1,
    start: int = 0,
) -> None:
    """``count`` records round-robin over ``partitions``, each recorded once acknowledged."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, f"v{start + i}".encode(), partition=(start + i) % partitions)
            for i in range(count)
        ]
        for md in await asyncio.gather(*futures):
            recorder.produced(topic, md.partition, md.offset, md.offset)
    finally:
        await producer.stop()


async def until(what: str, check: Callable[[], Awaitable[bool]], timeout: float = WAIT) -> None:
    """Poll what only the outside shows (a file, the broker's view) until ``check``."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        await asyncio.sleep(0.2)


async def settled(bootstrap: str, group: str, partitions: int) -> bool:
    """The broker's view: every partition's share state initialized and lag 0."""
    rows = await share_offsets(bootstrap, group)
    return len(rows) == partitions and all(r.start_offset >= 0 and r.lag == 0 for r in rows)


@contextlib.asynccontextmanager
async def share_consumer(
    bootstrap: str, group: str, topic: str, recorder: ShareRecorder, name: str, **options: Any
) -> AsyncIterator[ShareConsumer]:
    c = ShareConsumer(
        topic,
        group_id=group,
        bootstrap_servers=bootstrap,
        client_id=name,
        recorder=recorder,
        recorder_name=name,
        **options,
    )
    await c.start()
    try:
        yield c
    finally:
        await c.stop(timeout=10)


async def work(
    c: ShareConsumer,
    done: asyncio.Event,
    *,
    handle_s: float = 0.0,
    decide: Callable[[ShareRecord], AcknowledgeType] | None = None,
    seen: list[ShareRecord] | None = None,
    refused: list[ShareRecord] | None = None,
) -> None:
    """An explicit-mode worker: handle each record (await ``handle_s``), acknowledge it
    as ``decide`` says (ACCEPT), commit after each batch; until ``done``.  With
    ``refused``, a record ``acknowledge()`` refuses as no longer held goes there (else
    the refusal is raised: the scenario did not expect one)."""
    while not done.is_set():
        batch = await c.getmany(timeout_ms=200)
        for records in batch.values():
            for r in records:
                if seen is not None:
                    seen.append(r)
                if handle_s:
                    await asyncio.sleep(handle_s)
                try:
                    c.acknowledge(r, decide(r) if decide else AcknowledgeType.ACCEPT)
                except InvalidAcknowledgement:
                    # No longer this consumer's (its partition moved to another member,
                    # or its lock ran out): the broker delivers it again.
                    if refused is None:
                        raise
                    refused.append(r)
        if batch:
            await c.commit()


async def judge(
    recorder: ShareRecorder | list[ShareEvent],
    bootstrap: str,
    group: str,
    *,
    delivery_limit: int = DELIVERY_LIMIT,
) -> ShareReport:
    view = ShareRecorder()
    await record_broker_view(view, bootstrap, group)
    events = recorder if isinstance(recorder, list) else recorder.events()
    return check_share_history([*events, *view.events()], delivery_limit=delivery_limit)


def member_argv(
    bootstrap: str, topic: str, group: str, name: str, history: Path, **options: Any
) -> list[str]:
    argv = [sys.executable, "-m", "aiogroup.testing.share_member"]
    argv += [bootstrap, topic, group, name, str(history)]
    for key, value in options.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return argv


# -- Tansu ----------------------------------------------------------------------------------


async def test_tansu_has_no_share_groups_and_start_says_so(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """Where share groups are not served, the caps flag says so and ``start()`` fails
    naming the missing API (never a hang or a bare protocol error)."""
    if kafka_broker.caps.supports_share_groups:
        pytest.skip("not applicable: this broker serves share groups (the scenarios run)")
    topic = await kafka_topic(1)
    c = ShareConsumer(
        topic, group_id=unique_name("share"), bootstrap_servers=kafka_broker.bootstrap_servers
    )
    with pytest.raises(IncompatibleBrokerVersion, match="does not serve share groups"):
        await c.start()


# -- 1. four consumers on one partition ---------------------------------------------------


async def test_four_consumers_on_one_partition_hold_each_record_alone_and_accept_it_once(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """Four aiogroup share consumers (one loop, explicit ACCEPT, a 1 ms handler, 10
    records a fetch) drain one partition: the checker finds no record held by two inside
    overlapping lock windows, each of 400 records accepted once, the broker's lag 0."""
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share-four")
    await configure_share_group(bootstrap, group, lock_ms=5000)
    recorder = ShareRecorder()
    total = 400
    seen: dict[str, list[ShareRecord]] = {f"c{i}": [] for i in range(4)}
    async with contextlib.AsyncExitStack() as stack:
        consumers = {
            name: await stack.enter_async_context(
                share_consumer(
                    bootstrap,
                    group,
                    topic,
                    recorder,
                    name,
                    acknowledgement_mode="explicit",
                    max_poll_records=10,
                )
            )
            for name in seen
        }
        done = asyncio.Event()
        workers = [
            asyncio.create_task(work(c, done, handle_s=0.001, seen=seen[name]))
            for name, c in consumers.items()
        ]
        try:
            await produce(bootstrap, topic, total, recorder)
            await until("every record settled", lambda: settled(bootstrap, group, 1))
        finally:
            done.set()
            await asyncio.gather(*workers)
    report = await judge(recorder, bootstrap, group)
    report.assert_clean()
    assert report.records == total and report.accepted == total, report.summary()
    assert sorted(r.offset for rs in seen.values() for r in rs) == list(range(total))
    # Measured: 100 records each (10 a fetch, the broker serving fetches in turn).
    idle = [name for name, rs in seen.items() if not rs]
    assert not idle, f"one partition, four consumers: {idle} got no record"


# -- 2. kill -9 with records acquired -----------------------------------------------------


async def test_kill_9_of_an_aiogroup_share_consumer_gives_its_records_to_another(
    share_broker: KafkaBroker, kafka_topic: TopicFactory, tmp_path: Path
) -> None:
    """An aiogroup share consumer in its own process acquires a batch and is killed
    (kill -9) inside its handler.  Its connections drop, Kafka ends its share session
    (KAFKA-19015), and a second aiogroup consumer gets every record it held with a
    higher delivery count, long before the 10 s lock would have run out."""
    lock_ms = 10_000
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share-kill")
    await configure_share_group(bootstrap, group, lock_ms=lock_ms)
    history = tmp_path / "share.jsonl"
    recorder = ShareRecorder(history)
    await produce(bootstrap, topic, 10, recorder)
    argv = member_argv(bootstrap, topic, group, "victim", history, handle_s=60)
    victim = await asyncio.to_thread(subprocess.Popen, argv)
    try:

        async def victim_holds() -> bool:
            return any(
                e.kind == "acquired" and e.consumer == "victim" for e in load_share_history(history)
            )

        await until("the victim acquired records", victim_holds)
    finally:
        victim.kill()
        await asyncio.to_thread(victim.wait, 10)
    recorder.add("victim", "crashed")
    held = [e for e in load_share_history(history) if e.kind == "acquired"]
    assert held and all(e.delivery_count == 1 for e in held)
    done = asyncio.Event()
    async with share_consumer(
        bootstrap, group, topic, recorder, "survivor", acknowledgement_mode="explicit"
    ) as survivor:
        worker = asyncio.create_task(work(survivor, done))
        try:
            await until("every record settled", lambda: settled(bootstrap, group, 1))
        finally:
            done.set()
            await worker
    recorder.close()
    events = load_share_history(history)
    report = await judge(events, bootstrap, group)
    report.assert_clean()
    assert report.crashes == 1 and report.records == 10 and report.accepted == 10
    again = {e.record: e for e in events if e.consumer == "survivor" and e.kind == "acquired"}
    for first in held:
        second = again[first.record]
        assert second.delivery_count is not None and second.delivery_count >= 2
        # Back at the connection drop, not at the lock's end.
        assert second.t < (first.sent or first.t) + lock_ms / 1000, (first, second)


# -- 3. SIGSTOP past the lock and the session ---------------------------------------------


async def test_sigstop_past_the_lock_and_the_session_late_acks_reported_failed(
    share_broker: KafkaBroker, kafka_topic: TopicFactory, tmp_path: Path
) -> None:
    """An aiogroup share consumer (own process) frozen mid-handler past its 3 s session
    and 4 s lock: the broker drops it (the share observer sees it), a second consumer
    accepts its records with delivery count 2.  Woken, the frozen consumer's handler
    finishes and acknowledges: the checker counts none of those acknowledgements (each
    record is accepted once, by the survivor) and finds no claim of success - aiogroup
    told the application every late acknowledgement failed (an error result or a refused
    ``acknowledge()``).  confluent-kafka 2.16 reported the same late acknowledgements as
    successful (test_share_admin.py::test_sigstop_past_the_lock_and_the_session)."""
    lock_ms = 4000
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share-stop")
    await configure_share_group(
        bootstrap, group, lock_ms=lock_ms, session_ms=3000, heartbeat_ms=500
    )
    history = tmp_path / "share.jsonl"
    outcomes = tmp_path / "outcomes.jsonl"
    recorder = ShareRecorder(history)
    await produce(bootstrap, topic, 3, recorder)
    argv = member_argv(bootstrap, topic, group, "frozen", history, outcomes=outcomes, handle_s=1.5)
    observer = await ShareGroupObserver(bootstrap, group, recorder).start()
    victim = await asyncio.to_thread(subprocess.Popen, argv)
    done = asyncio.Event()
    try:

        async def victim_holds() -> bool:
            return any(e.kind == "acquired" for e in load_share_history(history))

        await until("the victim acquired records", victim_holds)
        await sigstop(victim.pid)  # stamped once stopped: its last events precede it
        recorder.add("frozen", "frozen")
        async with share_consumer(
            bootstrap, group, topic, recorder, "survivor", acknowledgement_mode="explicit"
        ) as survivor:
            worker = asyncio.create_task(work(survivor, done))
            try:
                await until("every record settled", lambda: settled(bootstrap, group, 1))
            finally:
                done.set()
                await worker
        victim.send_signal(signal.SIGCONT)
        recorder.add("frozen", "woke")

        async def told() -> bool:
            return {o["offset"] for o in load_outcomes(outcomes) if o["k"] == "ack"} == {0, 1, 2}

        # Its handler (1.5 s a record) ran out while it was stopped: it finishes the
        # batch and acknowledges each record, long after the lock.
        await until("the woken consumer was told about every acknowledgement", told, 30)
    finally:
        victim.send_signal(signal.SIGCONT)
        victim.terminate()
        await asyncio.to_thread(victim.wait, 30)
        await observer.stop()
        recorder.close()
    events = load_share_history(history)
    report = await judge(events, bootstrap, group)
    report.assert_clean()
    assert report.records == 3 and report.accepted == 3, report.summary()
    # Measured: the wake's first heartbeat learnt the fence (UNKNOWN_MEMBER_ID) before the
    # first late ACCEPT left, so it never left: the callback reported it failed, and the
    # next two were refused by acknowledge() naming the fence.  Had one left, the broker's
    # error would have been the result; an "ok" would break the checker's late-ack rule.
    told_app = [o for o in load_outcomes(outcomes) if o["k"] == "ack"]
    assert told_app and all(o["outcome"] != "ok" for o in told_app), told_app
    fence = min(e.since or e.t for e in events if e.kind == "gone" and e.consumer == "frozen")
    taken = [e for e in events if e.kind == "acquired" and e.consumer == "survivor"]
    assert len(taken) == 3 and all(e.delivery_count == 2 and e.t > fence for e in taken)


# -- 4. a poison record -------------------------------------------------------------------


async def test_a_poison_record_is_archived_at_the_delivery_limit(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """A record whose handler always fails (RELEASE) among good ones, delivery limit 3:
    it comes back with counts 1, 2, 3 and is then archived - delivered no more, the
    partition not blocked behind it - while every other record is accepted once."""
    limit = 3
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share-poison")
    await configure_share_group(bootstrap, group, lock_ms=5000, delivery_limit=limit)
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 10, recorder)
    poison = 4
    seen: list[ShareRecord] = []

    def decide(r: ShareRecord) -> AcknowledgeType:
        return AcknowledgeType.RELEASE if r.offset == poison else AcknowledgeType.ACCEPT

    done = asyncio.Event()
    async with share_consumer(
        bootstrap, group, topic, recorder, "c1", acknowledgement_mode="explicit"
    ) as c:
        worker = asyncio.create_task(work(c, done, decide=decide, seen=seen))
        try:
            await until("every record settled", lambda: settled(bootstrap, group, 1))
            # Archived, not pending: no fourth delivery comes while the consumer polls on.
            await asyncio.sleep(1.0)
        finally:
            done.set()
            await worker
    assert [r.delivery_count for r in seen if r.offset == poison] == [1, 2, 3]
    assert sorted(r.offset for r in seen if r.offset != poison) == [
        o for o in range(10) if o != poison
    ]
    report = await judge(recorder, bootstrap, group, delivery_limit=limit)
    report.assert_clean()
    assert (report.accepted, report.archived, report.releases) == (9, 1, 3), report.summary()


# -- 5. explicit RELEASE, and RENEW over three lock durations ------------------------------


async def test_released_records_come_back_with_a_higher_count(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """Two consumers RELEASE every first delivery and ACCEPT the second: every record is
    delivered twice, the second time with count 2 (to either consumer), accepted once."""
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share-release")
    await configure_share_group(bootstrap, group, lock_ms=5000)
    recorder = ShareRecorder()
    total = 40
    seen: list[ShareRecord] = []

    def decide(r: ShareRecord) -> AcknowledgeType:
        return AcknowledgeType.RELEASE if r.delivery_count == 1 else AcknowledgeType.ACCEPT

    done = asyncio.Event()
    options: dict[str, Any] = {"acknowledgement_mode": "explicit", "max_poll_records": 5}
    async with (
        share_consumer(bootstrap, group, topic, recorder, "a", **options) as a,
        share_consumer(bootstrap, group, topic, recorder, "b", **options) as b,
    ):
        workers = [
            asyncio.create_task(work(c, done, decide=decide, seen=seen, handle_s=0.001))
            for c in (a, b)
        ]
        try:
            await produce(bootstrap, topic, total, recorder)
            await until("every record settled", lambda: settled(bootstrap, group, 1))
        finally:
            done.set()
            await asyncio.gather(*workers)
    counts: dict[int, list[int]] = {}
    for r in seen:
        counts.setdefault(r.offset, []).append(r.delivery_count)
    assert counts == {o: [1, 2] for o in range(total)}
    report = await judge(recorder, bootstrap, group)
    report.assert_clean()
    assert (report.accepted, report.releases, report.redeliveries) == (total, total, total)


async def test_renew_keeps_a_record_through_a_handler_of_three_lock_durations(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """A handler that takes 3x the 1.5 s lock RENEWs its record (explicit
    ``acknowledge(record, RENEW)`` every 0.5 s) while another consumer polls all along:
    the other never gets it, the final ACCEPT is answered ok, and the checker counts the
    renewals and one acceptance."""
    lock_ms = 1500
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share-renew")
    await configure_share_group(bootstrap, group, lock_ms=lock_ms)
    recorder = ShareRecorder()
    await produce(bootstrap, topic, 1, recorder)
    stolen: list[ShareRecord] = []
    done = asyncio.Event()
    async with (
        share_consumer(
            bootstrap, group, topic, recorder, "slow", acknowledgement_mode="explicit"
        ) as slow,
        share_consumer(
            bootstrap, group, topic, recorder, "other", acknowledgement_mode="explicit"
        ) as other,
    ):
        thief = asyncio.create_task(work(other, done, seen=stolen))
        try:
            (record,) = (await slow.getmany(timeout_ms=int(WAIT * 1000), max_records=1))[
                next(iter(slow.assignment()))
            ]
            handler_ends = time.monotonic() + 3 * lock_ms / 1000
            while time.monotonic() < handler_ends:
                await asyncio.sleep(0.5)  # a step of the handler's work
                slow.acknowledge(record, AcknowledgeType.RENEW)
            slow.acknowledge(record, AcknowledgeType.ACCEPT)
            results = await slow.commit()
        finally:
            done.set()
            await thief
    (result,) = [r for rs in results.values() for r in rs]
    assert result.ok and result.ack_type is AcknowledgeType.ACCEPT, result
    assert stolen == []
    assert slow.metrics.lock_renewals >= 3
    report = await judge(recorder, bootstrap, group)
    report.assert_clean()
    assert report.accepted == 1 and report.renewals >= 3 and report.acquisitions == 1


# -- 6. a consumer joining and leaving under load ------------------------------------------


async def test_consumers_join_and_leave_under_load(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """Records flow into 2 partitions (100/s) while consumers come and go: a second
    joins once the first has worked, a third joins, works, and leaves cleanly
    (releasing what it held) while records still flow.  Every record is accepted once,
    no overlap, the broker's lag 0.  This scenario found an ACCEPT in flight when its
    partition moved reported to the application as failed though the broker applied it
    (about 1 run in 5, docs/reliability.md); fixed on the share branch (d9cb468: owed
    acknowledgements of a departing partition are kept until answered), 15 of 15 runs
    clean since."""
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(2)
    group = unique_name("share-churn")
    await configure_share_group(bootstrap, group, lock_ms=5000)
    recorder = ShareRecorder()
    seen: dict[str, Tally] = {"first": Tally(), "joiner": Tally(), "leaver": Tally()}
    refused: list[ShareRecord] = []
    told: list[tuple[str, AckResult]] = []
    done = asyncio.Event()
    left = asyncio.Event()
    options: dict[str, Any] = {"acknowledgement_mode": "explicit", "max_poll_records": 10}

    async def handled(name: str, count: int) -> None:
        await asyncio.wait_for(seen[name].reached(count), WAIT)

    async def member(name: str, after: Awaitable[None] | None, leave_after: int = 0) -> None:
        if after is not None:
            await after
        leave = asyncio.Event()

        def failed(results: dict[Any, list[AckResult]]) -> None:
            told.extend((name, r) for rs in results.values() for r in rs if not r.ok)

        async with share_consumer(
            bootstrap, group, topic, recorder, name, acknowledgement_callback=failed, **options
        ) as c:
            worker = asyncio.create_task(
                work(c, leave, handle_s=0.01, seen=seen[name], refused=refused)
            )
            if leave_after:
                await handled(name, leave_after)
            else:
                await done.wait()
            leave.set()
            await worker
        if leave_after:
            left.set()

    produced = 0

    async def producing() -> None:
        nonlocal produced
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
        await producer.start()
        try:
            after_leave = 0
            while after_leave < 50 and produced < 5000:
                md = await producer.send_and_wait(
                    topic, f"v{produced}".encode(), partition=produced % 2
                )
                recorder.produced(topic, md.partition, md.offset, md.offset)
                produced += 1
                after_leave += left.is_set()
                if produced % 10 == 0:
                    await asyncio.sleep(0.1)  # 100 records/s: a load, not a backlog
        finally:
            await producer.stop()

    members = [
        asyncio.create_task(member("first", None)),
        asyncio.create_task(member("joiner", handled("first", 20))),
        asyncio.create_task(member("leaver", handled("first", 40), leave_after=20)),
    ]
    try:
        await producing()
        await until("every record settled", lambda: settled(bootstrap, group, 2))
    finally:
        done.set()
        await asyncio.gather(*members)
    everything = {(p, o) for p in range(2) for o in range((produced + 1 - p) // 2)}
    assert {(r.partition, r.offset) for rs in seen.values() for r in rs} == everything
    # Measured: first 185-275, joiner 109-178, leaver 20 of 330-410 records; 0-5 records
    # refused by acknowledge() as no longer held (their partition moved) came back.
    assert all(seen.values()), {n: len(rs) for n, rs in seen.items()}
    report = await judge(recorder, bootstrap, group)
    failed_sent = [(name, r) for name, r in told if r.sent]
    assert report.ok, f"{report.summary()}\nsent but reported failed: {failed_sent}"
    assert report.records == produced and report.accepted == produced, report.summary()


class Tally(list[ShareRecord]):
    """The records a worker handled, with a wait for "at least n" (no polling)."""

    def __init__(self) -> None:
        super().__init__()
        self._grew = asyncio.Condition()

    def append(self, record: ShareRecord) -> None:
        super().append(record)
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._grew:
            self._grew.notify_all()

    async def reached(self, count: int) -> None:
        async with self._grew:
            await self._grew.wait_for(lambda: len(self) >= count)


# -- interop: aiogroup, confluent-kafka and Java in one share group -------------------------


async def assigned_members(bootstrap: str, group: str) -> int:
    """How many members the broker shows with an assignment (``aiogroup share describe``)."""
    out = io.StringIO()
    code = await cli_run(["-b", bootstrap, "--json", "share", "describe", group], out=out)
    if code != 0:
        return 0
    return sum(1 for m in json.loads(out.getvalue())["members"] if m["assignment"])


async def test_aiogroup_confluent_and_java_in_one_share_group(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """aiogroup's share consumer (explicit; releases some first deliveries),
    confluent-kafka's ``ShareConsumer`` (releases others) and Kafka's own Java
    ``VerifiableShareConsumer`` (explicit ACCEPT, sync commits) read one partition in one
    share group at once: every record is accepted exactly once across them, released
    records come back with a higher count, no overlap, the broker's lag 0.  (Measured,
    10 runs, all passed: aiogroup 12-54 acquisitions, Java 13-51, confluent-kafka 4-61, of
    90 records plus redeliveries.)"""
    pytest.importorskip("confluent_kafka", minversion="2.15")
    lock_ms = 5000
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share-interop")
    await configure_share_group(bootstrap, group, lock_ms=lock_ms)
    recorder = ShareRecorder()
    java = JavaSharePeer(
        "java", bootstrap, topic, group, recorder, lock_ms=lock_ms, ack_pattern=("accept",)
    ).start()
    confluent = ConfluentSharePeer(
        "confluent", bootstrap, topic, group, recorder, lock_ms=lock_ms,
        decide=lambda _t, _p, offset, count: "release" if offset % 5 == 0 and count == 1
        else "accept",
        handle_s=0.01,
    ).start()  # fmt: skip
    seen: list[ShareRecord] = []

    def decide(r: ShareRecord) -> AcknowledgeType:
        if r.offset % 7 == 3 and r.delivery_count == 1:
            return AcknowledgeType.RELEASE
        return AcknowledgeType.ACCEPT

    done = asyncio.Event()
    try:
        async with share_consumer(
            bootstrap, group, topic, recorder, "aiogroup", acknowledgement_mode="explicit"
        ) as mine:
            worker = asyncio.create_task(work(mine, done, decide=decide, seen=seen, handle_s=0.01))
            try:
                await until("all three joined", lambda: _three(bootstrap, group))
                for _ in range(9):  # a flow, not one batch Java's first fetch takes whole
                    await produce(bootstrap, topic, 10, recorder)
                    await asyncio.sleep(0.2)
                await until("every record settled", lambda: settled(bootstrap, group, 1))
            finally:
                done.set()
                await worker
    finally:
        confluent.stop()
        java.stop()
        java.cleanup()
    assert not confluent.errors, confluent.errors
    report = await judge(recorder, bootstrap, group)
    report.assert_clean()
    assert report.records == 90 and report.accepted == 90, report.summary()
    takers = Counter(e.consumer for e in recorder.events() if e.kind == "acquired")
    assert set(takers) == {"aiogroup", "confluent", "java"}, (takers, report.summary())


async def _three(bootstrap: str, group: str) -> bool:
    return await assigned_members(bootstrap, group) == 3
