"""The interface every partition assignor implements, and the helpers they share.

An assignor runs only on the group leader, between JoinGroup and SyncGroup, and is a
pure function of the members' decoded subscriptions and a view of cluster metadata.
Keeping it pure (no I/O, no clock) is what lets the sticky and cooperative rules be
tested exhaustively without a broker.
"""

from __future__ import annotations

import abc
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import ClassVar, Protocol

from aiogroup.consumer_protocol import ConsumerAssignment, ConsumerSubscription
from aiogroup.structs import RebalanceProtocol, TopicPartition

__all__ = [
    "ClusterView",
    "ConsumerPartitionAssignor",
    "MemberSubscription",
    "build_assignments",
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
