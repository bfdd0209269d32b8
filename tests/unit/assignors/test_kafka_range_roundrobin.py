"""Apache Kafka's RangeAssignorTest and RoundRobinAssignorTest, ported.

Java's expected assignments, case by case.  Range runs each case under Kafka's three
rack configurations; with every partition replicated on every rack the answer must
not change (the rack-aware range cases whose answers do change are in
test_kafka_racks.py).  Java compares range results as sets, round robin as lists;
aiogroup sorts every assignment, so both compare sorted lists here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from aiogroup._protocol.classic_embedded import ConsumerSubscription
from aiogroup.assignors import MemberSubscription, RangeAssignor, RoundRobinAssignor
from aiogroup.structs import TopicPartition
from tests.unit.assignors.support import (
    RACK_SETUPS,
    ClusterBuilder,
    RackSetup,
    tp,
)

T, T1, T2 = "topic", "topic1", "topic2"


def RANGE() -> RangeAssignor:
    """Kafka's initializeRacks sets preferRackAwareLogic for every range case."""
    return RangeAssignor(prefer_rack_aware=True)


C1, C2, C3, C4, C5 = "consumer1", "consumer2", "consumer3", "consumer4", "consumer5"
I1, I2, I3 = "instance1", "instance2", "instance3"


class Members:
    """Members in insertion order, each with its rack from Kafka's consumerIndex rule."""

    def __init__(self, racks: RackSetup | None = None) -> None:
        self.racks = racks or RackSetup("NONE", 0, False)
        self.members: dict[str, MemberSubscription] = {}
        self._index = 0

    def add(self, member: str, topics: Sequence[str], instance: str | None = None) -> Members:
        rack = self.racks.consumer_rack(self._index)
        self._index += 1
        sub = ConsumerSubscription(topics=tuple(topics), rack_id=rack)
        self.members[member] = MemberSubscription(member, instance, sub)
        return self

    def rename(self, old: str, new: str) -> None:
        m = self.members.pop(old)
        self.members[new] = MemberSubscription(new, m.group_instance_id, m.subscription)


def run(
    assignor: RangeAssignor | RoundRobinAssignor,
    builder: ClusterBuilder,
    members: Members,
) -> dict[str, list[TopicPartition]]:
    result = assignor.assign(builder.cluster, members.members)
    assert set(result) == set(members.members)
    return {m: sorted(a.partitions) for m, a in result.items()}


def by_instance(
    result: Mapping[str, list[TopicPartition]], members: Members
) -> dict[str, list[TopicPartition]]:
    return {
        m.group_instance_id: result[m.member_id]
        for m in members.members.values()
        if m.group_instance_id is not None
    }


def cluster(racks: RackSetup | None, **sizes: int) -> ClusterBuilder:
    builder = ClusterBuilder(racks)
    for topic, count in sizes.items():
        builder.add(topic, count)
    return builder


@pytest.fixture(params=RACK_SETUPS, ids=lambda r: r.name)
def racks(request: pytest.FixtureRequest) -> RackSetup:
    setup: RackSetup = request.param
    return setup


def rf(racks: RackSetup, replicas: int) -> RackSetup:
    """Kafka's initializeRacks(rackConfig, maxConsumers): replicas on that many racks."""
    brokers = replicas if racks.num_broker_racks else 0
    return RackSetup(racks.name, brokers, racks.consumer_racks, replication_factor=replicas)


# --- RangeAssignorTest ----------------------------------------------------------------


@pytest.mark.parametrize("has_rack", [True, False])
def test_range_one_consumer_no_topic(has_rack: bool) -> None:
    racks = RACK_SETUPS[2] if has_rack else RACK_SETUPS[1]
    assert run(RANGE(), cluster(racks), Members(racks).add(C1, [])) == {C1: []}


@pytest.mark.parametrize("has_rack", [True, False])
def test_range_one_consumer_nonexistent_topic(has_rack: bool) -> None:
    racks = RACK_SETUPS[2] if has_rack else RACK_SETUPS[1]
    assert run(RANGE(), cluster(racks), Members(racks).add(C1, [T1])) == {C1: []}


def test_range_one_consumer_one_topic(racks: RackSetup) -> None:
    result = run(RANGE(), cluster(racks, topic1=3), Members(racks).add(C1, [T1]))
    assert result == {C1: [tp(T1, 0), tp(T1, 1), tp(T1, 2)]}


def test_range_only_assigns_partitions_from_subscribed_topics(racks: RackSetup) -> None:
    result = run(RANGE(), cluster(racks, topic1=3, other=3), Members(racks).add(C1, [T1]))
    assert result == {C1: [tp(T1, 0), tp(T1, 1), tp(T1, 2)]}


def test_range_one_consumer_multiple_topics(racks: RackSetup) -> None:
    result = run(RANGE(), cluster(racks, topic1=1, topic2=2), Members(racks).add(C1, [T1, T2]))
    assert result == {C1: [tp(T1, 0), tp(T2, 0), tp(T2, 1)]}


