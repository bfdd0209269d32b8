"""Kafka's "roundrobin" assignor: every partition dealt in turn.

All partitions of all subscribed topics are sorted and dealt to members in Kafka's
member order, skipping a member that is not subscribed to the partition's topic.  The
dealer does not restart for each topic, so with equal subscriptions counts differ by
at most one across the whole group (range only balances each topic on its own).
"""

from __future__ import annotations

from collections.abc import Mapping

from aiogroup._protocol.classic_embedded import ConsumerAssignment
from aiogroup.assignors.abc import (
    ClusterView,
    ConsumerPartitionAssignor,
    MemberSubscription,
    build_assignments,
    collector_paused,
    member_sort_key,
    partitions_by_topic,
)
from aiogroup.structs import TopicPartition

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor(ConsumerPartitionAssignor):
    name = "roundrobin"

    def assign(
        self, cluster: ClusterView, members: Mapping[str, MemberSubscription]
    ) -> dict[str, ConsumerAssignment]:
        with collector_paused():
            return self._assign(cluster, members)

    def _assign(
        self, cluster: ClusterView, members: Mapping[str, MemberSubscription]
    ) -> dict[str, ConsumerAssignment]:
        ordered = sorted(members.values(), key=member_sort_key)
        topics = {t for m in ordered for t in m.subscription.topics}
        result: dict[str, list[TopicPartition]] = {m: [] for m in members}
        if not ordered:
            return {}
        turn = 0
        for topic, partitions in partitions_by_topic(cluster, topics).items():
            for partition in partitions:
                # Some member subscribes to every topic here, so this loop ends.
                while topic not in ordered[turn].subscription.topics:
                    turn = (turn + 1) % len(ordered)
                result[ordered[turn].member_id].append(TopicPartition(topic, partition))
                turn = (turn + 1) % len(ordered)
        return build_assignments(members, result)
