"""The rebalance-listener contract against a real broker (eager protocol, range assignor).

Each test checks one promise of the Java ``ConsumerRebalanceListener`` contract as
aiogroup implements it.  Faults are real: a TCP proxy stalls the connection or
rewrites the error code of a heartbeat response on the wire.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import async_timeout
import pytest
from aiokafka import AIOKafkaProducer
from fault_proxy import FaultProxy, ProxiedClient, route

from aiogroup import consumer as consumer_module
from aiogroup.consumer import GroupConsumer
from aiogroup.errors import FencedInstanceIdError
from aiogroup.structs import TopicPartition
from aiogroup.testing import KafkaBroker
from aiogroup.testing.broker import unique_name

pytestmark = pytest.mark.integration

SESSION_MS = 6000
HEARTBEAT_MS = 1000
WAIT = 60.0  # upper bound for any single group transition on the test broker


@dataclass
class Call:
    member: str
    kind: str
    partitions: frozenset[TopicPartition]
    generation: int | None


@dataclass
class Journal:
    """Listener calls of every member, in the order they happened."""

    calls: list[Call] = field(default_factory=list)
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def record(self, call: Call) -> None:
        async with self.changed:
            self.calls.append(call)
            self.changed.notify_all()

    async def wait_for(self, predicate: Callable[[list[Call]], bool], what: str) -> None:
        async def wait() -> None:
            async with self.changed:
                await self.changed.wait_for(lambda: predicate(self.calls))

        try:
            await asyncio.wait_for(wait(), WAIT)
        except asyncio.TimeoutError:
            pytest.fail(f"timed out waiting for {what}; calls so far: {self.calls}")

    def of(self, member: str, kind: str | None = None) -> list[Call]:
        return [c for c in self.calls if c.member == member and (kind is None or c.kind == kind)]


class Recorder:
    """A listener that journals every call; hooks let a test slow it down or make it fail."""

    def __init__(self, name: str, journal: Journal) -> None:
        self.name = name
        self.journal = journal
        self.consumer: GroupConsumer | None = None
        self.before_revoke: Callable[[frozenset[TopicPartition]], Any] | None = None
        self.on_assign: Callable[[frozenset[TopicPartition]], Any] | None = None

    def _generation(self) -> int | None:
        return None if self.consumer is None else self.consumer.generation

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        parts = frozenset(revoked)
        if self.before_revoke is not None:
            await self.before_revoke(parts)
        await self.journal.record(Call(self.name, "revoked", parts, self._generation()))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        parts = frozenset(assigned)
        await self.journal.record(Call(self.name, "assigned", parts, self._generation()))
        if self.on_assign is not None:
            return await self.on_assign(parts)
        return None

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        await self.journal.record(Call(self.name, "lost", frozenset(lost), self._generation()))


@pytest.fixture
def journal() -> Journal:
    return Journal()


@pytest.fixture
def proxied(monkeypatch: pytest.MonkeyPatch) -> None:
    """Consumers built in this test create ProxiedClient (a no-op unless routed)."""
    monkeypatch.setattr(consumer_module, "AIOKafkaClient", ProxiedClient)


@pytest.fixture
def member_factory(
    bootstrap_servers: str, group_id: str, journal: Journal
) -> Iterator[Callable[..., Any]]:
    started: list[GroupConsumer] = []

    @asynccontextmanager
    async def member(
        name: str,
        topic: str,
        proxy: FaultProxy | None = None,
        on_assign: Callable[[Recorder, frozenset[TopicPartition]], Any] | None = None,
        **options: Any,
    ) -> AsyncIterator[tuple[GroupConsumer, Recorder]]:
        recorder = Recorder(name, journal)
        if on_assign is not None:  # before start(): start() returns after the first assignment
            recorder.on_assign = functools.partial(on_assign, recorder)
        opts: dict[str, Any] = dict(
            bootstrap_servers=bootstrap_servers,
            group_id=group_id,
            client_id=f"{name}-{unique_name('client')}",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        opts.update(options)
        if proxy is not None:
            opts["bootstrap_servers"] = f"127.0.0.1:{proxy.port}"
        consumer = GroupConsumer(topic, listener=recorder, **opts)
        recorder.consumer = consumer
        started.append(consumer)
        if proxy is not None:
            with route(opts["client_id"], proxy):
                await consumer.start()
        else:
            await consumer.start()
        try:
            yield consumer, recorder
        finally:
            await consumer.stop()

    yield member


@asynccontextmanager
async def fault_proxy(bootstrap_servers: str) -> AsyncIterator[FaultProxy]:
    host, port = bootstrap_servers.split(",")[0].rsplit(":", 1)
    proxy = await FaultProxy(host, int(port)).start()
    try:
        yield proxy
    finally:
        proxy.resume()
        await proxy.close()


async def produce(bootstrap_servers: str, topic: str, partitions: int, per_partition: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, f"{p}-{i}".encode(), partition=p)
            for p in range(partitions)
            for i in range(per_partition)
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def assigned_to(journal: Journal, member: str) -> int:
    return len(journal.of(member, "assigned"))


# -- ordering ---------------------------------------------------------------------------------


async def test_every_revoke_completes_before_any_assign_of_the_next_generation(
    kafka_topic: Any, member_factory: Any, journal: Journal
) -> None:
    topic = await kafka_topic(partitions=2)
    async with member_factory("a", topic) as (_, rec_a):

        async def slow_revoke(parts: frozenset[TopicPartition]) -> None:
            await asyncio.sleep(1.0)  # a broken ordering would let b's assign overtake this

        rec_a.before_revoke = slow_revoke
        await journal.wait_for(lambda c: assigned_to(journal, "a") == 1, "a's first assign")
        async with member_factory("b", topic):
            await journal.wait_for(
                lambda c: assigned_to(journal, "a") == 2 and assigned_to(journal, "b") == 1,
                "the second generation",
            )
            calls = journal.calls
            revoke = calls.index(journal.of("a", "revoked")[0])
            second_assigns = [
                calls.index(journal.of("a", "assigned")[1]),
                calls.index(journal.of("b", "assigned")[0]),
            ]
            assert revoke < min(second_assigns)
            assert (
                journal.of("a", "revoked")[0].partitions
                == journal.of("a", "assigned")[0].partitions
            )
            a2, b1 = journal.of("a", "assigned")[1], journal.of("b", "assigned")[0]
            assert a2.partitions | b1.partitions == {
                TopicPartition(topic, 0),
                TopicPartition(topic, 1),
            }
            assert not a2.partitions & b1.partitions


async def test_assigned_exactly_once_per_rebalance_even_when_empty(
    kafka_topic: Any, member_factory: Any, journal: Journal
) -> None:
    topic = await kafka_topic(partitions=2)
    async with (
        member_factory("a", topic) as (ca, _),
        member_factory("b", topic) as (cb, _),
        member_factory("c", topic) as (cc, _),
    ):
        consumers = {"a": ca, "b": cb, "c": cc}

        def settled(_: list[Call]) -> bool:
            gens = {c.generation for c in consumers.values()}
            if len(gens) != 1 or None in gens:
                return False
            latest = [journal.of(n, "assigned") for n in consumers]
            if not all(latest) or {calls[-1].generation for calls in latest} != gens:
                return False
            return sum(len(calls[-1].partitions) for calls in latest) == 2

        await journal.wait_for(settled, "one generation with all three members")
        for name in consumers:
            gens = [c.generation for c in journal.of(name, "assigned")]
            assert len(gens) == len(set(gens)), f"{name} assigned twice in a generation: {gens}"
        final = {name: journal.of(name, "assigned")[-1].partitions for name in consumers}
        assert sorted(len(p) for p in final.values()) == [0, 1, 1]
        assert not any(c.kind == "lost" for c in journal.calls)


# -- lost, not revoked ---------------------------------------------------------------------


async def test_session_lapse_calls_lost_not_revoked(
    bootstrap_servers: str, kafka_topic: Any, member_factory: Any, journal: Journal, proxied: None
) -> None:
    """No heartbeat answer for a session: the partitions are lost (the broker may hand
    them on from now), then the member rejoins.  It rejoins under its old member id
    (Java's rule); whether the broker still knows that id when the network returns is
    a race with the broker's own session, so the id is the unit tests' to pin."""
    topic = await kafka_topic(partitions=1)
    async with fault_proxy(bootstrap_servers) as proxy:
        async with member_factory("a", topic, proxy=proxy):
            await journal.wait_for(lambda c: assigned_to(journal, "a") == 1, "first assign")
            proxy.pause()  # the network stalls; no heartbeat gets through
            await journal.wait_for(lambda c: bool(journal.of("a", "lost")), "lost")
            assert journal.of("a", "lost")[0].partitions == {TopicPartition(topic, 0)}
            assert journal.of("a", "revoked") == []
            proxy.resume()
            await journal.wait_for(lambda c: assigned_to(journal, "a") == 2, "rejoined")
            assert journal.of("a", "assigned")[1].partitions == {TopicPartition(topic, 0)}
            assert journal.of("a", "revoked") == []


async def test_stop_returns_when_no_coordinator_is_ever_found_again(
    bootstrap_servers: str, kafka_topic: Any, member_factory: Any, journal: Journal, proxied: None
) -> None:
    """After a lapse the member waits for a coordinator indefinitely, as Java's does;
    stop() must still return (bounded by request_timeout_ms), the network never back."""
    topic = await kafka_topic(partitions=1)
    async with fault_proxy(bootstrap_servers) as proxy:
        async with member_factory("a", topic, proxy=proxy, request_timeout_ms=5_000) as (
            consumer,
            _,
        ):
            await journal.wait_for(lambda c: assigned_to(journal, "a") == 1, "first assign")
            proxy.pause()  # for good: no broker answers this member again
            await journal.wait_for(lambda c: bool(journal.of("a", "lost")), "lost")
            # A hang check, not a timing assertion: 5 s request timeout, 60 s cap.
            await asyncio.wait_for(consumer.stop(), 60)
            assert journal.of("a", "revoked") == []


@pytest.mark.parametrize("code", [25, 22], ids=["UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION"])
async def test_heartbeat_generation_errors_call_lost_and_rejoin(
    code: int,
    bootstrap_servers: str,
    kafka_topic: Any,
    member_factory: Any,
    journal: Journal,
    proxied: None,
) -> None:
    topic = await kafka_topic(partitions=1)
    async with fault_proxy(bootstrap_servers) as proxy:
        async with member_factory("a", topic, proxy=proxy):
            await journal.wait_for(lambda c: assigned_to(journal, "a") == 1, "first assign")
            proxy.inject_heartbeat_error(code)
            await journal.wait_for(lambda c: bool(journal.of("a", "lost")), "lost")
            assert proxy.injected == 1
            assert journal.of("a", "lost")[0].partitions == {TopicPartition(topic, 0)}
            assert journal.of("a", "revoked") == []
            await journal.wait_for(lambda c: assigned_to(journal, "a") == 2, "rejoined")
            assert journal.of("a", "assigned")[1].partitions == {TopicPartition(topic, 0)}


async def test_fenced_instance_calls_lost_and_raises_from_getmany(
    bootstrap_servers: str, kafka_topic: Any, member_factory: Any, journal: Journal, proxied: None
) -> None:
    topic = await kafka_topic(partitions=1)
    async with fault_proxy(bootstrap_servers) as proxy:
        async with member_factory(
            "a", topic, proxy=proxy, group_instance_id=unique_name("instance")
        ) as (consumer, _):
            await journal.wait_for(lambda c: assigned_to(journal, "a") == 1, "first assign")
            proxy.inject_heartbeat_error(82)
            await journal.wait_for(lambda c: bool(journal.of("a", "lost")), "lost")
            assert journal.of("a", "revoked") == []
            with pytest.raises(FencedInstanceIdError):
                await consumer.getmany(timeout_ms=100)


# -- revoked on the way out ------------------------------------------------------------------------


async def test_stop_and_unsubscribe_call_revoked(
    kafka_topic: Any, member_factory: Any, journal: Journal
) -> None:
    topic = await kafka_topic(partitions=2)
    everything = {TopicPartition(topic, 0), TopicPartition(topic, 1)}
    async with member_factory("a", topic) as (consumer, rec):
        await journal.wait_for(lambda c: assigned_to(journal, "a") == 1, "first assign")
        consumer.unsubscribe()
        await journal.wait_for(lambda c: bool(journal.of("a", "revoked")), "revoke")
        assert journal.of("a", "revoked")[0].partitions == everything
        consumer.subscribe([topic], listener=rec)
        await journal.wait_for(lambda c: assigned_to(journal, "a") == 2, "re-subscribed")
    # leaving the block stopped the consumer
    revokes = journal.of("a", "revoked")
    assert len(revokes) == 2 and revokes[-1].partitions == everything
    assert journal.of("a", "lost") == []


# -- listeners run while the member stays alive -------------------------------------------


async def test_slow_revoke_does_not_get_the_member_evicted(
    kafka_topic: Any, member_factory: Any, journal: Journal, kafka_broker: KafkaBroker
) -> None:
    """A revoke listener sleeping 5x the session timeout while another member joins.

    The revocation is the one a joining member causes, so the coordinator answers
    this member's heartbeats REBALANCE_IN_PROGRESS for the whole callback and waits
    for it to rejoin: the member must keep its identity, must not be told "lost", and
    the newcomer must get nothing before the revoke returned.  (The full scenario,
    judged from the broker's side, is tests/integration/test_slow_listener.py.)
    """
    topic = await kafka_topic(partitions=2)
    options = {"max_poll_interval_ms": 120_000}
    async with member_factory("a", topic, **options) as (consumer, rec):
        await journal.wait_for(lambda c: assigned_to(journal, "a") == 1, "first assign")
        member_id, generation = consumer.member_id, consumer.generation
        at_end: list[tuple[str | None, int | None]] = []

        async def slow_revoke(parts: frozenset[TopicPartition]) -> None:
            await asyncio.sleep(5 * SESSION_MS / 1000)
            at_end.append((consumer.member_id, consumer.generation))

        rec.before_revoke = slow_revoke
        async with member_factory("b", topic, **options):
            await journal.wait_for(lambda c: bool(journal.of("a", "revoked")), "slow revoke")
            await journal.wait_for(
                lambda c: any(call.partitions for call in journal.of("b", "assigned")),
                "b's first partitions",
            )
            assert at_end == [(member_id, generation)]
            calls = journal.calls
            revoked_at = calls.index(journal.of("a", "revoked")[0])
            b_first = next(call for call in journal.of("b", "assigned") if call.partitions)
            assert calls.index(b_first) > revoked_at
            assert consumer.member_id == member_id  # rejoined under the same id
        assert journal.of("a", "lost") == []


async def test_slow_assigned_listener_does_not_get_the_member_evicted(
    kafka_topic: Any, member_factory: Any, journal: Journal
) -> None:
    topic = await kafka_topic(partitions=2)
    identity: list[tuple[str | None, int | None]] = []

    async def slow_assign(rec: Recorder, parts: frozenset[TopicPartition]) -> None:
        consumer = rec.consumer
        assert consumer is not None
        identity.append((consumer.member_id, consumer.generation))
        await asyncio.sleep(2 * SESSION_MS / 1000)
        identity.append((consumer.member_id, consumer.generation))
        await journal.record(Call("a", "assign-finished", parts, consumer.generation))

    async with member_factory("a", topic, on_assign=slow_assign) as (_, rec):
        await journal.wait_for(lambda c: bool(journal.of("a", "assign-finished")), "slow assign")
        assert identity[0] == identity[1] and identity[0][1] is not None
        assert identity[0][1] >= 0
        rec.on_assign = None
        async with member_factory("b", topic):
            # a normal rebalance follows: revoked (not lost) by the same member
            await journal.wait_for(lambda c: assigned_to(journal, "b") == 1, "b joins")
        assert journal.of("a", "lost") == []
        assert journal.of("a", "revoked")[0].generation == identity[0][1]


async def test_listener_may_await_commit_position_and_seek(
    bootstrap_servers: str, group_id: str, kafka_topic: Any, member_factory: Any, journal: Journal
) -> None:
    topic = await kafka_topic(partitions=1)
    tp = TopicPartition(topic, 0)
    await produce(bootstrap_servers, topic, 1, 10)
    # a committed offset for the group, so the position comes from the coordinator
    async with GroupConsumer(bootstrap_servers=bootstrap_servers, group_id=group_id) as setup:
        setup.assign([tp])
        await setup.commit({tp: 2})
    seen: dict[str, int | None] = {}

    async def on_assign(rec: Recorder, parts: frozenset[TopicPartition]) -> None:
        consumer = rec.consumer
        assert consumer is not None
        if parts and not seen:  # the first assignment only
            seen["position"] = await consumer.position(tp)
            consumer.seek(tp, 4)
            await consumer.commit({tp: 4})
            seen["committed"] = await consumer.committed(tp)
            await journal.record(Call("a", "assign-finished", parts, consumer.generation))

    async with member_factory("a", topic, on_assign=on_assign) as (consumer, rec):

        async def before_revoke(parts: frozenset[TopicPartition]) -> None:
            await consumer.commit({tp: 7})

        rec.before_revoke = before_revoke
        await journal.wait_for(lambda c: assigned_to(journal, "a") == 1, "assign")
        records = await consumer.getmany(timeout_ms=WAIT * 1000)
        assert records[tp][0].offset == 4
        await journal.wait_for(lambda c: bool(journal.of("a", "assign-finished")), "listener")
        assert seen == {"position": 2, "committed": 4}
        async with member_factory("b", topic) as (consumer_b, _):
            await journal.wait_for(lambda c: assigned_to(journal, "b") == 1, "b assigned")
            assert await consumer_b.committed(tp) == 7  # committed from on_partitions_revoked


async def test_listener_exception_is_raised_from_getmany_and_the_rebalance_completes(
    kafka_topic: Any, member_factory: Any, journal: Journal
) -> None:
    topic = await kafka_topic(partitions=1)

    class Boom(Exception):
        pass

    async def on_assign(rec: Recorder, parts: frozenset[TopicPartition]) -> None:
        raise Boom("from on_partitions_assigned")

    async with member_factory("a", topic, on_assign=on_assign) as (consumer, _):
        await journal.wait_for(lambda c: assigned_to(journal, "a") == 1, "assign")
        with pytest.raises(Boom):
            async with async_timeout.timeout(WAIT):
                while True:  # the error is raised by the first poll after the listener ended
                    await consumer.getmany(timeout_ms=100)
        assert consumer.assignment() == {TopicPartition(topic, 0)}
        await consumer.getmany(timeout_ms=100)  # raised once, then consumption goes on


async def test_on_partitions_assigned_may_return_start_offsets(
    bootstrap_servers: str, kafka_topic: Any, member_factory: Any, journal: Journal
) -> None:
    topic = await kafka_topic(partitions=2)
    await produce(bootstrap_servers, topic, 2, 10)
    starts = {TopicPartition(topic, 0): 3, TopicPartition(topic, 1): 8}

    async def on_assign(
        rec: Recorder, parts: frozenset[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return {tp: starts[tp] for tp in parts}

    async with member_factory("a", topic, on_assign=on_assign) as (consumer, _):
        first: dict[TopicPartition, int] = {}
        async with async_timeout.timeout(WAIT):
            while len(first) < 2:
                for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                    first.setdefault(tp, records[0].offset)
        assert first == starts
