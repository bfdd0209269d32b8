"""``make demo``: what a cooperative, awaited-listener group member does that others do not.

Starts the embedded broker, produces a steady stream into a 6-partition topic and
runs ``GroupConsumer`` members with the cooperative-sticky assignor:

1. **Cooperative rebalancing keeps partitions flowing** - a third member joins; the
   two running members give up only the partitions that move and keep delivering
   the others throughout the rebalance.
2. **A slow async listener is not evicted** - during that rebalance one member's
   ``on_partitions_revoked`` takes twice the session timeout (an awaited coroutine,
   heartbeats continue); it keeps its member id and loses nothing.
3. **Revoked vs lost on a crash** - one member stops cleanly (its partitions are
   revoked, committed and handed over as soon as the group rebalances); another
   crashes (no callback, no commit): the group takes its partitions only when its
   session expires, and the records after its last commit are delivered again (at
   least once).
4. **A check that holds on every run** - the last member drains the topic and stops;
   the group's committed offsets must equal the log end *as acknowledged to the
   producer*.

Why the check uses the producer's acknowledgements: the earlier demo waited until
``lag()`` was 0 and then compared commits to the log end; it once ended "committed
1400 vs log end 1410" on all six partitions.  ``lag()`` is the high watermark of the
*last Fetch response* minus the position, and the consumers, caught up, had their
last response from before the final round of produced batches (10 records per
partition), so "lag 0" was true of a stale high watermark and the members stopped
one batch short.  (ListOffsets(latest) is no better ground truth on the embedded
broker: it returns the last batch's base offset + 1, e.g. 21 for a 30-record log
written in batches of 10, while the Fetch high watermark says 30.)  The producer's
acks are the exact log end, so the demo waits for every position to reach them.
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
SLOW_LISTENER_S = 2 * SESSION_TIMEOUT_MS / 1000
T0 = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - T0:5.1f}s] {message}", flush=True)


def fmt(partitions: set[TopicPartition] | frozenset[TopicPartition]) -> str:
    return "{" + ", ".join(str(tp.partition) for tp in sorted(partitions)) + "}"


@dataclass
class Member:
    name: str
    consumer: GroupConsumer
    owned: set[TopicPartition] = field(default_factory=set)
    consumed: int = 0
    #: (loop time, partition) of every delivered batch.
    deliveries: list[tuple[float, int]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    slow_revoke_s: float = 0.0
    state: str = ""
    task: asyncio.Task[None] | None = None


class ShowRebalances(AsyncConsumerRebalanceListener):
    """Prints each callback; commits on revoke, as a careful application would."""

    def __init__(self, member: Member) -> None:
        self.member = member

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        m = self.member
        m.calls.append("revoked")
        say(f"{m.name}: revoked  {fmt(revoked)}")
        if revoked and m.slow_revoke_s:
            say(f"{m.name}: ...its revoke listener now awaits {m.slow_revoke_s:.0f}s of work")
            await asyncio.sleep(m.slow_revoke_s)
            m.slow_revoke_s = 0.0
            say(f"{m.name}: ...revoke listener done")
        await m.consumer.commit()
        m.owned -= revoked

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        m = self.member
        m.calls.append("assigned")
        m.owned |= assigned
        say(f"{m.name}: assigned {fmt(assigned)} -> owns {fmt(m.owned)}")

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        m = self.member
        m.calls.append("lost")
        say(f"{m.name}: LOST     {fmt(lost)}")
        m.owned -= lost


async def consume(member: Member, seen: Counter[tuple[int, int]]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        batches = await member.consumer.getmany(timeout_ms=200)
        for tp, records in batches.items():
            member.consumed += len(records)
            member.deliveries.append((loop.time(), tp.partition))
            for r in records:
                seen[(tp.partition, r.offset)] += 1


async def produce(bootstrap: str, topic: str, stop: asyncio.Event, ends: dict[int, int]) -> None:
    """Produce rounds of 60 events until ``stop``; ``ends`` is the log end as acknowledged."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        i = 0
        while not stop.is_set():
            futures = []
            for _ in range(60):
                futures.append(
                    await producer.send(topic, f"event-{i}".encode(), partition=i % PARTITIONS)
                )
                i += 1
            for meta in await asyncio.gather(*futures):
                ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
            with contextlib.suppress(asyncio.TimeoutError):
                await wait_for(stop.wait(), 0.1)
    finally:
        await producer.stop()


def table(members: list[Member]) -> None:
    print("   member     partitions            records", flush=True)
    for m in members:
        print(f"   {m.name:<10} {fmt(m.owned):<21} {m.consumed:>7} {m.state}", flush=True)


