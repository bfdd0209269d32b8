"""Mixed-client consumer groups against the real broker (issue 4, point 5).

An aiogroup member, a confluent-kafka (librdkafka) member and a kafka-python 3
member share one group.  Whichever of them leads a generation runs its own
client's assignor, and the other two must decode its assignment bytes (and it
theirs): the cooperative case relies on all three implementing the same
``cooperative-sticky`` protocol, the eager case on the same ``range`` or
``roundrobin``.  What is checked, under steady production:

* after convergence every partition is owned by exactly one member, each owning some;
* at no sampled instant is a partition owned by two members (ownership is taken
  from each client's rebalance callbacks, which the protocol orders: a partition
  leaves its old owner before that owner rejoins, and reaches the new one only
  when a later generation completes);
* when one member leaves cleanly the other two take over all partitions;
* every produced record is consumed by someone and, once everyone has stopped,
  the group's committed offsets are the log end of every partition;
* nobody recorded an error, and aiogroup's member never lost its partitions.

The member that leaves is started first and is alone when the group forms, so it
leads the first generation; across the ``leaver`` parameters each client leads
the three-member group once and each client's departure moves the leadership to
another client.  Who led is observed, not assumed, and asserted: aiogroup from
its JoinGroup answer, kafka-python from its coordinator's leader flag, confluent
from librdkafka's ``cgrp`` debug line "JoinGroup response: ... LeaderId <id> (me)".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from group_harness import Load, Member, committed_offsets, exactly_once_cover, wait_until
from peers import PeerMember, confluent_member, kafka_python_member

from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration

PARTITIONS = 6
SESSION_MS = 6000
CONVERGE = 90.0
WAIT = 60.0
POLL = 0.2  # the peers' threads cannot set the asyncio event the waits listen to
NAMES = ("aiogroup", "confluent", "kafka-python")


@dataclass
class MixedGroup:
    """The three members, and what a sampler saw while they ran."""

    aio: Member
    peers: dict[str, PeerMember]
    progress: asyncio.Event
    active: set[str] = field(default_factory=lambda: set(NAMES))
    #: (loop time, partition, members owning it at that instant) for every overlap seen.
    overlaps: list[tuple[float, int, tuple[str, ...]]] = field(default_factory=list)
    #: Which members led a generation, as far as the clients tell (confluent does not).
    leaders: set[str] = field(default_factory=set)

    def owned(self, name: str) -> set[int]:
        return set(self.aio.owned) if name == "aiogroup" else self.peers[name].owned_now()

    def owned_by_active(self) -> dict[str, set[int]]:
        return {name: self.owned(name) for name in NAMES if name in self.active}

    def covered_once(self) -> bool:
        return exactly_once_cover(self.owned_by_active().values(), PARTITIONS)

    def consumed_count(self, name: str) -> int:
        return len(self.aio.seen) if name == "aiogroup" else self.peers[name].snapshot()[1]

    def consumed(self) -> set[tuple[int, int]]:
        seen = set(self.aio.seen)
        for peer in self.peers.values():
            seen |= peer.consumed_now()
        return seen

    def describe(self) -> dict[str, object]:
        state: dict[str, object] = {
            "aiogroup": {
                "owned": sorted(self.aio.owned),
                "generation": self.aio.consumer.generation,
                "protocol": self.aio.protocol_name,
                "calls": [(c.kind, sorted(c.partitions), c.generation) for c in self.aio.calls],
                "errors": self.aio.errors,
            }
        }
        for name, peer in self.peers.items():
            state[name] = {
                "owned": sorted(peer.owned_now()),
                "assigns": peer.assign_calls,
                "revokes": peer.revoke_calls,
                "lost": peer.lost_calls,
                "commit_retries": peer.commit_retries,
                "running": peer.running,
                "errors": peer.errors,
                "log": peer.log[-10:],
            }
        state["active"] = sorted(self.active)
        state["leaders"] = sorted(self.leaders)
        state["overlaps"] = self.overlaps[:10]
        return state

    async def sample(self) -> None:
        """Watch for a partition owned by two members at once, until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            owners: dict[int, list[str]] = {}
            for name in NAMES:
                for p in self.owned(name):
                    owners.setdefault(p, []).append(name)
            for p, names in owners.items():
                if len(names) > 1:
                    self.overlaps.append((loop.time(), p, tuple(names)))
            membership = self.aio.consumer._coordinator
            if membership is not None:
                state = membership.membership
                if state.leader_id and state.leader_id == state.member_id:
                    self.leaders.add("aiogroup")
            for name, peer in self.peers.items():
                if peer.led:
                    self.leaders.add(name)
            await asyncio.sleep(0.05)  # sampling period, not synchronisation

    async def leave(self, name: str) -> None:
        self.active.discard(name)
        if name == "aiogroup":
            await self.aio.stop()
        else:
            await asyncio.to_thread(self.peers[name].stop)


