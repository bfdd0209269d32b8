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
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import ConsumerRebalanceListener as AiokafkaListener
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import InconsistentGroupProtocolError
from aiokafka.errors import KafkaError as AiokafkaError
from aiokafka.protocol.admin import DescribeGroupsRequest
from group_harness import (
    HALT_TIMEOUT,
    Load,
    Member,
    committed_offsets,
    exactly_once_cover,
    wait_until,
)
from peers import PeerMember, confluent_member, kafka_python_member

from aiogroup import TopicPartition
from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.history import HistoryRecorder, MemberRecorder, check_history
from aiogroup.testing.observer import GroupObserver
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


# --- a rolling migration between aiokafka and aiogroup, defaults on both sides (issue 31) ---

MIGRATION_PARTITIONS = 4
MIGRATION_HEARTBEAT_MS = 500


class AiokafkaMember(AiokafkaListener):
    """An ``AIOKafkaConsumer`` member with aiokafka's defaults (``roundrobin``), writing
    its ownership history: its callbacks, every batch handed to it, every accepted commit.

    It commits after every batch and, in its revoke callback, what it consumed of the
    revoked partitions.  A lock keeps the batch-and-commit step and the revoke callback
    apart, and a batch is only handed to the "application" for partitions the member
    still owns, as a careful aiokafka application does.  aiokafka calls no revoke
    callback when it stops, so :meth:`stop` marks the end of processing itself (after
    the consuming task ended and its last commit returned) before the consumer leaves.
    """

    def __init__(
        self, name: str, bootstrap: str, group: str, topic: str, history: HistoryRecorder
    ) -> None:
        self.client_id = f"{name}-{unique_name('client')}"
        self.name = name
        self.topic = topic
        self.rec: MemberRecorder = history.member(self.client_id)
        self.owned: set[int] = set()
        self.positions: dict[int, int] = {}
        self.errors: list[BaseException] = []
        self.commit_failures: list[BaseException] = []
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=self.client_id,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=MIGRATION_HEARTBEAT_MS,
        )

    async def on_partitions_revoked(self, revoked: set[Any]) -> None:
        self.rec.revoke_started(revoked)
        try:
            async with self._lock:
                await self._commit(
                    {p for p in self.owned if TopicPartition(self.topic, p) in revoked}
                )
        finally:
            self.owned -= {tp.partition for tp in revoked}
            for tp in revoked:  # a later assignment starts from the group's commit
                self.positions.pop(tp.partition, None)
            self.rec.revoke_ended(revoked)

    async def on_partitions_assigned(self, assigned: set[Any]) -> None:
        self.rec.assigned(assigned)
        self.owned |= {tp.partition for tp in assigned}

    async def _commit(self, partitions: set[int]) -> None:
        offsets = {
            TopicPartition(self.topic, p): self.positions[p]
            for p in partitions
            if p in self.positions
        }
        if not offsets:
            return
        sent = time.monotonic()
        try:
            await self.consumer.commit(offsets)
        except AiokafkaError as exc:  # refused during a rebalance: a Kafka-level fact
            self.commit_failures.append(exc)
            return
        self.rec.committed(offsets, sent_at=sent)

    async def start(self) -> None:
        await self.consumer.start()
        self.consumer.subscribe([self.topic], listener=self)
        self._task = asyncio.create_task(self._consume(), name=f"consume-{self.name}")

    async def _consume(self) -> None:
        while True:
            try:
                batches = await self.consumer.getmany(timeout_ms=100)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.errors.append(exc)
                await asyncio.sleep(0.1)  # back off after an error, not synchronisation
                continue
            async with self._lock:
                handed: set[int] = set()
                for tp, records in batches.items():
                    if records and tp.partition in self.owned:
                        self.rec.delivered(tp.topic, tp.partition, [r.offset for r in records])
                        self.positions[tp.partition] = records[-1].offset + 1
                        handed.add(tp.partition)
                await self._commit(handed)

    async def stop(self) -> None:
        self.rec.leaving()
        if self._task is not None:
            self._task.cancel()
            done, _ = await asyncio.wait({self._task}, timeout=HALT_TIMEOUT)
            assert done, f"{self.name}: the consuming task ignored its cancellation"
        parts = {TopicPartition(self.topic, p) for p in self.owned}
        self.rec.revoke_started(parts)
        self.rec.revoke_ended(parts)
        self.owned.clear()
        await self.consumer.stop()


