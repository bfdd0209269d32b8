"""Kafka's "range" assignor: each topic split into consecutive blocks.

Members subscribed to a topic get its partitions in contiguous ranges, the first
members (in Kafka's member order) one extra each when it does not divide evenly.
Co-partitioned topics therefore line up: partition i of every topic goes to the same
member, which is why applications that join topics by key choose it.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiogroup.assignors.abc import (
    ClusterView,
    ConsumerPartitionAssignor,
    MemberSubscription,
    build_assignments,
    member_sort_key,
    partitions_by_topic,
)
from aiogroup.consumer_protocol import ConsumerAssignment
from aiogroup.structs import TopicPartition

__all__ = ["RangeAssignor"]


class RangeAssignor(ConsumerPartitionAssignor):
    name = "range"

    def assign(
        self, cluster: ClusterView, members: Mapping[str, MemberSubscription]
    ) -> dict[str, ConsumerAssignment]:
        ordered = sorted(members.values(), key=member_sort_key)
        topics = {t for m in ordered for t in m.subscription.topics}
        result: dict[str, list[TopicPartition]] = {m: [] for m in members}
        for topic, partitions in partitions_by_topic(cluster, topics).items():
            subscribers = [m.member_id for m in ordered if topic in m.subscription.topics]
            per_member, extra = divmod(len(partitions), len(subscribers))
            start = 0
            for i, member_id in enumerate(subscribers):
                length = per_member + (1 if i < extra else 0)
                result[member_id].extend(
                    TopicPartition(topic, p) for p in partitions[start : start + length]
                )
                start += length
        return build_assignments(members, result)
