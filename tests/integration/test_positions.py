"""position() must answer without the application polling first.

Resets are performed by the fetcher, so a reset asked for while the fetcher sleeps
(its read-ahead budget full, or the partition waiting for its committed offset)
must wake it; otherwise position() waits for a getmany() that may never come.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import ConsumerStoppedError, IllegalStateError

from aiogroup import GroupConsumer, TopicPartition
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
    """A revoke listener that makes the positions unknown (``seek_to_beginning``, which
    the fetcher does not perform for a partition being revoked) and starts a
    ``position()`` of each revoked partition: those calls are pending when the
    rebalance replaces or drops the partitions' state."""

    def __init__(self, consumer: GroupConsumer) -> None:
        self.consumer = consumer
        self.assigned = asyncio.Event()
        self.pending: dict[TopicPartition, asyncio.Task[int]] = {}

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        if self.pending or not revoked:
            return
        await self.consumer.seek_to_beginning(*revoked)
        for tp in sorted(revoked):
            self.pending[tp] = asyncio.create_task(
                self.consumer.position(tp, timeout_ms=WAIT_S * 1000)
            )
        await asyncio.sleep(0.1)  # the calls are waiting before the listener returns
        assert not any(t.done() for t in self.pending.values())

    async def on_partitions_assigned(self, added: set[TopicPartition]) -> None:
        self.assigned.set()


def member(bootstrap: str, group: str, name: str, strategy: str) -> GroupConsumer:
    return GroupConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=name,  # member ids start with it: the range assignor orders by them
        auto_offset_reset="earliest",
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
    answers from its new state.  Partition 1 goes to "b": the call raises
    IllegalStateError naming it, instead of waiting on a state nobody resolves."""
    topic = await kafka_topic(partitions=2)
    await produce(bootstrap_servers, topic, 20)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    a = member(bootstrap_servers, group_id, "a-member", "range")
    b = member(bootstrap_servers, group_id, "b-member", "range")
    listener = PositionsAcrossRevoke(a)
    a.subscribe([topic], listener=listener)
    async with a:
        assert a.assignment() == {tp0, tp1}
        b.subscribe([topic])
        async with b:
            assert b.assignment() == {tp1}
            assert a.assignment() == {tp0}
            assert set(listener.pending) == {tp0, tp1}
            # Nothing was consumed or committed: the new state of partition 0 resets
            # to the earliest offset.
            assert await asyncio.wait_for(listener.pending[tp0], WAIT_S) == 0
            with pytest.raises(IllegalStateError, match=r"partition=1\).* was revoked"):
                await asyncio.wait_for(listener.pending[tp1], WAIT_S)


async def test_position_of_a_partition_revoked_cooperatively_raises_naming_it(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    """Cooperative: only the partition that moves is revoked; the pending position()
    of it raises IllegalStateError naming it as soon as it is dropped."""
    topic = await kafka_topic(partitions=2)
    a = member(bootstrap_servers, group_id, "a-member", "cooperative-sticky")
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
    a = member(bootstrap_servers, group_id, "a-member", "range")
    listener = PositionsAcrossRevoke(a)
    a.subscribe([topic], listener=listener)
    async with a:
        assert a.assignment() == {tp}
    with pytest.raises((ConsumerStoppedError, IllegalStateError)):
        await asyncio.wait_for(listener.pending[tp], WAIT_S)


@pytest.mark.xfail(
    reason=(
        "position() of a partition being revoked whose position is unknown, awaited inside "
        "on_partitions_revoked, never resolves: the offset reset and the committed-offset "
        "lookup skip revoking partitions (SubscriptionState.needing_reset/needing_committed), "
        "so only the rebalance timeout ends the listener; Java looks the position up (the "
        "partition is still assigned during the callback). Dropping that filter resolves "
        "this case but also resolves a position() awaited from before the rebalance with a "
        "stale value, which the tests above require to fail naming the partition; the fix "
        "needs a rule for seeks made inside the callback"
    ),
    strict=True,
)
async def test_position_inside_the_revoke_listener_of_a_partition_just_reset(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
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