async def wait_until(predicate: object, timeout: float) -> bool:
    """Poll a condition the demo can only observe (ownership, positions), bounded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        await asyncio.sleep(0.1)
    return False


def balanced(live: list[Member]) -> bool:
    owned = [tp for m in live for tp in m.owned]
    return len(owned) == PARTITIONS == len(set(owned)) and all(m.owned for m in live)


async def main() -> int:
    checks: dict[str, bool] = {}
    async with KafkaBroker() as broker:
        topic = await broker.create_topic(unique_name("demo-events"), PARTITIONS)
        group = unique_name("demo-group")
        say(f"{broker.mode} broker at {broker.bootstrap_servers}; topic {topic}, group {group}")
        stop_producing = asyncio.Event()
        ends: dict[int, int] = {}
        seen: Counter[tuple[int, int]] = Counter()
        producer_task = asyncio.create_task(
            produce(broker.bootstrap_servers, topic, stop_producing, ends)
        )
        loop = asyncio.get_running_loop()

        def new_member(name: str) -> Member:
            consumer = GroupConsumer(
                bootstrap_servers=broker.bootstrap_servers,
                group_id=group,
                client_id=name,
                auto_offset_reset="earliest",
                partition_assignment_strategy=("cooperative-sticky",),
                session_timeout_ms=SESSION_TIMEOUT_MS,
                heartbeat_interval_ms=1000,
                auto_commit_interval_ms=1000,
            )
            member = Member(name, consumer)
            consumer.subscribe([topic], listener=ShowRebalances(member))
            return member

        async def start(member: Member) -> None:
            await member.consumer.start()  # returns once the member has its first assignment
            member.task = asyncio.create_task(consume(member, seen))
            say(f"{member.name} started")

        alpha, bravo, charlie = new_member("alpha"), new_member("bravo"), new_member("charlie")
        await start(alpha)
        await start(bravo)
        await wait_until(lambda: balanced([alpha, bravo]), 60)
        say("two members, cooperative-sticky:")
        table([alpha, bravo])

        # 1 + 2: a member joins while alpha's revoke listener is slow.
        say(f"--- charlie joins; alpha's revoke listener will take {SLOW_LISTENER_S:.0f}s")
        alpha.slow_revoke_s = SLOW_LISTENER_S
        alpha_id = alpha.consumer.member_id
        kept = {m.name: set(m.owned) for m in (alpha, bravo)}
        joined_at = loop.time()
        await start(charlie)
        await wait_until(lambda: balanced([alpha, bravo, charlie]), 120)
        done_at = loop.time()
        kept_now = {
            name: {tp.partition for tp in kept[name] & m.owned}
            for name, m in (("alpha", alpha), ("bravo", bravo))
        }
        flowing = {
            m.name: sum(
                1 for t, p in m.deliveries if joined_at <= t <= done_at and p in kept_now[m.name]
            )
            for m in (alpha, bravo)
        }
        say(f"rebalance took {done_at - joined_at:.1f}s:")
        table([alpha, bravo, charlie])
        say(
            "batches delivered on kept partitions during it: "
            + ", ".join(f"{name} {n}" for name, n in flowing.items())
        )
        checks["kept partitions kept flowing during the rebalance"] = all(flowing.values())
        checks[
            f"alpha not evicted by a {SLOW_LISTENER_S:.0f}s listener "
            f"(session timeout {SESSION_TIMEOUT_MS / 1000:.0f}s)"
        ] = alpha.consumer.member_id == alpha_id and "lost" not in alpha.calls

        # 3: revoked (clean stop) vs lost (crash).
        say("--- bravo stops cleanly: revoke listener (commit), LeaveGroup")
        assert charlie.task is not None and bravo.task is not None
        bravo_parts = set(bravo.owned)
        stopped_at = loop.time()
        bravo.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await bravo.task
        await bravo.consumer.stop()
        bravo.state = "stopped"
        await wait_until(lambda: balanced([alpha, charlie]), 60)
        say(f"bravo's {fmt(bravo_parts)} moved {loop.time() - stopped_at:.1f}s after its stop()")
        table([alpha, bravo, charlie])
        checks["bravo's partitions handed over after its clean stop"] = balanced([alpha, charlie])

        await wait_until(lambda: charlie.consumed > 0, 30)
        say("--- charlie crashes: no callback, no commit, no LeaveGroup")
        charlie_parts = set(charlie.owned)
        charlie.task.cancel()
        await charlie.consumer.abort()  # as a dead process: no LeaveGroup, no heartbeats
        charlie.state = "crashed"
        crashed_at = loop.time()
        await wait_until(lambda: charlie_parts <= alpha.owned, 60)
        say(
            f"charlie's {fmt(charlie_parts)} moved {loop.time() - crashed_at:.1f}s after the "
            f"crash: only once its session ({SESSION_TIMEOUT_MS / 1000:.0f}s) expired"
        )
        table([alpha, bravo, charlie])
        checks["charlie's partitions taken over after its crash"] = charlie_parts <= alpha.owned

        # 4: drain to the acknowledged log end, stop, compare.
        stop_producing.set()
        await producer_task
        say(f"producer stopped; acknowledged log end per partition: {dict(sorted(ends.items()))}")

        async def positions() -> dict[int, int]:
            return {
                tp.partition: await alpha.consumer.position(tp, timeout_ms=10_000)
                for tp in alpha.consumer.assignment()
            }

        deadline = loop.time() + 60
        while loop.time() < deadline:
            if await positions() == ends:
                break
            await asyncio.sleep(0.1)
        assert alpha.task is not None
        alpha.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await alpha.task
        await alpha.consumer.stop()
        say("alpha stopped cleanly (revoked, committed, left the group)")
        again = sum(n - 1 for n in seen.values() if n > 1)
        say(
            f"records delivered twice: {again} (what charlie had consumed after its last "
            "auto-commit: at least once, nothing lost)"
        )

        async with GroupConsumer(
            bootstrap_servers=broker.bootstrap_servers, group_id=group
        ) as checker:
            print("   partition  committed  acked log end", flush=True)
            committed_ok = True
            for p in range(PARTITIONS):
                committed = await checker.committed(TopicPartition(topic, p))
                print(f"   {p:>9}  {committed!s:>9}  {ends.get(p, 0):>13}", flush=True)
                committed_ok = committed_ok and committed == ends.get(p, 0)
        checks["every acknowledged event consumed and committed"] = committed_ok
        checks["no acknowledged event missed"] = all(
            (p, o) in seen for p, end in ends.items() for o in range(end)
        )
    say(f"{sum(ends.values())} events produced")
    for name, ok in checks.items():
        print(f"   {'ok  ' if ok else 'FAIL'} {name}", flush=True)
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
