"""The consumer group protocol (KIP-848, ``group_protocol="consumer"``) on a real broker.

Only Apache Kafka 4 speaks it here (``AIOGROUP_BROKER=kafka``).  On a broker
without it (``kafka_broker.caps.supports_consumer_protocol`` false: Tansu) the
scenarios are reported as not applicable, and one test asserts what a user of
such a broker gets instead: a clear UnsupportedVersion error naming the gap.

Ownership is judged from outside the members: every member writes its callbacks,
deliveries and commits into one history, and the ownership-history checker
(:mod:`aiogroup.testing.history`) rules on it; the broker's own view comes from
ConsumerGroupDescribe.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from typing import Any

import async_timeout
import pytest
from aiokafka import AIOKafkaClient, AIOKafkaProducer
from aiokafka.client import CoordinationType

from aiogroup import AsyncConsumerRebalanceListener, GroupConsumer, TopicPartition
from aiogroup._protocol.consumer_group import (
    ConsumerGroupDescribeRequest,
    DescribedConsumerGroup,
    parse_consumer_group_describe,
)
from aiogroup._protocol.group_configs import parse_session_timeout, session_timeout_request
from aiogroup.errors import KafkaError
from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.history import HistoryRecorder, MemberRecorder, check_history
from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration

WAIT = 60.0


@pytest.fixture
def consumer_protocol_broker(kafka_broker: KafkaBroker) -> KafkaBroker:
    """The broker, when it speaks KIP-848; otherwise the scenario does not apply."""
    if not kafka_broker.caps.supports_consumer_protocol:
        pytest.skip(
            "not applicable: this broker has no consumer group protocol "
            "(caps.supports_consumer_protocol); test_unsupported_broker_* covers it"
        )
    return kafka_broker


class ProtocolMember(AsyncConsumerRebalanceListener):
    """A consumer-protocol member that records its ownership history."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        history: HistoryRecorder,
        *,
        revoke_delay: float = 0.0,
        **options: Any,
    ) -> None:
        self.client_id = f"{name}-{unique_name('client')}"
        self.rec: MemberRecorder = history.member(self.client_id)
        self.revoke_delay = revoke_delay
        self.owned: set[TopicPartition] = set()
        self.assigned_calls = 0
        self.lost_calls = 0
        self.errors: list[BaseException] = []
        self.positions: dict[TopicPartition, int] = {}
        self.changed = asyncio.Event()
        opts: dict[str, Any] = dict(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=self.client_id,
            group_protocol="consumer",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        opts.update(options)
        self.consumer = GroupConsumer(**opts)
        self._task: asyncio.Task[None] | None = None

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.rec.revoke_started(revoked)
        try:
            if self.revoke_delay:
                await asyncio.sleep(self.revoke_delay)
            await self._commit({tp: p for tp, p in self.positions.items() if tp in revoked})
        finally:
            self.owned -= revoked
            self.rec.revoke_ended(revoked)
            self.changed.set()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.rec.assigned(assigned)
        self.assigned_calls += 1
        self.owned |= assigned
        self.changed.set()

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.rec.lost(lost)
        self.lost_calls += 1
        self.owned -= lost
        self.changed.set()

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        if not offsets:
            return
        try:
            await self.consumer.commit(offsets)
        except KafkaError as exc:
            self.errors.append(exc)
            return
        self.rec.committed(offsets)

    async def start(self, topics: Iterable[str] = (), pattern: str | None = None) -> None:
        await self.consumer.start()
        if pattern is not None:
            self.consumer.subscribe(pattern=pattern, listener=self)
        else:
            self.consumer.subscribe(list(topics), listener=self)
        self._task = asyncio.create_task(self._consume())

    async def _consume(self) -> None:
        while True:
            try:
                batches = await self.consumer.getmany(timeout_ms=100)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.errors.append(exc)
                self.changed.set()
                await asyncio.sleep(0.1)
                continue
            for tp, records in batches.items():
                if records:
                    self.rec.delivered(tp.topic, tp.partition, [r.offset for r in records])
                    self.positions[tp] = records[-1].offset + 1
            if batches:
                await self._commit(
                    {tp: self.positions[tp] for tp in batches if tp in self.positions}
                )
                self.changed.set()

    async def _halt(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self._task, WAIT)
            self._task = None

    async def stop(self) -> None:
        self.rec.leaving()
        await self._halt()
        await self.consumer.stop()

    async def abort(self) -> None:
        await self._halt()
        await self.consumer.abort()

    @property
    def state(self) -> str:
        coordinator = self.consumer._coordinator
        return "" if coordinator is None else coordinator.state.value  # type: ignore[union-attr]


async def until(members: Iterable[ProtocolMember], check: Any, what: str) -> None:
    """Wait (bounded) until ``check()`` holds, woken by any member's progress."""
    members = list(members)
    deadline = time.monotonic() + WAIT
    while not check():
        for m in members:
            if m.errors and not isinstance(m.errors[-1], KafkaError):
                raise AssertionError(f"{m.client_id} failed: {m.errors[-1]!r}")
            m.changed.clear()
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(
                f"timed out waiting for {what}: "
                + "; ".join(
                    f"{m.client_id} {m.state} owns {sorted(m.owned)} errors {m.errors[-3:]}"
                    for m in members
                )
            )
        waits = [asyncio.ensure_future(m.changed.wait()) for m in members]
        try:
            await asyncio.wait(waits, timeout=min(left, 0.5), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()


async def produce(
    bootstrap: str, topic: str, partitions: int, per_partition: int, history: HistoryRecorder
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for p in range(partitions):
            first = last = -1
            for i in range(per_partition):
                md = await producer.send_and_wait(topic, f"{p}-{i}".encode(), partition=p)
                first = md.offset if first < 0 else first
                last = md.offset
            history.produced(topic, p, first, last)
    finally:
        await producer.stop()


def all_delivered(history: HistoryRecorder) -> bool:
    return not check_history(history.events()).lost


def covers(members: Iterable[ProtocolMember], topic: str, partitions: int) -> bool:
    owned = [m.owned for m in members]
    wanted = {TopicPartition(topic, p) for p in range(partitions)}
    union: set[TopicPartition] = set().union(*owned)
    return union == wanted and sum(len(o) for o in owned) == partitions


async def describe(bootstrap: str, group: str) -> DescribedConsumerGroup:
    """The coordinator's own view of the group (ConsumerGroupDescribe), from outside."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        node = await client.coordinator_lookup(CoordinationType.GROUP, group)
        return parse_consumer_group_describe(
            await client.send(node, ConsumerGroupDescribeRequest(group))
        )
    finally:
        await client.close()


async def broker_agrees(bootstrap: str, group: str, members: Iterable[ProtocolMember]) -> None:
    """Wait (bounded) until the broker lists exactly ``members``, each owning what it
    believes it owns, with nothing left to move (current == target)."""
    members = list(members)
    deadline = time.monotonic() + WAIT
    while True:
        view = await describe(bootstrap, group)
        by_client = {m.client_id: m for m in view.members}
        wanted = {m.client_id: {(tp.topic, tp.partition) for tp in m.owned} for m in members}
        if set(by_client) == set(wanted) and all(
            by_client[c].assignment == parts and by_client[c].target_assignment == parts
            for c, parts in wanted.items()
        ):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"broker view {view} never matched the members' {wanted}")
        await asyncio.sleep(0.2)


# --- scenarios on a broker that speaks KIP-848 -------------------------------------------


async def test_one_member_joins_consumes_and_leaves(
    consumer_protocol_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    bootstrap = consumer_protocol_broker.bootstrap_servers
    topic = await kafka_topic(partitions=3)
    history = HistoryRecorder()
    await produce(bootstrap, topic, 3, 5, history)
    a = ProtocolMember("a", bootstrap, group_id, history)
    try:
        await a.start([topic])
        await until([a], lambda: covers([a], topic, 3), "a to own all three partitions")
        # The broker may answer the join with an empty target first (assignments are
        # computed asynchronously): one on_partitions_assigned per reconciliation.
        assert 1 <= a.assigned_calls <= 2
        await until([a], lambda: all_delivered(history), "every record delivered")
        assert a.consumer._coordinator is not None
        assert a.consumer._coordinator.generation_id >= 1  # the member epoch
    finally:
        await a.stop()
    assert a.state == "UNSUBSCRIBED"
    check_history(history.events()).assert_clean()


async def test_no_record_of_a_new_partition_before_on_partitions_assigned_returns(
    consumer_protocol_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """Java runs the callback inside poll(): nothing of a new partition is returned
    until it ended, and delivery starts at the offsets it chose.  The application here
    polls while the callback is still running (an async listener lets it)."""
    bootstrap = consumer_protocol_broker.bootstrap_servers
    topic = await kafka_topic(partitions=2)
    await produce(bootstrap, topic, 2, 10, HistoryRecorder())
    entered, release = asyncio.Event(), asyncio.Event()
    start = 4

    class SlowAssign(AsyncConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            pass

        async def on_partitions_assigned(
            self, assigned: set[TopicPartition]
        ) -> dict[TopicPartition, int] | None:
            if not assigned:
                return None  # the broker's first, empty target
            entered.set()
            await release.wait()
            return {tp: start for tp in assigned}

    consumer = GroupConsumer(
        bootstrap_servers=bootstrap,
        group_id=group_id,
        group_protocol="consumer",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        consumer.subscribe([topic], listener=SlowAssign())
        await asyncio.wait_for(entered.wait(), WAIT)
        # The callback holds; a poll meanwhile (long enough for a fetch from the
        # earliest offset to arrive) must hand out nothing of the new partitions.
        during = await consumer.getmany(timeout_ms=1500)
        assert not any(during.values()), f"delivered during the callback: {during}"
        release.set()
        first: dict[TopicPartition, int] = {}
        async with async_timeout.timeout(WAIT):
            while len(first) < 2:
                for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                    if records:
                        first.setdefault(tp, records[0].offset)
        assert first == {TopicPartition(topic, p): start for p in range(2)}
    finally:
        release.set()
        await consumer.stop()


async def started(*members_and_topics: tuple[ProtocolMember, list[str]]) -> None:
    for member, topics in members_and_topics:
        await member.start(topics)


async def test_two_members_split_and_one_leaves(
    consumer_protocol_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    bootstrap = consumer_protocol_broker.bootstrap_servers
    topic = await kafka_topic(partitions=4)
    history = HistoryRecorder()
    await produce(bootstrap, topic, 4, 5, history)
    a = ProtocolMember("a", bootstrap, group_id, history)
    b = ProtocolMember("b", bootstrap, group_id, history)
    try:
        await a.start([topic])
        await until([a], lambda: covers([a], topic, 4), "a to own all four partitions")
        await b.start([topic])
        await until(
            [a, b],
            lambda: covers([a, b], topic, 4) and bool(a.owned) and bool(b.owned),
            "a and b to split the partitions",
        )
        await broker_agrees(bootstrap, group_id, [a, b])
        await produce(bootstrap, topic, 4, 5, history)
        await until([a, b], lambda: all_delivered(history), "every record delivered")
        await b.stop()
        await until([a], lambda: covers([a], topic, 4), "a to take b's partitions back")
        await broker_agrees(bootstrap, group_id, [a])
        await produce(bootstrap, topic, 4, 5, history)
        await until([a], lambda: all_delivered(history), "every record delivered after b left")
        assert a.lost_calls == 0 and b.lost_calls == 0
    finally:
        await a.stop()
        if b.consumer._coordinator is not None and b.state != "UNSUBSCRIBED":
            await b.stop()
    check_history(history.events()).assert_clean()


async def test_killed_member_is_replaced_after_its_session(
    consumer_protocol_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    bootstrap = consumer_protocol_broker.bootstrap_servers
    topic = await kafka_topic(partitions=4)
    history = HistoryRecorder()
    await produce(bootstrap, topic, 4, 5, history)
    a = ProtocolMember("a", bootstrap, group_id, history)
    b = ProtocolMember("b", bootstrap, group_id, history)
    try:
        await a.start([topic])
        await b.start([topic])
        await until(
            [a, b],
            lambda: covers([a, b], topic, 4) and bool(a.owned) and bool(b.owned),
            "a and b to split the partitions",
        )
        await until([a, b], lambda: all_delivered(history), "every record delivered")
        # kill -9: no revoke, no leave heartbeat; the broker fences b when its session ends.
        history.crashed(b.client_id)
        await b.abort()
        await produce(bootstrap, topic, 4, 5, history)
        await until([a], lambda: covers([a], topic, 4), "a to get b's partitions")
        await broker_agrees(bootstrap, group_id, [a])  # b was fenced by its session
        await until([a], lambda: all_delivered(history), "every record delivered")
        assert a.lost_calls == 0
    finally:
        await a.stop()
    check_history(history.events()).assert_clean()


async def test_slow_revoke_listener_is_not_fenced_while_heartbeats_flow(
    consumer_protocol_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """A revoke listener running five sessions long: heartbeats keep the member in."""
    bootstrap = consumer_protocol_broker.bootstrap_servers
    topic = await kafka_topic(partitions=4)
    history = HistoryRecorder()
    await produce(bootstrap, topic, 4, 5, history)
    a = ProtocolMember("a", bootstrap, group_id, history, revoke_delay=0.0)
    b = ProtocolMember("b", bootstrap, group_id, history)
    try:
        await a.start([topic])
        await until([a], lambda: covers([a], topic, 4), "a to own all four partitions")
        coordinator = a.consumer._coordinator
        assert coordinator is not None
        interval = coordinator.membership.heartbeat_interval  # type: ignore[union-attr]
        assert interval > 0
        # The broker's session (6 s in the test settings) is several heartbeat intervals;
        # the listener outlasts five of them.
        a.revoke_delay = 5 * 6.0
        await b.start([topic])
        await until(
            [a, b],
            lambda: covers([a, b], topic, 4) and bool(b.owned),
            "b to get partitions once a's slow revocation finishes",
        )
        assert a.lost_calls == 0, "a was fenced during its slow revocation"
        # The revocation really outlasted five sessions (and a heartbeated through it).
        starts = [
            e.t
            for e in history.events()
            if e.member == a.client_id and e.kind == "revoke_started" and e.partitions
        ]
        ends = [
            e.t
            for e in history.events()
            if e.member == a.client_id and e.kind == "revoke_ended" and e.partitions
        ]
        assert starts and ends and ends[0] - starts[0] >= 5 * 6.0
        assert a.state in ("STABLE", "ACKNOWLEDGING", "RECONCILING")
        await until([a, b], lambda: all_delivered(history), "every record delivered")
    finally:
        a.revoke_delay = 0.0
        await a.stop()
        await b.stop()
    check_history(history.events()).assert_clean()


async def test_regex_subscription_is_resolved_by_the_broker(
    consumer_protocol_broker: KafkaBroker, group_id: str
) -> None:
    bootstrap = consumer_protocol_broker.bootstrap_servers
    prefix = unique_name("rx")
    t1 = await consumer_protocol_broker.create_topic(f"{prefix}-one", 2)
    t2 = await consumer_protocol_broker.create_topic(f"{prefix}-two", 1)
    other = await consumer_protocol_broker.create_topic(unique_name("other"), 1)
    history = HistoryRecorder()
    await produce(bootstrap, t1, 2, 3, history)
    await produce(bootstrap, t2, 1, 3, history)
    a = ProtocolMember("a", bootstrap, group_id, history)
    try:
        await a.start(pattern=f"{prefix}-.*")
        await until(
            [a],
            lambda: (
                a.owned == {TopicPartition(t1, 0), TopicPartition(t1, 1), TopicPartition(t2, 0)}
            ),
            "a to own the partitions of both matching topics",
        )
        await until([a], lambda: all_delivered(history), "every record delivered")
        assert not any(tp.topic == other for tp in a.owned)
        # A topic created after the subscription is picked up by the broker.
        t3 = await consumer_protocol_broker.create_topic(f"{prefix}-three", 1)
        await until(
            [a], lambda: TopicPartition(t3, 0) in a.owned, "a to get the later matching topic"
        )
    finally:
        await a.stop()
    check_history(history.events()).assert_clean()


async def test_regex_must_match_the_whole_topic_name(
    consumer_protocol_broker: KafkaBroker, group_id: str
) -> None:
    """RE2J on the broker matches whole names (Python's re.match would take a prefix)."""
    bootstrap = consumer_protocol_broker.bootstrap_servers
    prefix = unique_name("rxw")
    exact = await consumer_protocol_broker.create_topic(f"{prefix}-a", 1)
    longer = await consumer_protocol_broker.create_topic(f"{prefix}-ab", 1)
    history = HistoryRecorder()
    a = ProtocolMember("a", bootstrap, group_id, history)
    try:
        await a.start(pattern=f"{prefix}-a")
        await until([a], lambda: TopicPartition(exact, 0) in a.owned, "a to own the exact match")
        view = await describe(bootstrap, group_id)
        (member,) = view.members
        assert (longer, 0) not in member.target_assignment
        assert TopicPartition(longer, 0) not in a.owned
    finally:
        await a.stop()


async def test_static_member_keeps_its_partitions_across_a_restart(
    consumer_protocol_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    bootstrap = consumer_protocol_broker.bootstrap_servers
    topic = await kafka_topic(partitions=4)
    history = HistoryRecorder()
    a = ProtocolMember("a", bootstrap, group_id, history, group_instance_id="static-a")
    b = ProtocolMember("b", bootstrap, group_id, history)
    try:
        await a.start([topic])
        await b.start([topic])
        await until(
            [a, b],
            lambda: covers([a, b], topic, 4) and bool(a.owned) and bool(b.owned),
            "a and b to split the partitions",
        )
        before = set(a.owned)
        b_before = set(b.owned)
        # Leaving with epoch -2 parks a's assignment for its instance id.
        await a.stop()
        a2 = ProtocolMember("a2", bootstrap, group_id, history, group_instance_id="static-a")
        await a2.start([topic])
        await until(
            [a2, b], lambda: a2.owned == before, "the restarted instance to get its partitions back"
        )
        assert b.owned == b_before, "the parked partitions went to another member"
        assert b.lost_calls == 0
        await broker_agrees(bootstrap, group_id, [a2, b])
        view = await describe(bootstrap, group_id)
        assert {m.instance_id for m in view.members if m.client_id == a2.client_id} == {"static-a"}
        await a2.stop()
    finally:
        await b.stop()
    check_history(history.events()).assert_clean()


def confluent_protocol_member(
    name: str, bootstrap: str, group: str, topic: str, history: HistoryRecorder
) -> tuple[Any, MemberRecorder, set[TopicPartition], Any]:
    """A confluent-kafka member speaking the consumer protocol (group.protocol=consumer)."""
    from confluent_kafka import Consumer

    rec = history.member(name)
    owned: set[TopicPartition] = set()

    def on_assign(c: Any, parts: list[Any]) -> None:
        rec.assigned((p.topic, p.partition) for p in parts)
        owned.update(TopicPartition(p.topic, p.partition) for p in parts)

    def on_revoke(c: Any, parts: list[Any]) -> None:
        rec.revoke_started((p.topic, p.partition) for p in parts)
        owned.difference_update(TopicPartition(p.topic, p.partition) for p in parts)
        rec.revoke_ended((p.topic, p.partition) for p in parts)

    def on_lost(c: Any, parts: list[Any]) -> None:
        rec.lost((p.topic, p.partition) for p in parts)
        owned.difference_update(TopicPartition(p.topic, p.partition) for p in parts)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    return consumer, rec, owned, on_revoke


async def test_interop_with_confluent_kafka_consumer_protocol_members(
    consumer_protocol_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    bootstrap = consumer_protocol_broker.bootstrap_servers
    topic = await kafka_topic(partitions=4)
    history = HistoryRecorder()
    await produce(bootstrap, topic, 4, 5, history)
    a = ProtocolMember("a", bootstrap, group_id, history)
    name = f"rdkafka-{unique_name('c')}"
    consumer, rec, owned, _ = confluent_protocol_member(name, bootstrap, group_id, topic, history)
    stop = asyncio.Event()

    def poll_loop() -> None:
        while not stop.is_set():
            msgs = consumer.consume(num_messages=100, timeout=0.2)
            by_tp: dict[tuple[str, int], list[int]] = {}
            for msg in msgs:
                if msg.error() is None:
                    by_tp.setdefault((msg.topic(), msg.partition()), []).append(msg.offset())
            for (t, p), offsets in by_tp.items():
                rec.delivered(t, p, offsets)
            if by_tp:
                done = consumer.commit(asynchronous=False)
                rec.committed(
                    [(tp.topic, tp.partition, tp.offset) for tp in done if tp.offset >= 0]
                )
        consumer.close()

    poller = asyncio.get_running_loop().run_in_executor(None, poll_loop)
    try:
        await a.start([topic])

        def split() -> bool:
            theirs = set(owned)
            return (
                bool(a.owned)
                and bool(theirs)
                and a.owned | theirs == {TopicPartition(topic, p) for p in range(4)}
                and not (a.owned & theirs)
            )

        await until([a], split, "aiogroup and librdkafka members to split the partitions")
        await until([a], lambda: all_delivered(history), "every record delivered")
    finally:
        history.add(name, "leaving")
        stop.set()
        await asyncio.wait_for(poller, WAIT)
        await a.stop()
    check_history(history.events()).assert_clean()


# --- a broker without the consumer protocol ----------------------------------------------


async def test_unsupported_broker_fails_with_a_clear_error(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """What a user of a classic-only broker (Tansu) gets: UnsupportedVersion naming the gap."""
    if kafka_broker.caps.supports_consumer_protocol:
        pytest.skip("not applicable: this broker speaks the consumer protocol")
    from aiokafka.errors import UnsupportedVersionError

    topic = await kafka_topic(partitions=1)
    consumer = GroupConsumer(
        topic,
        bootstrap_servers=kafka_broker.bootstrap_servers,
        group_id=group_id,
        group_protocol="consumer",
    )
    try:
        # start() waits for the first assignment, so the error surfaces there.
        with pytest.raises(UnsupportedVersionError) as info:
            await consumer.start()
            for _ in range(100):
                await consumer.getmany(timeout_ms=200)
        message = str(info.value)
        assert "ConsumerGroupHeartbeat" in message
        assert "group_protocol='classic'" in message
    finally:
        await consumer.stop()


async def test_online_upgrade_from_classic_by_rolling_restart(
    consumer_protocol_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """Kafka 4 converts a classic group when consumer-protocol members replace its members
    one by one (group.consumer.migration.policy); ownership stays exclusive throughout."""
    bootstrap = consumer_protocol_broker.bootstrap_servers
    topic = await kafka_topic(partitions=4)
    history = HistoryRecorder()
    await produce(bootstrap, topic, 4, 5, history)
    classic = dict(group_protocol="classic", partition_assignment_strategy=("cooperative-sticky",))
    a = ProtocolMember("a", bootstrap, group_id, history, **classic)
    b = ProtocolMember("b", bootstrap, group_id, history, **classic)
    a2 = ProtocolMember("a2", bootstrap, group_id, history)
    b2 = ProtocolMember("b2", bootstrap, group_id, history)
    try:
        await a.start([topic])
        await b.start([topic])
        await until(
            [a, b],
            lambda: covers([a, b], topic, 4) and bool(a.owned) and bool(b.owned),
            "the classic members to split the partitions",
        )
        await a.stop()
        await a2.start([topic])
        await until(
            [a2, b],
            lambda: covers([a2, b], topic, 4) and bool(a2.owned) and bool(b.owned),
            "a consumer-protocol member and a classic one to share the group",
        )
        await produce(bootstrap, topic, 4, 5, history)
        await b.stop()
        await b2.start([topic])
        await until(
            [a2, b2],
            lambda: covers([a2, b2], topic, 4) and bool(a2.owned) and bool(b2.owned),
            "two consumer-protocol members to split the partitions",
        )
        await broker_agrees(bootstrap, group_id, [a2, b2])
        await produce(bootstrap, topic, 4, 5, history)
        await until([a2, b2], lambda: all_delivered(history), "every record delivered")
        assert a2.lost_calls == 0 and b2.lost_calls == 0
    finally:
        for m in (a, b, a2, b2):
            if m._task is not None:
                await m.stop()
    check_history(history.events()).assert_clean()


async def test_unsubscribe_leaves_the_group(
    consumer_protocol_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    bootstrap = consumer_protocol_broker.bootstrap_servers
    topic = await kafka_topic(partitions=2)
    history = HistoryRecorder()
    a = ProtocolMember("a", bootstrap, group_id, history)
    b = ProtocolMember("b", bootstrap, group_id, history)
    try:
        await a.start([topic])
        await b.start([topic])
        await until(
            [a, b], lambda: bool(a.owned) and bool(b.owned), "a and b to split the partitions"
        )
        b.rec.leaving()
        b.consumer.unsubscribe()
        await until([a, b], lambda: covers([a], topic, 2) and not b.owned, "a to own both")
        await broker_agrees(bootstrap, group_id, [a])
        assert b.state == "UNSUBSCRIBED"
    finally:
        await a.stop()
        await b.stop()
    check_history(history.events()).assert_clean()


async def test_the_broker_tells_the_consumer_session_timeout(
    consumer_protocol_broker: KafkaBroker, group_id: str
) -> None:
    """The delivery gate's bound: DescribeConfigs answers the group's session timeout
    (no group config set: the broker's group.consumer.session.timeout.ms, which the
    test brokers set to 6000)."""
    client = AIOKafkaClient(bootstrap_servers=consumer_protocol_broker.bootstrap_servers)
    await client.bootstrap()
    try:
        node = client.get_random_node()
        assert node is not None
        resp = await client.send(node, session_timeout_request(group_id, node))
        assert parse_session_timeout(resp) == 6000
    finally:
        await client.close()


async def test_a_remote_assignor_is_passed_through_and_the_broker_judges_it(
    consumer_protocol_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """As Java's client does: any name reaches the broker.  One it has is used (the
    broker's view names it); one it lacks is a clear error naming the option, not a
    hang or a silent default."""
    from aiogroup import KafkaError

    bootstrap = consumer_protocol_broker.bootstrap_servers
    topic = await kafka_topic(partitions=2)
    async with GroupConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group_id,
        group_protocol="consumer",
        group_remote_assignor="range",
    ) as consumer:
        await asyncio.wait_for(_assigned(consumer, 2), WAIT)
        view = await describe(bootstrap, group_id)
        assert view.assignor_name == "range"

    consumer = GroupConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=unique_name("unknown-assignor"),
        group_protocol="consumer",
        group_remote_assignor="no-such-assignor",
    )
    try:
        with pytest.raises(KafkaError) as info:
            await asyncio.wait_for(consumer.start(), WAIT)
            await asyncio.wait_for(consumer.getmany(timeout_ms=int(WAIT * 1000)), WAIT)
        message = str(info.value)
        assert "UNSUPPORTED_ASSIGNOR" in message or "UnsupportedAssignor" in message, message
        assert "group_remote_assignor" in message, message
    finally:
        await consumer.stop()


async def _assigned(consumer: GroupConsumer, count: int) -> None:
    while len(consumer.assignment()) < count:
        await consumer.getmany(timeout_ms=200)
