"""position() must answer without the application polling first.

Resets are performed by the fetcher, so a reset asked for while the fetcher sleeps
(its read-ahead budget full, or the partition waiting for its committed offset)
must wake it; otherwise position() waits for a getmany() that may never come.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import ConsumerStoppedError, IllegalStateError

from aiogroup import GroupConsumer, TopicPartition
from aiogroup.testing.broker import KafkaBroker
from aiogroup.testing.plugin import TopicFactory

WAIT_S = 30


async def produce(bootstrap: str, topic: str, count: int) -> int:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        futures = [await producer.send(topic, b"x" * 100, partition=0) for _ in range(count)]
        metas = await asyncio.gather(*futures)
        return max(m.offset for m in metas) + 1
    finally:
        await producer.stop()


async def test_position_of_a_new_group_member_before_any_poll(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    """No committed offset: the commit-refresh task asks for a reset; position() gets it."""
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 50)
    tp = TopicPartition(topic, 0)
    assigned = asyncio.Event()

    class Listener:
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            pass

        async def on_partitions_assigned(self, added: set[TopicPartition]) -> None:
            if tp in added:
                assigned.set()

    async with GroupConsumer(
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    ) as consumer:
        consumer.subscribe([topic], listener=Listener())
        await asyncio.wait_for(assigned.wait(), WAIT_S)
        assert await consumer.position(tp, timeout_ms=WAIT_S * 1000) == 0


async def test_seek_to_beginning_with_a_full_read_ahead(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    """The fetcher has filled its budget and sleeps; the reset must still happen."""
    topic = await kafka_topic(partitions=1)
    end = await produce(bootstrap_servers, topic, 3000)
    tp = TopicPartition(topic, 0)
    async with GroupConsumer(
        bootstrap_servers=bootstrap_servers,
        auto_offset_reset="earliest",
        # Smallest budget the configuration allows: one partition fetch fills it.
        max_partition_fetch_bytes=16 * 1024,
        fetch_max_bytes=16 * 1024,
        max_buffered_bytes=16 * 1024,
    ) as consumer:
        consumer.assign([tp])
        first = await asyncio.wait_for(
            consumer.getmany(tp, timeout_ms=5000, max_records=10), WAIT_S
        )
        assert [r.offset for r in first[tp]] == list(range(10))
        position = await consumer.position(tp, timeout_ms=WAIT_S * 1000)
        assert position == 10 < end
        await consumer.seek_to_beginning(tp)
        assert await consumer.position(tp, timeout_ms=WAIT_S * 1000) == 0
        again = await asyncio.wait_for(consumer.getmany(tp, timeout_ms=5000, max_records=5), WAIT_S)
        assert [r.offset for r in again[tp]] == list(range(5))


# -- position() awaited across a rebalance -------------------------------------------------


class PositionsAcrossRevoke:
    """A revoke listener that starts a ``position()`` of each revoked partition whose
    position is unknown and cannot become known by itself (``auto_offset_reset="none"``,
    nothing committed, never sought): those calls are pending when the rebalance
    replaces or drops the partitions' state.  (A position that *can* be known is
    answered inside the callback: see the last test.)"""

    def __init__(self, consumer: GroupConsumer) -> None:
        self.consumer = consumer
        self.assigned = asyncio.Event()
        self.pending: dict[TopicPartition, asyncio.Task[int]] = {}

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if self.pending or not revoked:
            return
        for tp in sorted(revoked):
            self.pending[tp] = asyncio.create_task(
                self.consumer.position(tp, timeout_ms=WAIT_S * 1000)
            )
        await asyncio.sleep(0.1)  # the calls are waiting before the listener returns
        assert not any(t.done() for t in self.pending.values())

    async def on_partitions_assigned(self, added: set[TopicPartition]) -> None:
        self.assigned.set()


def member(
    bootstrap: str, group: str, name: str, strategy: str, reset: str = "earliest"
) -> GroupConsumer:
    return GroupConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=name,  # member ids start with it: the range assignor orders by them
        auto_offset_reset=reset,
        enable_auto_commit=False,
        partition_assignment_strategy=(strategy,),
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )


async def test_position_across_an_eager_rebalance_follows_the_partition_or_names_it(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    """Eager (range): member "a" owns both partitions; "b" joins; both are revoked
    while position() waits on them.  Partition 0 comes back to "a": the pending call
    answers from its new state (once a seek gives it a position).  Partition 1 goes
    to "b": the call raises IllegalStateError naming it, instead of waiting on a
    state nobody resolves."""
    topic = await kafka_topic(partitions=2)
    await produce(bootstrap_servers, topic, 20)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    a = member(bootstrap_servers, group_id, "a-member", "range", reset="none")
    b = member(bootstrap_servers, group_id, "b-member", "range")
    listener = PositionsAcrossRevoke(a)
    a.subscribe([topic], listener=listener)
    async with a:
        assert a.assignment() == {tp0, tp1}
        listener.assigned.clear()
        b.subscribe([topic])
        async with b:
            # b's start returns with b's share; a's own SyncGroup answer (the same
            # generation) may still be on its way: wait for a's assignment callback.
            await asyncio.wait_for(listener.assigned.wait(), WAIT_S)
            assert b.assignment() == {tp1}
            assert a.assignment() == {tp0}
            assert set(listener.pending) == {tp0, tp1}
            # Nothing was consumed or committed and there is no reset: partition 0's
            # new state has no position until the application gives it one.
            assert not listener.pending[tp0].done()
            a.seek(tp0, 7)
            assert await asyncio.wait_for(listener.pending[tp0], WAIT_S) == 7
            with pytest.raises(IllegalStateError, match=r"partition=1\).* was revoked"):
                await asyncio.wait_for(listener.pending[tp1], WAIT_S)


async def test_position_of_a_partition_revoked_cooperatively_raises_naming_it(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    """Cooperative: only the partition that moves is revoked; the pending position()
    of it raises IllegalStateError naming it as soon as it is dropped."""
    topic = await kafka_topic(partitions=2)
    a = member(bootstrap_servers, group_id, "a-member", "cooperative-sticky", reset="none")
    b = member(bootstrap_servers, group_id, "b-member", "cooperative-sticky")
    listener = PositionsAcrossRevoke(a)
    a.subscribe([topic], listener=listener)
    given = asyncio.Event()

    class Given:
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            pass

        async def on_partitions_assigned(self, added: set[TopicPartition]) -> None:
            if added:
                given.set()

    async with a:
        b.subscribe([topic], listener=Given())
        async with b:
            # The moved partition reaches "b" in the second round; "a" revoked it in the first.
            await asyncio.wait_for(given.wait(), WAIT_S)
            assert len(listener.pending) == 1
            (moved,) = listener.pending
            with pytest.raises(
                IllegalStateError, match=rf"partition={moved.partition}\).* revoked"
            ):
                await asyncio.wait_for(listener.pending[moved], WAIT_S)
            assert moved in b.assignment() and moved not in a.assignment()


async def test_position_pending_when_the_member_stops_ends_with_consumer_stopped(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    """stop() revokes everything while position() waits: the call ends (no hang)."""
    topic = await kafka_topic(partitions=1)
    tp = TopicPartition(topic, 0)
    a = member(bootstrap_servers, group_id, "a-member", "range", reset="none")
    listener = PositionsAcrossRevoke(a)
    a.subscribe([topic], listener=listener)
    async with a:
        assert a.assignment() == {tp}
    with pytest.raises((ConsumerStoppedError, IllegalStateError)):
        await asyncio.wait_for(listener.pending[tp], WAIT_S)


async def test_position_inside_the_revoke_listener_of_a_partition_just_reset(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    """The partition is still assigned while its revoke callback runs (Java's
    position() answers inside onPartitionsRevoked): the reset a seek_to_beginning asks
    for there is performed, and position() answers at once, not after the callback
    (which it would have waited for: a deadlock ended only by the rebalance timeout)."""
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 10)
    tp = TopicPartition(topic, 0)
    a = member(bootstrap_servers, group_id, "a-member", "range")
    seen: list[int | BaseException] = []

    class CommitsPositionOnRevoke:
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            if tp in revoked:
                await a.seek_to_beginning(tp)
                try:
                    seen.append(await a.position(tp, timeout_ms=5000))
                except Exception as exc:  # kept for the assertion below
                    seen.append(exc)

        async def on_partitions_assigned(self, added: set[TopicPartition]) -> None:
            pass

    a.subscribe([topic], listener=CommitsPositionOnRevoke())
    async with a:
        assert a.assignment() == {tp}
    assert seen == [0]


@pytest.fixture(params=["classic", "consumer"])
def group_protocol(request: pytest.FixtureRequest, kafka_broker: KafkaBroker) -> str:
    if request.param == "consumer" and not kafka_broker.caps.supports_consumer_protocol:
        pytest.skip("not applicable: this broker has no consumer group protocol (KIP-848)")
    return str(request.param)


#: Each awaitable inside the callback gets this long; none needs more than a round trip.
CALL_S = 10.0


async def test_public_awaitables_answer_inside_the_revoke_listener(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str, group_protocol: str
) -> None:
    """No public awaitable deadlocks inside a listener: every one called from
    on_partitions_revoked (at stop(), the partition still assigned) answers - and
    answers right - well within its bound."""
    topic = await kafka_topic(partitions=1)
    # One record a batch: Tansu's ListOffsets(latest) is the log end only then
    # (caps.list_offsets_latest_is_log_end).
    end = 0
    for _ in range(5):
        end = await produce(bootstrap_servers, topic, 1)
    tp = TopicPartition(topic, 0)
    options: dict[str, Any] = dict(
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        group_protocol=group_protocol,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    if group_protocol == "classic":
        options.update(session_timeout_ms=6000, heartbeat_interval_ms=1000)
    a = GroupConsumer(**options)
    answers: dict[str, object] = {}

    class CallsEverything:
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            if tp not in revoked:
                return

            async def call(name: str, awaitable: Awaitable[object]) -> None:
                try:
                    answers[name] = await asyncio.wait_for(awaitable, CALL_S)
                except asyncio.TimeoutError:
                    answers[name] = f"hung for {CALL_S}s"
                except Exception as exc:  # kept for the assertion below
                    answers[name] = exc

            await call("seek_to_end", a.seek_to_end(tp))
            await call("position at the end", a.position(tp))
            await call("seek_to_beginning", a.seek_to_beginning(tp))
            await call("position at the beginning", a.position(tp))
            await call("commit", a.commit({tp: 3}))  # < end: a real offset
            await call("committed", a.committed(tp))
            await call("seek_to_committed", a.seek_to_committed(tp))
            await call("position at the committed offset", a.position(tp))
            await call("beginning_offsets", a.beginning_offsets([tp]))
            await call("end_offsets", a.end_offsets([tp]))
            await call("getmany", a.getmany(timeout_ms=200))

        async def on_partitions_assigned(self, added: set[TopicPartition]) -> None:
            pass

    a.subscribe([topic], listener=CallsEverything())
    async with a:
        assert a.assignment() == {tp}
    assert answers == {
        "seek_to_end": True,  # as aiokafka
        "position at the end": end,
        "seek_to_beginning": True,
        "position at the beginning": 0,
        "commit": None,
        "committed": 3,
        "seek_to_committed": {tp: 3},
        "position at the committed offset": 3,
        "beginning_offsets": {tp: 0},
        "end_offsets": {tp: end},
        # Nothing of a partition being revoked is handed out.
        "getmany": {},
    }
