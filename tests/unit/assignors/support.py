"""Shared fixtures for the ported assignor suites: clusters, subscriptions, checks.

The checks restate, in Python, what Apache Kafka's assignor tests verify
(``verifyValidityAndBalance``, ``isFullyBalanced``, ``partitionsTransferringOwnership``,
``isSticky``), so a ported case asserts what the Java case asserts.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from aiogroup._protocol.classic_embedded import ConsumerAssignment, ConsumerSubscription
from aiogroup.assignors import (
    ConsumerPartitionAssignor,
    CooperativeStickyAssignor,
    MemberSubscription,
    StickyAssignor,
)
from aiogroup.assignors.sticky import encode_sticky_user_data
from aiogroup.structs import TopicPartition

ALL_RACKS = ("a", "b", "c", "d", "e", "f")
DEFAULT_GENERATION = -1

Assignment = dict[str, list[TopicPartition]]


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def parse(spec: str) -> list[TopicPartition]:
    """Java's "t1-0, t1-3" notation (TopicPartition.toString) to a sorted list."""
    out = []
    for item in spec.replace(",", " ").split():
        topic, _, partition = item.rpartition("-")
        out.append(TopicPartition(topic, int(partition)))
    return sorted(out)


def show(partitions: Iterable[TopicPartition]) -> str:
    """The inverse of ``parse``, sorted as Java's tests sort their strings."""
    return ", ".join(sorted(f"{p.topic}-{p.partition}" for p in partitions))


def name(prefix: str, i: int, max_num: int) -> str:
    """Kafka's getTopicName/getConsumerName: zero-padded to the digits of max_num."""
    return f"{prefix}{i:0{len(str(max_num))}d}"


@dataclass
class Cluster:
    """Topic sizes plus, optionally, the racks of each partition's replicas."""

    partitions: dict[str, int] = field(default_factory=dict)
    replica_racks: dict[TopicPartition, frozenset[str]] = field(default_factory=dict)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        if topic not in self.partitions:
            return None
        return set(range(self.partitions[topic]))

    def partition_racks(self, partition: TopicPartition) -> frozenset[str] | None:
        return self.replica_racks.get(partition)

    def topics(self) -> set[str]:
        return set(self.partitions)


@dataclass
class RackSetup:
    """Kafka's RackConfig: brokers with or without racks, consumers with or without."""

    name: str
    num_broker_racks: int
    consumer_racks: bool
    replication_factor: int = 3

    def consumer_rack(self, index: int) -> str | None:
        if not self.consumer_racks:
            return None
        count = self.num_broker_racks if self.num_broker_racks > 0 else len(ALL_RACKS)
        return ALL_RACKS[index % count]


NO_BROKER_RACK = RackSetup("NO_BROKER_RACK", 0, True)
NO_CONSUMER_RACK = RackSetup("NO_CONSUMER_RACK", 3, False)
BROKER_AND_CONSUMER_RACK = RackSetup("BROKER_AND_CONSUMER_RACK", 3, True)
RACK_SETUPS = (NO_BROKER_RACK, NO_CONSUMER_RACK, BROKER_AND_CONSUMER_RACK)


class ClusterBuilder:
    """Adds topics the way Kafka's tests do: each topic's replicas start one broker later."""

    def __init__(self, racks: RackSetup | None = None) -> None:
        self.racks = racks or RackSetup("NONE", 0, False, replication_factor=2)
        self.cluster = Cluster()
        self._next = 0

    def add(self, topic: str, count: int) -> ClusterBuilder:
        rf = self.racks.replication_factor
        n = self.racks.num_broker_racks
        brokers = rf if n <= 0 else n * rf
        broker_racks = [None if n <= 0 else ALL_RACKS[i % n] for i in range(brokers)]
        self.cluster.partitions[topic] = count
        for i in range(count):
            racks = {broker_racks[(i + j + self._next) % brokers] for j in range(rf)}
            self.cluster.replica_racks[tp(topic, i)] = frozenset(r for r in racks if r)
        self._next += 1
        return self

    def remove(self, topic: str) -> ClusterBuilder:
        count = self.cluster.partitions.pop(topic)
        for i in range(count):
            self.cluster.replica_racks.pop(tp(topic, i), None)
        return self


def rack_cluster(
    sizes: Mapping[str, int], replication_factor: int, broker_racks: Sequence[str | None]
) -> Cluster:
    """AbstractPartitionAssignorTest.partitionsPerTopic: replicas on consecutive brokers."""
    cluster = Cluster()
    next_index = 0
    for topic, count in sizes.items():
        cluster.partitions[topic] = count
        for i in range(count):
            racks = {
                broker_racks[(i + j + next_index) % len(broker_racks)]
                for j in range(replication_factor)
            }
            cluster.replica_racks[tp(topic, i)] = frozenset(r for r in racks if r)
        next_index += count
    return cluster


