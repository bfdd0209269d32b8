"""Replica racks come from aiokafka's cluster metadata, as the leader's coordinator has it.

The coordinator hands its aiokafka ClusterMetadata to the assignor; brokers report
``broker.rack`` in MetadataResponse v1+, and each partition its replica ids.  These
tests feed a real MetadataResponse through ``ClusterMetadata.update_metadata`` so a
change in how aiokafka stores either shows up here.
"""

from __future__ import annotations

from aiokafka.cluster import ClusterMetadata
from aiokafka.protocol.metadata import MetadataResponse_v1

from aiogroup._protocol.classic_embedded import ConsumerSubscription
from aiogroup.assignors import MemberSubscription, RangeAssignor, StickyAssignor
from aiogroup.assignors.abc import partition_racks
from aiogroup.structs import TopicPartition


def cluster(replicas: dict[int, list[int]], broker_racks: dict[int, str | None]) -> ClusterMetadata:
    brokers = [(node, "localhost", 9092 + node, rack) for node, rack in broker_racks.items()]
    partitions = [(0, p, ids[0], ids, ids) for p, ids in replicas.items()]
    metadata = ClusterMetadata()
    metadata.update_metadata(MetadataResponse_v1(brokers, 0, [(0, "t", False, partitions)]))
    return metadata


def test_partition_racks_are_the_racks_of_its_replicas() -> None:
    meta = cluster({0: [0, 1], 1: [2], 2: [1]}, {0: "a", 1: "b", 2: None})
    assert partition_racks(meta, TopicPartition("t", 0)) == {"a", "b"}
    assert partition_racks(meta, TopicPartition("t", 1)) == frozenset()  # broker has no rack
    assert partition_racks(meta, TopicPartition("t", 2)) == {"b"}
    assert partition_racks(meta, TopicPartition("other", 0)) is None


def members(racks: dict[str, str | None]) -> dict[str, MemberSubscription]:
    return {
        m: MemberSubscription(m, None, ConsumerSubscription(topics=("t",), rack_id=rack))
        for m, rack in racks.items()
    }


def test_range_and_sticky_put_each_partition_on_a_member_in_its_replica_rack() -> None:
    # One replica each, alternating racks: the plain answer (m1: 0,1 / m2: 2,3) would
    # make every member fetch half its partitions across racks.
    meta = cluster({0: [0], 1: [1], 2: [0], 3: [1]}, {0: "a", 1: "b"})
    group = members({"m1": "a", "m2": "b"})
    for assignor in (RangeAssignor(), StickyAssignor()):
        result = assignor.assign(meta, group)
        assert [p.partition for p in result["m1"].partitions] == [0, 2], assignor
        assert [p.partition for p in result["m2"].partitions] == [1, 3], assignor


def test_without_member_racks_the_assignment_is_the_plain_one() -> None:
    meta = cluster({0: [0], 1: [1], 2: [0], 3: [1]}, {0: "a", 1: "b"})
    result = RangeAssignor().assign(meta, members({"m1": None, "m2": None}))
    assert [p.partition for p in result["m1"].partitions] == [0, 1]