def summary(group: MixedGroup) -> dict[str, object]:
    """What a passing run did: who led, how often each peer was called, retried commits."""
    return {
        "leaders": sorted(group.leaders),
        "aiogroup": [(c.kind, sorted(c.partitions), c.generation) for c in group.aio.calls],
        **{
            name: (p.assign_calls, p.revoke_calls, p.commit_retries, len(p.consumed))
            for name, p in group.peers.items()
        },
        "aiogroup_seen": len(group.aio.seen),
    }


@contextlib.contextmanager
def no_overlap_ever(group: MixedGroup) -> Iterator[None]:
    sampler = asyncio.ensure_future(group.sample())
    try:
        yield
    finally:
        sampler.cancel()


async def start_member(group: MixedGroup, name: str, starters: dict[str, object]) -> None:
    if name == "aiogroup":
        await group.aio.start()
    else:
        make = starters[name]
        assert callable(make)
        group.peers[name] = make()


async def run_mixed_group(
    bootstrap: str,
    group_id: str,
    topic: str,
    strategy: str,
    leaver: str,
) -> None:
    progress = asyncio.Event()
    aio = Member("aiogroup", bootstrap, group_id, topic, [strategy], progress)
    group = MixedGroup(aio, {}, progress)
    starters: dict[str, object] = {
        "confluent": lambda: confluent_member(
            "confluent", bootstrap, group_id, topic, strategy, SESSION_MS
        ),
        "kafka-python": lambda: kafka_python_member(
            "kafka-python", bootstrap, group_id, topic, strategy, SESSION_MS
        ),
    }
    first, *others = [leaver] + [n for n in NAMES if n != leaver]
    aio_started = False
    try:
        async with Load(bootstrap, topic, PARTITIONS) as load:
            # The leaver forms the group alone, so it leads its first generation.
            await start_member(group, first, starters)
            aio_started = aio_started or first == "aiogroup"
            await wait_until(
                lambda: group.owned(first) == set(range(PARTITIONS)),
                progress,
                CONVERGE,
                f"{strategy}: {first} to own every partition of the group it formed",
                poll=POLL,
                describe=group.describe,
            )
            for name in others:
                await start_member(group, name, starters)
            aio_started = True
            with no_overlap_ever(group):
                await wait_until(
                    group.covered_once,
                    progress,
                    CONVERGE,
                    f"{strategy}: the three members to cover every partition exactly once",
                    poll=POLL,
                    describe=group.describe,
                )
                if strategy == "cooperative-sticky":
                    assert aio.protocol_name == "cooperative-sticky"
                    assert aio.rebalance_protocol == "cooperative"
                else:
                    assert aio.protocol_name == strategy
                    assert aio.rebalance_protocol == "eager"
                # Every member consumes some of its share before one leaves.
                before = {n: group.consumed_count(n) for n in NAMES}
                await wait_until(
                    lambda: all(group.consumed_count(n) > before[n] for n in NAMES),
                    progress,
                    WAIT,
                    f"{strategy}: every member to consume",
                    poll=POLL,
                    describe=group.describe,
                )

                await group.leave(leaver)
                await wait_until(
                    group.covered_once,
                    progress,
                    WAIT,
                    f"{strategy}: the two members left after {leaver} to cover every partition",
                    poll=POLL,
                    describe=group.describe,
                )
                await load.stop()
                expected = load.expected()
                await wait_until(
                    lambda: expected <= group.consumed(),
                    progress,
                    WAIT,
                    f"{strategy}: every produced record to be consumed",
                    poll=POLL,
                    describe=lambda: (len(expected - group.consumed()), group.describe()),
                )
                # Stop the rest (aiogroup commits on stop; peers commit after each poll).
                for name in others:
                    await group.leave(name)
            assert group.overlaps == [], group.describe()
        print(f"{strategy}/{leaver}: summary", summary(group))  # shown with -s
        # The group really was led by more than one client: the leaver, which formed
        # it, and whoever took over when it left.
        assert first in group.leaders and len(group.leaders) >= 2, group.describe()
        committed = await committed_offsets(bootstrap, group_id, topic, PARTITIONS)
        assert committed == {p: load.end[p] for p in range(PARTITIONS)}, group.describe()
        assert aio.errors == [], aio.errors
        assert [c for c in aio.calls if c.kind == "lost"] == [], aio.calls
        for peer in group.peers.values():
            assert peer.errors == [] and peer.lost_calls == 0, group.describe()
    finally:
        # Cleanup after a failure; after success everyone has already left.
        if aio_started and "aiogroup" in group.active:
            await aio.abort()
        for name, peer in group.peers.items():
            if name in group.active:
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(peer.stop)


@pytest.mark.parametrize("leaver", NAMES)
async def test_cooperative_mixed_group(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str, leaver: str
) -> None:
    topic = await kafka_topic(partitions=PARTITIONS)
    await run_mixed_group(bootstrap_servers, group_id, topic, "cooperative-sticky", leaver)


@pytest.mark.parametrize("strategy", ["range", "roundrobin"])
async def test_eager_mixed_group(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str, strategy: str
) -> None:
    topic = await kafka_topic(partitions=PARTITIONS)
    await run_mixed_group(bootstrap_servers, group_id, topic, strategy, "aiogroup")
