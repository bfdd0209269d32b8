"""Kafka's "range" assignor: each topic split into consecutive blocks.

Members subscribed to a topic get its partitions in contiguous ranges, the first
members (in Kafka's member order) one extra each when it does not divide evenly.
Co-partitioned topics therefore line up: partition i of every topic goes to the same
member, which is why applications that join topics by key choose it.

Rack awareness (KIP-881): when members send ``client.rack`` and replicas of some
partitions are missing from some racks, each member first takes, up to its share,
partitions with a replica on its own rack, so it can fetch from a local follower
(KIP-392); what is left is then handed out in ranges as before.  Topics with the
same subscribers and the same partition count are matched together, partition
index by partition index, so co-partitioning survives rack matching: it takes
priority over locality, as in Kafka's RangeAssignor.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aiogroup._protocol.classic_embedded import ConsumerAssignment
from aiogroup.assignors.abc import (
    ClusterView,
    ConsumerPartitionAssignor,
    MemberSubscription,
    build_assignments,
    collector_paused,
    member_rack,
    member_sort_key,
    partition_racks,
    partitions_by_topic,
    use_rack_aware,
)
from aiogroup.structs import TopicPartition

__all__ = ["RangeAssignor"]


class _TopicState:
    """One topic's subscribers, shares and what is still unassigned."""

    def __init__(
        self,
        topic: str,
        partitions: list[int],
        consumers: list[str],
        racks: Mapping[str, str],
        cluster: ClusterView,
        prefer_rack_aware: bool,
    ) -> None:
        self.topic = topic
        self.consumers = consumers
        self.racks = {c: racks[c] for c in consumers if c in racks}
        self.unassigned = [TopicPartition(topic, p) for p in partitions]
        self.count = dict.fromkeys(consumers, 0)
        self.per_consumer, self.extra = (
            divmod(len(partitions), len(consumers)) if consumers else (0, 0)
        )
        self.replica_racks: dict[TopicPartition, frozenset[str]] = {}
        if self.racks:
            for tp in self.unassigned:
                self.replica_racks[tp] = partition_racks(cluster, tp) or frozenset()
        self.rack_aware = use_rack_aware(
            set(self.racks.values()), self.replica_racks, prefer_rack_aware
        )

    def racks_match(self, consumer: str, tp: TopicPartition) -> bool:
        rack = self.racks.get(consumer)
        return rack is None or rack in self.replica_racks.get(tp, frozenset())

    def room(self, consumer: str) -> int:
        return max(0, self.per_consumer + (1 if self.extra > 0 else 0) - self.count[consumer])

    def give(
        self, consumer: str, partitions: list[TopicPartition], out: dict[str, list[TopicPartition]]
    ) -> None:
        out[consumer].extend(partitions)
        self.count[consumer] += len(partitions)
        if self.count[consumer] > self.per_consumer:
            self.extra -= 1
        n = len(partitions)
        if self.unassigned[:n] == partitions:  # plain ranges always take a prefix
            del self.unassigned[:n]
        else:
            taken = set(partitions)
            self.unassigned = [tp for tp in self.unassigned if tp not in taken]


def _assign_ranges(
    state: _TopicState,
    may_assign: Callable[[str, TopicPartition], bool] | None,
    out: dict[str, list[TopicPartition]],
) -> None:
    """Each consumer in order takes up to its share of what is left (in partition
    order), of the partitions ``may_assign`` allows it; None allows all."""
    for consumer in state.consumers:
        if not state.unassigned:
            return
        room = state.room(consumer)
        if may_assign is None:
            chosen = state.unassigned[:room]
        else:
            chosen = []
            for tp in state.unassigned:
                if len(chosen) == room:
                    break
                if may_assign(consumer, tp):
                    chosen.append(tp)
        if chosen:
            state.give(consumer, chosen, out)


def _assign_co_partitioned(
    states: list[_TopicState], partition_count: int, out: dict[str, list[TopicPartition]]
) -> None:
    """Give partition i of every topic in the group to the same rack-local member."""
    remaining = list(states[0].consumers)
    for p in range(partition_count):
        for consumer in remaining:
            if all(
                s.racks_match(consumer, TopicPartition(s.topic, p)) and s.room(consumer) > 0
                for s in states
            ):
                for s in states:
                    s.give(consumer, [TopicPartition(s.topic, p)], out)
                if not any(s.room(consumer) > 0 for s in states):
                    remaining.remove(consumer)
                break
        if not remaining:
            return


class RangeAssignor(ConsumerPartitionAssignor):
    name = "range"

    def __init__(self, prefer_rack_aware: bool = False) -> None:
        # Kafka's test hook (preferRackAwareLogic): take the rack-matching path even
        # when every partition is on every rack, where it must give the same result.
        self.prefer_rack_aware = prefer_rack_aware

    def assign(
        self, cluster: ClusterView, members: Mapping[str, MemberSubscription]
    ) -> dict[str, ConsumerAssignment]:
        with collector_paused():
            return self._assign(cluster, members)

    def _assign(
        self, cluster: ClusterView, members: Mapping[str, MemberSubscription]
    ) -> dict[str, ConsumerAssignment]:
        ordered = sorted(members.values(), key=member_sort_key)
        racks = {m.member_id: r for m in ordered if (r := member_rack(m)) is not None}
        topics = {t for m in ordered for t in m.subscription.topics}
        result: dict[str, list[TopicPartition]] = {m: [] for m in members}
        states = [
            _TopicState(
                topic,
                partitions,
                [m.member_id for m in ordered if topic in m.subscription.topics],
                racks,
                cluster,
                self.prefer_rack_aware,
            )
            for topic, partitions in partitions_by_topic(cluster, topics).items()
        ]
        if any(s.rack_aware for s in states):
            groups: dict[tuple[tuple[str, ...], int], list[_TopicState]] = {}
            for s in states:
                key = (tuple(s.consumers), len(s.unassigned))
                groups.setdefault(key, []).append(s)
            for (_, partition_count), group in groups.items():
                if len(group) > 1:
                    _assign_co_partitioned(group, partition_count, result)
                elif group[0].rack_aware:
                    _assign_ranges(group[0], group[0].racks_match, result)
        for s in states:
            _assign_ranges(s, None, result)
        return build_assignments(members, result)