async def group_protocol(bootstrap: str, group: str) -> tuple[str, str]:
    """(state, protocol name) as the coordinator reports them in DescribeGroups."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        node = await client.coordinator_lookup(CoordinationType.GROUP, group)
        response: Any = await client.send(node, DescribeGroupsRequest([group]))
        _error, _group, state, _ptype, protocol = response.groups[0][:5]
        return str(state), str(protocol)
    finally:
        await client.close()


async def test_rolling_migration_aiokafka_to_aiogroup_and_back(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """A live group of aiokafka members is replaced one member at a time by aiogroup
    members and then back, every client with its default assignors.  aiogroup's default
    list (``range``, ``roundrobin``) shares ``roundrobin`` with aiokafka's, so every
    mixed generation uses it and the all-aiogroup one ``range`` (Tansu keeps the
    protocol the group was born with: ``roundrobin``); the coordinator's DescribeGroups
    says which (Tansu leaves it empty there: then the JoinGroup answers the aiogroup
    members got).  The whole run is judged by the ownership-history checker
    (no partition held twice, nothing lost, no duplicate, commits never backwards) and
    the committed offsets end at the log end."""
    bootstrap = kafka_broker.bootstrap_servers
    caps = kafka_broker.caps
    all_aiogroup = "roundrobin" if caps.pins_group_assignor else "range"
    topic = await kafka_topic(partitions=MIGRATION_PARTITIONS)
    history = HistoryRecorder()
    progress = asyncio.Event()
    everyone: list[AiokafkaMember | Member] = []
    live: list[AiokafkaMember | Member] = []

    def aiokafka_member(name: str) -> AiokafkaMember:
        return AiokafkaMember(name, bootstrap, group_id, topic, history)

    def aiogroup_member(name: str) -> Member:
        return Member(
            name,
            bootstrap,
            group_id,
            topic,
            None,  # the default assignors
            progress,
            history=history,
            heartbeat_interval_ms=MIGRATION_HEARTBEAT_MS,
        )

    def owned(m: AiokafkaMember | Member) -> set[int]:
        return m.owned

    def describe() -> object:
        return {getattr(m, "name", "?"): sorted(owned(m)) for m in live}

    def covered() -> bool:
        failed = [(m.name, m.errors) for m in live if m.errors]
        assert not failed, failed  # e.g. INCONSISTENT_GROUP_PROTOCOL: fail now, not at timeout
        return exactly_once_cover([owned(m) for m in live], MIGRATION_PARTITIONS)

    async def settled(protocol: str, what: str) -> None:
        await wait_until(
            covered,
            progress,
            CONVERGE,
            what,
            poll=POLL,  # aiokafka members cannot set the event
            describe=describe,
        )
        if caps.describe_groups_reports_assignment:
            state, chosen = await group_protocol(bootstrap, group_id)
            assert (state, chosen) == ("Stable", protocol), (what, state, chosen)
        for m in live:
            if isinstance(m, Member):
                assert m.protocol_name == protocol, (what, m.name, m.protocol_name)

    async def join(member: AiokafkaMember | Member) -> None:
        everyone.append(member)
        await member.start()
        live.append(member)

    async def leave(member: AiokafkaMember | Member) -> None:
        live.remove(member)
        await member.stop()

    try:
        async with GroupObserver(bootstrap, group_id, history, interval=0.2):
            async with Load(bootstrap, topic, MIGRATION_PARTITIONS, history) as load:
                k1, k2 = aiokafka_member("aiokafka-1"), aiokafka_member("aiokafka-2")
                await join(k1)
                await join(k2)
                await settled("roundrobin", "the aiokafka group to form")
                # aiokafka -> aiogroup, one member at a time.
                g1 = aiogroup_member("aiogroup-1")
                await join(g1)
                await settled("roundrobin", "aiogroup-1 to join the aiokafka members")
                await leave(k1)
                await settled("roundrobin", "aiokafka-1 to hand over")
                g2 = aiogroup_member("aiogroup-2")
                await join(g2)
                await settled("roundrobin", "aiogroup-2 to join")
                await leave(k2)
                await settled(all_aiogroup, "the group to be all aiogroup (its first choice)")
                # ... and back.
                k3 = aiokafka_member("aiokafka-3")
                await join(k3)
                await settled("roundrobin", "aiokafka-3 to join the aiogroup members")
                await leave(g1)
                await settled("roundrobin", "aiogroup-1 to hand over")
                k4 = aiokafka_member("aiokafka-4")
                await join(k4)
                await settled("roundrobin", "aiokafka-4 to join")
                await leave(g2)
                await settled("roundrobin", "the group to be all aiokafka again")
                await load.stop()
                expected = load.expected()

                def consumed() -> set[tuple[int, int]]:
                    return {
                        (p, o)
                        for e in history.events()
                        if e.kind == "delivered"
                        for (_t, p, first, last) in e.spans
                        for o in range(first, last + 1)
                    }

                await wait_until(
                    lambda: expected <= consumed(),
                    progress,
                    WAIT,
                    "every produced record to be consumed",
                    poll=POLL,
                    describe=lambda: len(expected - consumed()),
                )
                for member in list(live):
                    await leave(member)
    finally:
        for member in live:
            with contextlib.suppress(Exception):
                await member.stop()
    report = check_history(history.events())
    report.assert_clean()
    committed = await committed_offsets(bootstrap, group_id, topic, MIGRATION_PARTITIONS)
    assert committed == {p: load.end[p] for p in range(MIGRATION_PARTITIONS)}
    for member in everyone:
        assert member.errors == [], (member.name, member.errors)


async def test_no_shared_assignor_fails_naming_the_setting(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    """An aiogroup member told to use only ``range`` cannot join a group of aiokafka
    members (``roundrobin``): the error it raises names the setting to change."""
    topic = await kafka_topic(partitions=2)
    history = HistoryRecorder()
    peer = AiokafkaMember("aiokafka", bootstrap_servers, group_id, topic, history)
    member = Member(
        "aiogroup",
        bootstrap_servers,
        group_id,
        topic,
        ["range"],
        asyncio.Event(),
        heartbeat_interval_ms=MIGRATION_HEARTBEAT_MS,
    )
    await peer.start()
    try:
        await wait_until(
            lambda: peer.owned == {0, 1}, asyncio.Event(), CONVERGE, "the group", poll=POLL
        )
        await member.start()
        try:
            await wait_until(lambda: bool(member.errors), member.progress, WAIT, "the refused join")
        finally:
            await member.abort()
    finally:
        await peer.stop()
    error = member.errors[0]
    assert isinstance(error, InconsistentGroupProtocolError), member.errors
    assert "partition_assignment_strategy" in str(error)
    assert "offered the assignors range" in str(error)
