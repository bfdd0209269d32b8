"""The interface every partition assignor implements, and the helpers they share.

An assignor runs only on the group leader, between JoinGroup and SyncGroup, and is a
pure function of the members' decoded subscriptions and a view of cluster metadata.
Keeping it pure (no I/O, no clock) is what lets the sticky and cooperative rules be
tested exhaustively without a broker.
"""

from __future__ import annotations

import abc
import gc
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar, Protocol

from aiogroup._protocol.classic_embedded import ConsumerAssignment, ConsumerSubscription
from aiogroup.structs import RebalanceProtocol, TopicPartition

__all__ = [
    "ClusterView",
    "ConsumerPartitionAssignor",
    "MemberSubscription",
    "build_assignments",
    "collector_paused",
    "member_sort_key",
    "partitions_by_topic",
]


class ClusterView(Protocol):
    """The one question assignors ask of cluster metadata (aiokafka's ClusterMetadata fits)."""

    def partitions_for_topic(self, topic: str) -> set[int] | None: ...


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """One JoinGroup member as the leader sees it."""

    member_id: str
    group_instance_id: str | None
    subscription: ConsumerSubscription


class ConsumerPartitionAssignor(abc.ABC):
    """A strategy the leader uses to split partitions between members.

    ``name`` is the protocol name sent in JoinGroup; the broker picks one name every
    member supports, so it must match what other clients call the same strategy.
    """

    name: ClassVar[str]
    supported_protocols: ClassVar[tuple[RebalanceProtocol, ...]] = (RebalanceProtocol.EAGER,)
    version: ClassVar[int] = 0

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        """Opaque bytes for the subscription's user_data (state the leader needs)."""
        return None

    @abc.abstractmethod
    def assign(
        self, cluster: ClusterView, members: Mapping[str, MemberSubscription]
    ) -> dict[str, ConsumerAssignment]:
        """Return an assignment for every member id in ``members``."""

    def on_assignment(self, assignment: ConsumerAssignment, generation_id: int) -> None:
        """Called on every member after SyncGroup with what it was given."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def member_sort_key(member: MemberSubscription) -> tuple[int, str, str]:
    """Kafka's member order: static members by group_instance_id first, then member_id.

    Ordering by the instance id keeps a restarted static member (new member_id, same
    instance id) in the same slot, so range and roundrobin give it the same partitions.
    """
    if member.group_instance_id is not None:
        return (0, member.group_instance_id, member.member_id)
    return (1, member.member_id, "")


def partitions_by_topic(cluster: ClusterView, topics: Iterable[str]) -> dict[str, list[int]]:
    """Sorted partition numbers of each topic that exists; unknown topics are left out."""
    result: dict[str, list[int]] = {}
    for topic in sorted(set(topics)):
        partitions = cluster.partitions_for_topic(topic)
        if partitions:
            result[topic] = sorted(partitions)
    return result


def build_assignments(
    members: Mapping[str, MemberSubscription],
    partitions: Mapping[str, Iterable[TopicPartition]],
    user_data: Mapping[str, bytes | None] | None = None,
) -> dict[str, ConsumerAssignment]:
    """Wrap per-member partition lists, giving every member an entry, sorted for stable bytes."""
    return {
        member_id: ConsumerAssignment(
            partitions=tuple(sorted(partitions.get(member_id, ()))),
            user_data=None if user_data is None else user_data.get(member_id),
        )
        for member_id in members
    }


def partition_racks(cluster: object, partition: TopicPartition) -> frozenset[str] | None:
    """Racks holding a replica of ``partition``, or None when the metadata has none.

    A view may answer ``partition_racks`` itself (tests do); aiokafka's
    ClusterMetadata keeps each partition's replica ids and each broker's rack, but
    offers no public call joining them, so this reads its partition table and asks
    ``broker_metadata`` for every replica.  Brokers without ``broker.rack`` add
    nothing, so a cluster without racks gives an empty set.
    """
    own = getattr(cluster, "partition_racks", None)
    if callable(own):
        racks: frozenset[str] | None = own(partition)
        return racks
    table = getattr(cluster, "_partitions", None)
    broker_metadata = getattr(cluster, "broker_metadata", None)
    if not isinstance(table, dict) or not callable(broker_metadata):
        return None
    meta = table.get(partition.topic, {}).get(partition.partition)
    replicas = getattr(meta, "replicas", None)
    if replicas is None:
        return None
    found = set()
    for node_id in replicas:
        broker = broker_metadata(node_id)
        rack = getattr(broker, "rack", None)
        if isinstance(rack, str) and rack:
            found.add(rack)
    return frozenset(found)


def member_rack(member: MemberSubscription) -> str | None:
    """The member's ``client.rack`` as sent in subscription v3; empty means none."""
    return member.subscription.rack_id or None


def use_rack_aware(
    consumer_racks: set[str],
    racks_by_partition: Mapping[TopicPartition, frozenset[str]],
    prefer: bool = False,
) -> bool:
    """KIP-881's rule for when rack matching is worth doing.

    Only when some member states a rack that some replica is on; and then only if
    the partitions differ in where their replicas are (when every partition has a
    replica on every rack, every member is local to everything, and matching would
    change nothing but cost time).  ``prefer`` forces the rack-aware path whenever
    racks overlap: Kafka's tests use it to exercise that path on such clusters.
    """
    all_racks = (
        frozenset().union(*racks_by_partition.values()) if racks_by_partition else frozenset()
    )
    if not consumer_racks or not consumer_racks & all_racks:
        return False
    if prefer:
        return True
    return any(racks != all_racks for racks in racks_by_partition.values())


@contextmanager
def collector_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector off while an assignment is computed.

    A large assignment allocates millions of small objects that cannot form cycles
    (partition tuples, lists of them), and every 700 allocations start a collection
    that walks the young ones; with a million partitions the older generations grow
    large and their collections come often: a second-generation sticky assignment of
    300,000 partitions over 2,000 members took 3.9 s with collections running and 2.4
    s without.  The call is synchronous (nothing else runs on the event loop
    meanwhile), and one collection runs afterwards at most.  As in the fetcher's
    drain, an application that disabled the collector keeps it disabled; the switch
    is process-wide, so another thread toggling it inside this window finds it
    enabled again afterwards.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