def test_range_two_consumers_one_topic_one_partition(racks: RackSetup) -> None:
    members = Members(racks).add(C1, [T1]).add(C2, [T1])
    assert run(RANGE(), cluster(racks, topic1=1), members) == {C1: [tp(T1, 0)], C2: []}


def test_range_two_consumers_one_topic_two_partitions(racks: RackSetup) -> None:
    members = Members(racks).add(C1, [T1]).add(C2, [T1])
    result = run(RANGE(), cluster(racks, topic1=2), members)
    assert result == {C1: [tp(T1, 0)], C2: [tp(T1, 1)]}


def test_range_multiple_consumers_mixed_topics(racks: RackSetup) -> None:
    members = Members(racks).add(C1, [T1]).add(C2, [T1, T2]).add(C3, [T1])
    result = run(RANGE(), cluster(racks, topic1=3, topic2=2), members)
    assert result == {
        C1: [tp(T1, 0)],
        C2: [tp(T1, 1), tp(T2, 0), tp(T2, 1)],
        C3: [tp(T1, 2)],
    }


def test_range_two_consumers_two_topics_six_partitions(racks: RackSetup) -> None:
    members = Members(racks).add(C1, [T1, T2]).add(C2, [T1, T2])
    result = run(RANGE(), cluster(racks, topic1=3, topic2=3), members)
    assert result == {
        C1: [tp(T1, 0), tp(T1, 1), tp(T2, 0), tp(T2, 1)],
        C2: [tp(T1, 2), tp(T2, 2)],
    }


def test_range_two_static_consumers_two_topics_six_partitions(racks: RackSetup) -> None:
    # consumer-a sorts first by member id, but static members are ordered by instance id.
    members = Members(racks).add("consumer-b", [T1, T2], I1).add("consumer-a", [T1, T2], I2)
    result = run(RANGE(), cluster(racks, topic1=3, topic2=3), members)
    assert result == {
        "consumer-b": [tp(T1, 0), tp(T1, 1), tp(T2, 0), tp(T2, 1)],
        "consumer-a": [tp(T1, 2), tp(T2, 2)],
    }


def test_range_one_static_consumer_and_one_dynamic_consumer_two_topics_six_partitions(
    racks: RackSetup,
) -> None:
    members = Members(racks).add("consumer-b", [T1, T2], I1).add("consumer-a", [T1, T2])
    result = run(RANGE(), cluster(racks, topic1=3, topic2=3), members)
    assert result == {
        "consumer-b": [tp(T1, 0), tp(T1, 1), tp(T2, 0), tp(T2, 1)],
        "consumer-a": [tp(T1, 2), tp(T2, 2)],
    }


def test_range_static_member_range_assignment_persistent(racks: RackSetup) -> None:
    setup = rf(racks, 5)
    builder = cluster(setup, topic1=5, topic2=4)
    members = Members(setup).add(C1, [T1, T2], I1).add(C2, [T1, T2], I2)
    members.add(C3, [T1, T2], I3).add(C4, [T1, T2])
    expected = {
        C1: [tp(T1, 0), tp(T1, 1), tp(T2, 0)],
        C2: [tp(T1, 2), tp(T2, 1)],
        C3: [tp(T1, 3), tp(T2, 2)],
        C4: [tp(T1, 4), tp(T2, 3)],
    }
    assert run(RANGE(), builder, members) == expected
    del members.members[C4]
    members.add(C5, [T1, T2])
    expected[C5] = expected.pop(C4)
    assert run(RANGE(), builder, members) == expected


def test_range_static_member_range_assignment_persistent_after_member_id_changes(
    racks: RackSetup,
) -> None:
    builder = cluster(racks, topic1=5, topic2=5)
    members = Members(racks).add(C1, [T1, T2], I1).add(C2, [T1, T2], I2).add(C3, [T1, T2], I3)
    first = by_instance(run(RANGE(), builder, members), members)
    assert first == {
        I1: [tp(T1, 0), tp(T1, 1), tp(T2, 0), tp(T2, 1)],
        I2: [tp(T1, 2), tp(T1, 3), tp(T2, 2), tp(T2, 3)],
        I3: [tp(T1, 4), tp(T2, 4)],
    }
    members.rename(C3, C4)
    members.rename(C2, C5)
    assert by_instance(run(RANGE(), builder, members), members) == first


# --- RoundRobinAssignorTest -----------------------------------------------------------


def test_roundrobin_one_consumer_no_topic() -> None:
    assert run(RoundRobinAssignor(), cluster(None), Members().add("consumer", [])) == {
        "consumer": []
    }


def test_roundrobin_one_consumer_nonexistent_topic() -> None:
    assert run(RoundRobinAssignor(), cluster(None), Members().add("consumer", [T])) == {
        "consumer": []
    }


