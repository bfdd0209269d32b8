"""``async for`` hands out records a refill built ahead: positions, commits and pauses
must still follow what the application was given, record by record."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaProducer
from group_harness import Load, Member, exactly_once_cover, wait_until

from aiogroup import GroupConsumer, TopicPartition
from aiogroup.testing.history import HistoryRecorder, check_history
from aiogroup.testing.plugin import TopicFactory


async def produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, f"v{p}-{i}".encode(), partition=p)
            for i in range(per_partition)
            for p in range(partitions)
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def first_records(consumer: GroupConsumer, n: int) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []

    async def loop() -> None:
        async for record in consumer:
            got.append((record.partition, record.offset))
            if len(got) >= n:
                break

    await asyncio.wait_for(loop(), 30)
    return got


async def test_breaking_out_commits_only_what_was_handed_out(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 200, 1)
    tp = TopicPartition(topic, 0)
    async with GroupConsumer(
        bootstrap_servers=bootstrap_servers,
        group_id=f"g-{topic}",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    ) as consumer:
        consumer.assign([tp])
        assert await first_records(consumer, 10) == [(0, o) for o in range(10)]
        # Counted per record handed out, not per record built.
        snap = consumer.metrics()
        assert (snap.records_consumed, snap.bytes_consumed) == (10, 10 * len(b"v0-0"))
        # The refill built more than ten records; the position is the eleventh.
        assert await consumer.position(tp) == 10
        await consumer.commit()
        assert await consumer.committed(tp) == 10
        # Another read path goes on from there: nothing skipped, nothing twice.
        rest: list[int] = []
        while len(rest) < 190:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
            rest.extend(r.offset for r in batch.get(tp, []))
        assert rest == list(range(10, 200))
        # And async for again after getmany.
        consumer.seek(tp, 195)
        assert await first_records(consumer, 5) == [(0, o) for o in range(195, 200)]


async def test_a_partition_paused_mid_iteration_gets_nothing_until_resumed(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=2)
    await produce(bootstrap_servers, topic, 100, 2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with GroupConsumer(
        bootstrap_servers=bootstrap_servers, auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([tp0, tp1])
        got: list[tuple[int, int]] = []
        paused_at: tuple[int, int] | None = None

        async def loop() -> None:
            nonlocal paused_at
            async for record in consumer:
                got.append((record.partition, record.offset))
                if paused_at is None:
                    paused_tp = TopicPartition(topic, record.partition)
                    consumer.pause(paused_tp)
                    paused_at = (record.partition, record.offset + 1)
                if sum(1 for p, _ in got if p != paused_at[0]) >= 100:
                    break

        await asyncio.wait_for(loop(), 30)
        assert paused_at is not None
        paused, position = paused_at
        # After the pause, only the other partition, all of it, in order.
        assert [o for p, o in got if p == paused] == list(range(position))
        assert [o for p, o in got if p != paused] == list(range(100))
        assert await consumer.position(TopicPartition(topic, paused)) == position
        consumer.resume(TopicPartition(topic, paused))
        rest = await first_records(consumer, 100 - position)
        assert rest == [(paused, o) for o in range(position, 100)]


async def test_a_rebalance_under_async_for_hands_out_nothing_it_should_not(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    """Two cooperative members iterate while B joins A's group under steady load.

    Judged by the ownership-history checker: no record of a partition after its revoke
    began or outside an assignment, nothing lost, nothing twice past a commit, no
    backwards commit - the held records' checks under a real revocation."""
    partitions = 6
    topic = await kafka_topic(partitions=partitions)
    group = f"g-{topic}"
    history = HistoryRecorder()
    # A backlog, so each refill holds many records when the revocation comes, and a
    # step that yields to the loop, so the revoke listener runs between two steps.
    backlog = 1000
    await produce(bootstrap_servers, topic, backlog, partitions)
    for p in range(partitions):
        history.produced(topic, p, 0, backlog - 1)
    progress = asyncio.Event()
    strategy = ["cooperative-sticky"]
    a = Member(
        "a",
        bootstrap_servers,
        group,
        topic,
        strategy,
        progress,
        history=history,
        read="async-for",
        process_delay=0.0005,
    )
    b = Member(
        "b",
        bootstrap_servers,
        group,
        topic,
        strategy,
        progress,
        history=history,
        read="async-for",
        process_delay=0.0005,
    )
    async with Load(bootstrap_servers, topic, partitions, history) as load:
        await a.start()
        await wait_until(
            lambda: a.owned == set(range(partitions)) and len(a.deliveries) == partitions,
            progress,
            60,
            "A to own and deliver every partition",
        )
        await b.start()
        await wait_until(
            lambda: exactly_once_cover([a.owned, b.owned], partitions) and bool(b.seen),
            progress,
            60,
            "A and B to split the partitions and B to deliver",
        )
        await load.stop()
        expected = load.expected()
        await wait_until(
            lambda: expected <= set(a.seen) | set(b.seen),
            progress,
            60,
            "every produced record to be handed out",
        )
    await b.stop()
    await a.stop()
    assert not a.errors and not b.errors
    assert a.of("revoked") and b.of("assigned")  # a real revocation happened under iteration
    check_history(history.events()).assert_clean()