def racks(n: int) -> list[str | None]:
    return [ALL_RACKS[i % len(ALL_RACKS)] for i in range(n)]


def null_racks(n: int) -> list[str | None]:
    return [None] * n


# --- subscriptions ----------------------------------------------------------------


def subscription(topics: Sequence[str], rack: str | None = None) -> ConsumerSubscription:
    """A member with no history (Kafka's ``subscription(topics, consumerIndex)``)."""
    return ConsumerSubscription(topics=tuple(topics), rack_id=rack)


def with_history(
    assignor: ConsumerPartitionAssignor,
    topics: Sequence[str],
    owned: Iterable[TopicPartition],
    generation: int,
    rack: str | None = None,
    version: int = 3,
) -> ConsumerSubscription:
    """A member that owned ``owned`` in ``generation``, as each assignor's members send it.

    Sticky (eager) members keep their history in user_data; cooperative members send
    owned_partitions and generation_id, plus their generation in user_data for
    leaders that read only subscription v1.  ``version`` 0 and 1 model older clients.
    """
    owned = list(owned)
    if isinstance(assignor, CooperativeStickyAssignor):
        helper = CooperativeStickyAssignor()
        helper.on_assignment(ConsumerAssignment(tuple(owned)), generation)
        user_data = helper.subscription_user_data(frozenset(topics))
    else:
        user_data = encode_sticky_user_data(owned, generation)
    return ConsumerSubscription(
        topics=tuple(topics),
        user_data=user_data,
        owned_partitions=tuple(owned) if version >= 1 else (),
        generation_id=generation if version >= 2 else DEFAULT_GENERATION,
        rack_id=rack,
        version=version,
    )


def members_of(subscriptions: Mapping[str, ConsumerSubscription]) -> dict[str, MemberSubscription]:
    return {m: MemberSubscription(m, None, s) for m, s in subscriptions.items()}


def assign(
    assignor: ConsumerPartitionAssignor,
    cluster: Cluster,
    subscriptions: Mapping[str, ConsumerSubscription],
) -> Assignment:
    """What the leader sends each member (cooperative: transfers held back)."""
    result = assignor.assign(cluster, members_of(subscriptions))
    assert set(result) == set(subscriptions)
    return {m: sorted(a.partitions) for m, a in result.items()}


def target(
    assignor: StickyAssignor, cluster: Cluster, subscriptions: Mapping[str, ConsumerSubscription]
) -> Assignment:
    """The balanced goal before cooperative hold-back (Java's super.assignPartitions)."""
    return {m: sorted(p) for m, p in assignor.target(cluster, members_of(subscriptions)).items()}


# --- checks -----------------------------------------------------------------------


def is_fully_balanced(assignment: Mapping[str, Sequence[TopicPartition]]) -> bool:
    sizes = [len(p) for p in assignment.values()]
    return not sizes or max(sizes) - min(sizes) <= 1


def check_validity_and_balance(
    subscriptions: Mapping[str, ConsumerSubscription], assignment: Assignment
) -> None:
    """Kafka's verifyValidityAndBalance.

    Every partition goes to a subscriber and to one member only; and when two members'
    counts differ by two or more, the fuller one holds no topic the emptier one also
    holds (else one partition could have moved to even them out).
    """
    assert set(subscriptions) == set(assignment)
    consumers = sorted(assignment)
    for c in consumers:
        for p in assignment[c]:
            assert p.topic in subscriptions[c].topics, f"{p} given to {c}, not subscribed"
    for a, b in itertools.combinations(consumers, 2):
        common = set(assignment[a]) & set(assignment[b])
        assert not common, f"{a} and {b} share {common}"
        if abs(len(assignment[a]) - len(assignment[b])) <= 1:
            continue
        shared = {p.topic for p in assignment[a]} & {p.topic for p in assignment[b]}
        assert not shared, (
            f"{a} has {len(assignment[a])} and {b} has {len(assignment[b])}, and both hold "
            f"topics {shared}: a partition could move to balance them"
        )


