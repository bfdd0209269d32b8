"""aiogroup against kafka-python on random groups.

Range and round robin are deterministic functions of the member order, so they must
agree with kafka-python partition for partition.  Sticky answers may differ in which
partitions move, so there the comparison is balance: across random groups with
unequal subscriptions aiogroup's assignment is never less balanced than
kafka-python's (by the sum of squared counts, which for a fixed total is smallest
when counts are as even as the subscriptions allow).

kafka-python groups members by "static or not" with ``itertools.groupby`` over the
unsorted member list, so a group where static and dynamic members interleave loses
members there; the generated groups are all-dynamic or all-static so that the
reference is right (aiogroup's static ordering is checked against Java's cases in
test_kafka_range_roundrobin.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiokafka.coordinator.assignors.roundrobin import (
    RoundRobinPartitionAssignor as AiokafkaRoundRobin,
)
from hypothesis import given
from hypothesis import strategies as st
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.protocol.consumer import JoinGroupResponse

from aiogroup._protocol.classic_embedded import ConsumerSubscription
from aiogroup.assignors import (
    AiokafkaAssignorAdapter,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from aiogroup.structs import TopicPartition
from tests.unit.assignors.support import Cluster, check_validity_and_balance, with_history


@st.composite
def groups(
    draw: st.DrawFn, static: bool | None = None, equal: bool = False
) -> tuple[Cluster, dict[str, Any]]:
    topics = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=5, unique=True))
    sizes = {t: draw(st.integers(0, 9)) for t in topics}
    member_count = draw(st.integers(1, 7))
    is_static = draw(st.booleans()) if static is None else static
    members: dict[str, Any] = {}
    shared = draw(st.lists(st.sampled_from([*topics, "missing"]), max_size=4, unique=True))
    for i in range(member_count):
        wanted = (
            shared
            if equal
            else draw(st.lists(st.sampled_from([*topics, "missing"]), max_size=4, unique=True))
        )
        instance = f"i{draw(st.integers(0, 99)):02d}-{i}" if is_static else None
        members[f"m{draw(st.integers(0, 999)):03d}-{i}"] = (instance, tuple(sorted(wanted)))
    return Cluster(sizes), members


class _KafkaPythonCluster:
    def __init__(self, cluster: Cluster) -> None:
        self._cluster = cluster

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return self._cluster.partitions_for_topic(topic)

    def topics(self) -> set[str]:
        return set(self._cluster.partitions)


def _theirs(assignor: Any, cluster: Cluster, members: Mapping[str, Any]) -> dict:
    join_members = [
        JoinGroupResponse.JoinGroupResponseMember(
            member_id=m, group_instance_id=instance, metadata=assignor.metadata(set(topics))
        )
        for m, (instance, topics) in members.items()
    ]
    result = assignor.assign(_KafkaPythonCluster(cluster), join_members)
    return {
        m: sorted(TopicPartition(t, p) for t, parts in a.assigned_partitions for p in parts)
        for m, a in result.items()
    }


def _ours(assignor: Any, cluster: Cluster, members: Mapping[str, Any]) -> dict:
    ours = {
        m: MemberSubscription(m, instance, ConsumerSubscription(topics=topics))
        for m, (instance, topics) in members.items()
    }
    return {m: sorted(a.partitions) for m, a in assignor.assign(cluster, ours).items()}


@given(groups())
def test_range_agrees_with_kafka_python(group: tuple[Cluster, dict[str, Any]]) -> None:
    cluster, members = group
    assert _ours(RangeAssignor(), cluster, members) == _theirs(
        RangePartitionAssignor, cluster, members
    )


@given(groups(equal=True))
def test_roundrobin_agrees_with_kafka_python(group: tuple[Cluster, dict[str, Any]]) -> None:
    """Equal subscriptions only: kafka-python 3.0's round robin raises KeyError when it
    must skip a member not subscribed to a topic (it looks the member up by the
    (instance id, member id) pair in a map keyed by member id)."""
    cluster, members = group
    assert _ours(RoundRobinAssignor(), cluster, members) == _theirs(
        RoundRobinPartitionAssignor, cluster, members
    )


@given(groups(static=False))
def test_roundrobin_agrees_with_aiokafka_for_any_subscriptions(
    group: tuple[Cluster, dict[str, Any]],
) -> None:
    """The unequal-subscription half of the comparison, against aiokafka's round robin."""
    cluster, members = group
    theirs = AiokafkaAssignorAdapter(AiokafkaRoundRobin)
    assert _ours(RoundRobinAssignor(), cluster, members) == _ours(theirs, cluster, members)


def _spread(assignment: Mapping[str, list]) -> int:
    return sum(len(p) ** 2 for p in assignment.values())


@given(groups(static=False), st.randoms(use_true_random=False))
def test_sticky_is_never_less_balanced_than_kafka_python(
    group: tuple[Cluster, dict[str, Any]], rand: Any
) -> None:
    """Fresh, then a second generation where members changed subscriptions and some left."""
    cluster, members = group
    ours = _ours(StickyAssignor(), cluster, members)
    theirs = _theirs(StickyPartitionAssignor(), cluster, members)
    assert _spread(ours) <= _spread(theirs), (ours, theirs)

    topics = sorted(cluster.partitions)
    survivors = {m: v for m, v in members.items() if rand.random() < 0.8} or members
    next_topics = {
        m: tuple(sorted(set(t) if rand.random() < 0.5 else set(rand.sample(topics, 1))))
        for m, (_, t) in survivors.items()
    }
    ours_subs = {m: with_history(StickyAssignor(), next_topics[m], ours[m], 1) for m in survivors}
    ours_members = {m: MemberSubscription(m, None, s) for m, s in ours_subs.items()}
    ours2 = {
        m: sorted(a.partitions) for m, a in StickyAssignor().assign(cluster, ours_members).items()
    }
    join_members = [
        JoinGroupResponse.JoinGroupResponseMember(
            member_id=m,
            group_instance_id=None,
            metadata=StickyPartitionAssignor._metadata(set(next_topics[m]), theirs[m], 1),
        )
        for m in survivors
    ]
    raw = StickyPartitionAssignor().assign(_KafkaPythonCluster(cluster), join_members)
    theirs2 = {
        m: [TopicPartition(t, p) for t, parts in a.assigned_partitions for p in parts]
        for m, a in raw.items()
    }
    check_validity_and_balance(ours_subs, ours2)
    assert _spread(ours2) <= _spread(theirs2), (ours2, theirs2)
