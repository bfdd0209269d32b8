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

import pytest
from aiokafka import AIOKafkaProducer

from aiogroup import AsyncConsumerRebalanceListener, GroupConsumer, TopicPartition
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