def test_roundrobin_one_consumer_one_topic() -> None:
    result = run(RoundRobinAssignor(), cluster(None, topic=3), Members().add("consumer", [T]))
    assert result == {"consumer": [tp(T, 0), tp(T, 1), tp(T, 2)]}


def test_roundrobin_only_assigns_partitions_from_subscribed_topics() -> None:
    result = run(
        RoundRobinAssignor(), cluster(None, topic=3, other=3), Members().add("consumer", [T])
    )
    assert result == {"consumer": [tp(T, 0), tp(T, 1), tp(T, 2)]}


def test_roundrobin_one_consumer_multiple_topics() -> None:
    result = run(
        RoundRobinAssignor(),
        cluster(None, topic1=1, topic2=2),
        Members().add("consumer", [T1, T2]),
    )
    assert result == {"consumer": [tp(T1, 0), tp(T2, 0), tp(T2, 1)]}


def test_roundrobin_two_consumers_one_topic_one_partition() -> None:
    members = Members().add(C1, [T]).add(C2, [T])
    assert run(RoundRobinAssignor(), cluster(None, topic=1), members) == {
        C1: [tp(T, 0)],
        C2: [],
    }


def test_roundrobin_two_consumers_one_topic_two_partitions() -> None:
    members = Members().add(C1, [T]).add(C2, [T])
    assert run(RoundRobinAssignor(), cluster(None, topic=2), members) == {
        C1: [tp(T, 0)],
        C2: [tp(T, 1)],
    }


def test_roundrobin_multiple_consumers_mixed_topics() -> None:
    members = Members().add(C1, [T1]).add(C2, [T1, T2]).add(C3, [T1])
    assert run(RoundRobinAssignor(), cluster(None, topic1=3, topic2=2), members) == {
        C1: [tp(T1, 0)],
        C2: [tp(T1, 1), tp(T2, 0), tp(T2, 1)],
        C3: [tp(T1, 2)],
    }


def test_roundrobin_two_dynamic_consumers_two_topics_six_partitions() -> None:
    members = Members().add(C1, [T1, T2]).add(C2, [T1, T2])
    assert run(RoundRobinAssignor(), cluster(None, topic1=3, topic2=3), members) == {
        C1: [tp(T1, 0), tp(T1, 2), tp(T2, 1)],
        C2: [tp(T1, 1), tp(T2, 0), tp(T2, 2)],
    }


def test_roundrobin_two_static_consumers_two_topics_six_partitions() -> None:
    members = Members().add("consumer-b", [T1, T2], I1).add("consumer-a", [T1, T2], I2)
    assert run(RoundRobinAssignor(), cluster(None, topic1=3, topic2=3), members) == {
        "consumer-b": [tp(T1, 0), tp(T1, 2), tp(T2, 1)],
        "consumer-a": [tp(T1, 1), tp(T2, 0), tp(T2, 2)],
    }


def test_roundrobin_one_static_consumer_and_one_dynamic_consumer_two_topics_six_partitions() -> (
    None
):
    members = Members().add("consumer-b", [T1, T2], I1).add("consumer-a", [T1, T2])
    assert run(RoundRobinAssignor(), cluster(None, topic1=3, topic2=3), members) == {
        "consumer-b": [tp(T1, 0), tp(T1, 2), tp(T2, 1)],
        "consumer-a": [tp(T1, 1), tp(T2, 0), tp(T2, 2)],
    }


def test_roundrobin_static_member_round_robin_assignment_persistent() -> None:
    builder = cluster(None, topic1=3, topic2=3)
    members = Members().add(C1, [T1, T2], I1).add(C2, [T1, T2], I2).add(C3, [T1, T2], I3)
    members.add(C4, [T1, T2])
    expected = {
        C1: [tp(T1, 0), tp(T2, 1)],
        C2: [tp(T1, 1), tp(T2, 2)],
        C3: [tp(T1, 2)],
        C4: [tp(T2, 0)],
    }
    assert run(RoundRobinAssignor(), builder, members) == expected
    del members.members[C4]
    members.add(C5, [T1, T2])
    expected[C5] = expected.pop(C4)
    assert run(RoundRobinAssignor(), builder, members) == expected


def test_roundrobin_static_member_round_robin_assignment_persistent_after_member_id_changes() -> (
    None
):
    builder = cluster(None, topic1=5, topic2=5)
    members = Members().add(C1, [T1, T2], I1).add(C2, [T1, T2], I2).add(C3, [T1, T2], I3)
    first = by_instance(run(RoundRobinAssignor(), builder, members), members)
    assert first == {
        I1: [tp(T1, 0), tp(T1, 3), tp(T2, 1), tp(T2, 4)],
        I2: [tp(T1, 1), tp(T1, 4), tp(T2, 2)],
        I3: [tp(T1, 2), tp(T2, 0), tp(T2, 3)],
    }
    members.rename(C3, C4)
    members.rename(C2, C5)
    assert by_instance(run(RoundRobinAssignor(), builder, members), members) == first