def follow_up_until_settled(
    assignor: ConsumerPartitionAssignor,
    cluster: Cluster,
    subscriptions: dict[str, ConsumerSubscription],
    assignment: Assignment,
    generation: int = 1,
) -> Assignment:
    """The cooperative half of Kafka's verifyValidityAndBalance.

    No partition may be revoked from one member and given to another in the same
    round; while anything is revoked, the members rejoin owning what they were given
    (``subscriptions`` is updated in place, as Java's test does) and the next round's
    assignment is checked the same way.  Returns the settled assignment.
    """
    if not isinstance(assignor, CooperativeStickyAssignor):
        return assignment
    for _ in range(5):
        added: set[TopicPartition] = set()
        revoked: set[TopicPartition] = set()
        for member, partitions in assignment.items():
            owned = set(subscriptions[member].owned_partitions)
            added |= set(partitions) - owned
            revoked |= owned - set(partitions)
        assert not added & revoked, f"handed over in the round they are revoked: {added & revoked}"
        if not revoked:
            return assignment
        for member, partitions in assignment.items():
            old = subscriptions[member]
            subscriptions[member] = with_history(
                assignor, old.topics, partitions, generation, rack=old.rack_id
            )
        assignment = assign(assignor, cluster, subscriptions)
    raise AssertionError("cooperative assignment did not settle within 4 follow-up rounds")


def verify(
    assignor: ConsumerPartitionAssignor,
    cluster: Cluster,
    subscriptions: dict[str, ConsumerSubscription],
    assignment: Assignment,
) -> Assignment:
    """verifyValidityAndBalance for either protocol; returns the settled assignment."""
    assignment = follow_up_until_settled(assignor, cluster, subscriptions, assignment)
    check_validity_and_balance(subscriptions, assignment)
    return assignment


def claims(
    assignor: ConsumerPartitionAssignor, subscriptions: Mapping[str, ConsumerSubscription]
) -> dict[str, tuple[int, list[TopicPartition]]]:
    """(generation, partitions) each member claims, read as the assignor reads it."""
    from aiogroup.assignors.sticky import decode_sticky_user_data

    out: dict[str, tuple[int, list[TopicPartition]]] = {}
    for member, sub in subscriptions.items():
        if isinstance(assignor, CooperativeStickyAssignor):
            out[member] = (sub.generation_id, list(sub.owned_partitions))
            continue
        decoded = decode_sticky_user_data(sub.user_data)
        if decoded is None:
            out[member] = (sub.generation_id, list(sub.owned_partitions))
        else:
            out[member] = (decoded.generation_id, list(decoded.partitions))
    return out


def transferring_ownership(
    assignor: ConsumerPartitionAssignor,
    subscriptions: Mapping[str, ConsumerSubscription],
    goal: Assignment,
) -> dict[TopicPartition, str]:
    """Kafka's partitionsTransferringOwnership, worked out from outside.

    A partition transfers when the goal gives it to someone other than its valid
    previous owner (the single claimant of the highest generation, among members
    subscribed to its topic), or when two members claimed it in the same generation.
    """
    best: dict[TopicPartition, tuple[int, set[str]]] = {}
    for member, (generation, owned) in claims(assignor, subscriptions).items():
        for p in set(owned):
            if p.topic not in subscriptions[member].topics:
                continue
            current = best.get(p)
            if current is None or generation > current[0]:
                best[p] = (generation, {member})
            elif generation == current[0]:
                current[1].add(member)
    out: dict[TopicPartition, str] = {}
    for member, partitions in goal.items():
        for p in partitions:
            if p in best and best[p][1] != {member}:
                out[p] = member
    return out


def is_sticky(
    assignor: ConsumerPartitionAssignor,
    subscriptions: Mapping[str, ConsumerSubscription],
    assignment: Assignment,
) -> bool:
    """Kafka's isSticky: no topic's partitions move around a cycle of members.

    A cycle (A gives a partition of t to B while B gives one of t to A, or longer
    rings) means the same counts could have been reached with fewer moves.
    """
    owner = {
        p: m
        for m, (_, owned) in claims(assignor, subscriptions).items()
        if m in assignment
        for p in owned
        if p.topic in subscriptions[m].topics
    }
    edges: dict[str, set[tuple[str, str]]] = {}
    for member, partitions in assignment.items():
        for p in partitions:
            previous = owner.get(p)
            if previous is not None and previous != member:
                edges.setdefault(p.topic, set()).add((previous, member))
    for pairs in edges.values():
        graph: dict[str, set[str]] = {}
        for a, b in pairs:
            graph.setdefault(a, set()).add(b)
        if _has_cycle(graph):
            return False
    return True


def _has_cycle(graph: Mapping[str, set[str]]) -> bool:
    state: dict[str, int] = {}

    def visit(node: str) -> bool:
        state[node] = 1
        for nxt in graph.get(node, ()):
            if state.get(nxt) == 1 or (nxt not in state and visit(nxt)):
                return True
        state[node] = 2
        return False

    return any(node not in state and visit(node) for node in list(graph))
