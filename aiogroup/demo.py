"""``make demo``: three group members, live rebalances, a crash and the takeover.

Starts the embedded broker, produces a steady stream of events into a 6-partition
topic, and runs three ``GroupConsumer`` members with async listeners.  It prints
every listener call as it happens and a table of who holds which partition, then
kills one member without ``stop()`` (as a crash would), shows the survivors take
its partitions once its session expires, stops everyone cleanly and prints the
group's committed offsets next to the log end.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer

from aiogroup import AsyncConsumerRebalanceListener, GroupConsumer, TopicPartition
from aiogroup._timeouts import wait_for
from aiogroup.testing import KafkaBroker, unique_name

PARTITIONS = 6
SESSION_TIMEOUT_MS = 6000
T0 = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - T0:5.1f}s] {message}", flush=True)


def fmt(partitions: set[TopicPartition]) -> str:
    return "{" + ", ".join(str(tp.partition) for tp in sorted(partitions)) + "}"


@dataclass
class Member:
    name: str
    consumer: GroupConsumer
    owned: set[TopicPartition] = field(default_factory=set)
    consumed: int = 0
    task: asyncio.Task[None] | None = None


class ShowRebalances(AsyncConsumerRebalanceListener):
    """Prints each callback; commits on revoke, as a careful application would."""

    def __init__(self, member: Member) -> None:
        self.member = member

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        say(f"{self.member.name}: revoked  {fmt(revoked)}")
        await self.member.consumer.commit()
        self.member.owned -= revoked

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.member.owned |= assigned
        say(f"{self.member.name}: assigned {fmt(assigned)} -> owns {fmt(self.member.owned)}")

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        say(f"{self.member.name}: LOST     {fmt(lost)}")
        self.member.owned -= lost


async def consume(member: Member) -> None:
    while True:
        batches = await member.consumer.getmany(timeout_ms=200)
        member.consumed += sum(len(records) for records in batches.values())


async def produce(bootstrap: str, topic: str, stop: asyncio.Event) -> Counter[int]:
    produced: Counter[int] = Counter()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        i = 0
        while not stop.is_set():
            futures = []
            for _ in range(60):
                partition = i % PARTITIONS
                futures.append(
                    await producer.send(topic, f"event-{i}".encode(), partition=partition)
                )
                produced[partition] += 1
                i += 1
            await asyncio.gather(*futures)
            with contextlib.suppress(asyncio.TimeoutError):
                await wait_for(stop.wait(), 0.1)
    finally:
        await producer.stop()
    return produced


def table(members: list[Member]) -> None:
    print("   member     partitions            records", flush=True)
    for m in members:
        state = "crashed" if m.task is not None and m.task.done() else ""
        print(f"   {m.name:<10} {fmt(m.owned):<21} {m.consumed:>7} {state}", flush=True)


async def wait_until(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        await asyncio.sleep(0.2)
    return False


async def main() -> int:
    async with KafkaBroker() as broker:
        topic = await broker.create_topic(unique_name("demo-events"), PARTITIONS)
        group = unique_name("demo-group")
        say(f"{broker.mode} broker at {broker.bootstrap_servers}; topic {topic}, group {group}")
        stop_producing = asyncio.Event()
        producer_task = asyncio.create_task(
            produce(broker.bootstrap_servers, topic, stop_producing)
        )

        members: list[Member] = []
        for name in ("alpha", "bravo", "charlie"):
            consumer = GroupConsumer(
                bootstrap_servers=broker.bootstrap_servers,
                group_id=group,
                auto_offset_reset="earliest",
                session_timeout_ms=SESSION_TIMEOUT_MS,
                heartbeat_interval_ms=1000,
                auto_commit_interval_ms=1000,
            )
            member = Member(name, consumer)
            await consumer.start()
            consumer.subscribe([topic], listener=ShowRebalances(member))
            member.task = asyncio.create_task(consume(member))
            members.append(member)
            say(f"{name} started")

        def balanced(live: list[Member]) -> bool:
            owned = [tp for m in live for tp in m.owned]
            return (
                len(owned) == PARTITIONS
                and len(set(owned)) == PARTITIONS
                and all(m.owned for m in live)
            )

        await wait_until(lambda: balanced(members), 30)
        await asyncio.sleep(2)
        say("group is stable:")
        table(members)

        victim = members[2]
        say(f"killing {victim.name} without stop() - the broker notices when its session expires")
        assert victim.task is not None
        victim.task.cancel()
        # A crash: the process is gone, so neither LeaveGroup nor heartbeats are sent.
        await victim.consumer.abort()
        survivors = members[:2]
        took_over = await wait_until(lambda: balanced(survivors), 30)
        say("takeover complete:" if took_over else "takeover did not complete in 30 s:")
        table(members)

        stop_producing.set()
        produced = await producer_task

        def drained() -> bool:
            return all(m.consumer.lag(tp) == 0 for m in survivors for tp in m.consumer.assignment())

        await wait_until(drained, 15)
        for m in survivors:
            assert m.task is not None
            m.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await m.task
            await m.consumer.stop()
            say(f"{m.name} stopped cleanly (revoked, committed, left the group)")

        checker = GroupConsumer(bootstrap_servers=broker.bootstrap_servers, group_id=group)
        await checker.start()
        try:
            print("   partition  committed  log-end", flush=True)
            ok = True
            for p in range(PARTITIONS):
                committed = await checker.committed(TopicPartition(topic, p))
                print(f"   {p:>9}  {committed!s:>9}  {produced[p]:>7}", flush=True)
                ok = ok and committed == produced[p]
        finally:
            await checker.stop()
        say(f"{sum(produced.values())} events produced; every one committed: {ok}")
        return 0 if took_over else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
