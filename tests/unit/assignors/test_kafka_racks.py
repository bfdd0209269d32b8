# ruff: noqa: E501  (rows of Java's expected assignments read best one member per line)
"""Apache Kafka's rack-aware assignor cases (KIP-881), ported.

From RangeAssignorTest, AbstractStickyAssignorTest and CooperativeStickyAssignorTest:
members named consumer0.., replicas on consecutive brokers whose racks are given per
broker, and Java's exact expected assignment plus the number of partitions whose
member sits on a rack holding no replica (-1: not checked).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from aiogroup._protocol.classic_embedded import ConsumerSubscription
from aiogroup.assignors import (
    ConsumerPartitionAssignor,
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    StickyAssignor,
)
from tests.unit.assignors.support import (
    ALL_RACKS,
    Cluster,
    assign,
    null_racks,
    parse,
    rack_cluster,
    racks,
    show,
    target,
    tp,
    transferring_ownership,
    with_history,
)

ALL3 = ["t1", "t2", "t3"]


def verify_rack_assignment(
    assignor: ConsumerPartitionAssignor,
    sizes: dict[str, int],
    replication_factor: int,
    broker_racks: Sequence[str | None],
    consumer_racks: Sequence[str | None],
    consumer_topics: Sequence[Sequence[str]],
    owned: Sequence[str] | None,
    expected: Sequence[str],
    mismatches: int,
) -> None:
    """Kafka's AbstractPartitionAssignorTest.verifyRackAssignment."""
    cluster = rack_cluster(sizes, replication_factor, broker_racks)
    subs = {
        f"consumer{i}": ConsumerSubscription(
            topics=tuple(topics),
            owned_partitions=tuple(parse(owned[i])) if owned and i < len(owned) else (),
            rack_id=consumer_racks[i],
        )
        for i, topics in enumerate(consumer_topics)
    }
    result = assign(assignor, cluster, subs)
    assert {m: show(p) for m, p in result.items()} == {
        f"consumer{i}": show(parse(e)) for i, e in enumerate(expected)
    }
    if mismatches >= 0:
        off_rack = [
            p
            for i, rack in enumerate(consumer_racks)
            if rack is not None
            for p in result[f"consumer{i}"]
            if rack not in cluster.replica_racks[p]
        ]
        assert len(off_rack) == mismatches, off_rack


# --- RangeAssignorTest ------------------------------------------------------------------


def verify_non_rack_aware(
    assignor: RangeAssignor, sizes: dict[str, int], topics: list[list[str]], expected: list[str]
) -> None:
    for rf, brokers, consumers, mismatches in [
        (3, null_racks(3), racks(3), -1),
        (3, racks(3), null_racks(3), -1),
        (3, racks(3), racks(3), 0),
        (4, racks(4), racks(3), 0),
        (3, racks(3), ["d", "e", "f"], -1),
        (3, racks(3), [None, "e", "f"], -1),
    ]:
        verify_rack_assignment(
            assignor, sizes, rf, brokers, consumers, topics, None, expected, mismatches
        )
    assignor.prefer_rack_aware = True
    verify_rack_assignment(assignor, sizes, 3, racks(3), racks(3), topics, None, expected, 0)
    assignor.prefer_rack_aware = False


def test_range_rack_aware_assignment_with_uniform_subscription() -> None:
    a = RangeAssignor()
    sizes = {"t1": 6, "t2": 7, "t3": 2}
    topics = [ALL3, ALL3, ALL3]
    verify_non_rack_aware(
        a,
        sizes,
        topics,
        [
            "t1-0, t1-1, t2-0, t2-1, t2-2, t3-0",
            "t1-2, t1-3, t2-3, t2-4, t3-1",
            "t1-4, t1-5, t2-5, t2-6",
        ],
    )
    verify_rack_assignment(
        a, sizes, 1, racks(3), racks(3), topics, None,
        ["t1-0, t1-3, t2-0, t2-3, t2-6", "t1-1, t1-4, t2-1, t2-4, t3-0", "t1-2, t1-5, t2-2, t2-5, t3-1"],
        0,
    )  # fmt: skip
    verify_rack_assignment(
        a, sizes, 2, racks(3), racks(3), topics, None,
        ["t1-0, t1-2, t2-0, t2-2, t2-3, t3-1", "t1-1, t1-3, t2-1, t2-4, t3-0", "t1-4, t1-5, t2-5, t2-6"],
        1,
    )  # fmt: skip
    verify_rack_assignment(
        a, sizes, 3, racks(2), racks(3), topics, None,
        ["t1-0, t1-1, t2-0, t2-1, t2-2, t3-0", "t1-2, t1-3, t2-3, t2-4, t3-1", "t1-4, t1-5, t2-5, t2-6"],
        4,
    )  # fmt: skip


def test_range_rack_aware_assignment_with_non_equal_subscription() -> None:
    a = RangeAssignor()
    sizes = {"t1": 6, "t2": 7, "t3": 2}
    topics = [ALL3, ALL3, ["t1", "t3"]]
    verify_non_rack_aware(
        a,
        sizes,
        topics,
        [
            "t1-0, t1-1, t2-0, t2-1, t2-2, t2-3, t3-0",
            "t1-2, t1-3, t2-4, t2-5, t2-6, t3-1",
            "t1-4, t1-5",
        ],
    )
    verify_rack_assignment(
        a, sizes, 1, racks(3), racks(3), topics, None,
        ["t1-0, t1-3, t2-0, t2-2, t2-3, t2-6", "t1-1, t1-4, t2-1, t2-4, t2-5, t3-0", "t1-2, t1-5, t3-1"],
        2,
    )  # fmt: skip
    verify_rack_assignment(
        a, sizes, 2, racks(3), racks(3), topics, None,
        ["t1-0, t1-2, t2-0, t2-2, t2-3, t2-5, t3-1", "t1-1, t1-3, t2-1, t2-4, t2-6, t3-0", "t1-4, t1-5"],
        0,
    )  # fmt: skip
    verify_rack_assignment(
        a, sizes, 3, racks(2), racks(3), topics, None,
        ["t1-0, t1-1, t2-0, t2-1, t2-2, t2-3, t3-0", "t1-2, t1-3, t2-4, t2-5, t2-6, t3-1", "t1-4, t1-5"],
        2,
    )  # fmt: skip


def test_range_rack_aware_assignment_with_uniform_partitions() -> None:
    a = RangeAssignor()
    sizes = {"t1": 5, "t2": 5, "t3": 5}
    topics = [ALL3, ALL3, ALL3]
    plain = [
        "t1-0, t1-1, t2-0, t2-1, t3-0, t3-1",
        "t1-2, t1-3, t2-2, t2-3, t3-2, t3-3",
        "t1-4, t2-4, t3-4",
    ]
    verify_non_rack_aware(a, sizes, topics, plain)
    # Co-partitioning is kept even when it costs rack alignment.
    verify_rack_assignment(a, sizes, 1, racks(3), racks(3), topics, None, plain, 10)
    verify_rack_assignment(a, sizes, 2, racks(3), racks(3), topics, None, plain, 5)
    verify_rack_assignment(a, sizes, 3, racks(2), racks(3), topics, None, plain, 3)


def test_range_rack_aware_assignment_with_uniform_partitions_non_equal_subscription() -> None:
    a = RangeAssignor()
    sizes = {"t1": 5, "t2": 5, "t3": 5}
    topics = [ALL3, ALL3, ["t1", "t3"]]
    verify_non_rack_aware(
        a,
        sizes,
        topics,
        [
            "t1-0, t1-1, t2-0, t2-1, t2-2, t3-0, t3-1",
            "t1-2, t1-3, t2-3, t2-4, t3-2, t3-3",
            "t1-4, t3-4",
        ],
    )
    verify_rack_assignment(
        a, sizes, 1, racks(3), racks(3), topics, None,
        ["t1-0, t1-1, t2-0, t2-1, t2-4, t3-0, t3-1", "t1-2, t1-3, t2-2, t2-3, t3-2, t3-3", "t1-4, t3-4"],
        9,
    )  # fmt: skip
    verify_rack_assignment(
        a, sizes, 2, racks(3), racks(3), topics, None,
        ["t1-2, t2-0, t2-1, t2-3, t3-2", "t1-0, t1-3, t2-2, t2-4, t3-0, t3-3", "t1-1, t1-4, t3-1, t3-4"],
        0,
    )  # fmt: skip
    verify_rack_assignment(
        a, sizes, 3, racks(2), racks(3), topics, None,
        ["t1-0, t1-1, t2-0, t2-1, t2-2, t3-0, t3-1", "t1-2, t1-3, t2-3, t2-4, t3-2, t3-3", "t1-4, t3-4"],
        2,
    )  # fmt: skip


def test_range_rack_aware_assignment_with_co_partitioning() -> None:
    a = RangeAssignor()
    sizes = {"t1": 6, "t2": 6, "t3": 2, "t4": 2}
    consumer_racks = [ALL_RACKS[0], ALL_RACKS[1], ALL_RACKS[1], ALL_RACKS[0]]
    topics = [["t1", "t2"], ["t1", "t2"], ["t3", "t4"], ["t3", "t4"]]
    plain = ["t1-0, t1-1, t1-2, t2-0, t2-1, t2-2", "t1-3, t1-4, t1-5, t2-3, t2-4, t2-5", "t3-0, t4-0", "t3-1, t4-1"]  # fmt: skip
    verify_rack_assignment(a, sizes, 3, racks(2), consumer_racks, topics, None, plain, -1)
    verify_rack_assignment(a, sizes, 2, racks(2), consumer_racks, topics, None, plain, 0)
    verify_rack_assignment(
        a, sizes, 1, racks(2), consumer_racks, topics, None,
        ["t1-0, t1-2, t1-4, t2-0, t2-2, t2-4", "t1-1, t1-3, t1-5, t2-1, t2-3, t2-5", "t3-1, t4-1", "t3-0, t4-0"],
        0,
    )  # fmt: skip
    every = [["t1", "t2", "t3", "t4"]] * 4
    plain = ["t1-0, t1-1, t2-0, t2-1, t3-0, t4-0", "t1-2, t1-3, t2-2, t2-3, t3-1, t4-1", "t1-4, t2-4", "t1-5, t2-5"]  # fmt: skip
    verify_rack_assignment(a, sizes, 3, racks(2), consumer_racks, every, None, plain, -1)
    verify_rack_assignment(a, sizes, 2, racks(2), consumer_racks, every, None, plain, 0)
    verify_rack_assignment(
        a, sizes, 1, racks(2), consumer_racks, every, None,
        ["t1-0, t1-2, t2-0, t2-2, t3-0, t4-0", "t1-1, t1-3, t2-1, t2-3, t3-1, t4-1", "t1-5, t2-5", "t1-4, t2-4"],
        0,
    )  # fmt: skip
    verify_rack_assignment(
        a, sizes, 1, racks(3), consumer_racks, every, None,
        ["t1-0, t1-3, t2-0, t2-3, t3-0, t4-0", "t1-1, t1-4, t2-1, t2-4, t3-1, t4-1", "t1-2, t2-2", "t1-5, t2-5"],
        6,
    )  # fmt: skip


def test_range_co_partitioned_assignment_with_same_subscription() -> None:
    a = RangeAssignor()
    sizes = {"t1": 6, "t2": 6, "t3": 2, "t4": 2, "t5": 4, "t6": 4}
    topic_list = ["t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"]
    topics = [topic_list] * 3
    consumer_racks = list(ALL_RACKS[:3])
    plain = [
        "t1-0, t1-1, t2-0, t2-1, t3-0, t4-0, t5-0, t5-1, t6-0, t6-1",
        "t1-2, t1-3, t2-2, t2-3, t3-1, t4-1, t5-2, t6-2",
        "t1-4, t1-5, t2-4, t2-5, t5-3, t6-3",
    ]
    verify_rack_assignment(a, sizes, 3, null_racks(3), consumer_racks, topics, None, plain, -1)
    a.prefer_rack_aware = True
    verify_rack_assignment(a, sizes, 3, racks(3), consumer_racks, topics, None, plain, 0)
    verify_rack_assignment(
        a, sizes, 2, racks(3), consumer_racks, topics, None,
        [
            "t1-0, t1-2, t2-0, t2-2, t3-0, t4-0, t5-1, t6-1",
            "t1-1, t1-3, t2-1, t2-3, t3-1, t4-1, t5-2, t6-2",
            "t1-4, t1-5, t2-4, t2-5, t5-0, t5-3, t6-0, t6-3",
        ],
        0,
    )  # fmt: skip


# --- AbstractStickyAssignorTest / CooperativeStickyAssignorTest --------------------------

STICKY = [StickyAssignor, CooperativeStickyAssignor]


def verify_both_ways(
    a: StickyAssignor,
    sizes: dict[str, int],
    rf: int,
    brokers: Sequence[str | None],
    consumers: Sequence[str | None],
    topics: list[list[str]],
    expected: list[str],
    mismatches: int,
) -> None:
    """verifyUniformSubscription / verifyNonEqualSubscription: fresh, then owning it."""
    verify_rack_assignment(a, sizes, rf, brokers, consumers, topics, None, expected, mismatches)
    verify_rack_assignment(a, sizes, rf, brokers, consumers, topics, expected, expected, mismatches)


@pytest.mark.parametrize("cls", STICKY, ids=["sticky", "coop"])
def test_sticky_rack_aware_assignment_with_uniform_subscription(cls: type[StickyAssignor]) -> None:
    a = cls()
    sizes = {"t1": 6, "t2": 7, "t3": 2}
    topics = [ALL3, ALL3, ALL3]
    plain = ["t1-0, t1-3, t2-0, t2-3, t2-6", "t1-1, t1-4, t2-1, t2-4, t3-0", "t1-2, t1-5, t2-2, t2-5, t3-1"]  # fmt: skip
    verify_both_ways(a, sizes, 3, null_racks(3), racks(3), topics, plain, -1)
    verify_both_ways(a, sizes, 3, racks(3), null_racks(3), topics, plain, -1)
    a.prefer_rack_aware = True
    verify_both_ways(a, sizes, 3, racks(3), racks(3), topics, plain, 0)
    verify_both_ways(a, sizes, 4, racks(4), racks(3), topics, plain, 0)
    a.prefer_rack_aware = False
    verify_both_ways(a, sizes, 3, racks(3), racks(3), topics, plain, 0)
    verify_both_ways(a, sizes, 3, racks(3), ["d", "e", "f"], topics, plain, -1)
    verify_both_ways(a, sizes, 3, racks(3), [None, "e", "f"], topics, plain, -1)
    # Rack-aligned for replication factors where each rack holds only some partitions.
    verify_both_ways(a, sizes, 1, racks(3), racks(3), topics, plain, 0)
    verify_both_ways(a, sizes, 2, racks(3), racks(3), topics, plain, 0)
    # One member on a rack with no replicas still gets its share, off-rack.
    verify_both_ways(a, sizes, 3, racks(2), racks(3), topics, plain, 5)
    owned = ["t1-0, t1-1, t1-2, t1-3, t1-4", "t1-5, t2-0, t2-1, t2-2, t2-3", "t2-4, t2-5, t2-6, t3-0, t3-1"]  # fmt: skip
    if cls is CooperativeStickyAssignor:
        # Misaligned owned partitions are revoked first (held back this round).
        intermediate = ["t1-0, t1-3", "t2-1", "t2-5, t3-1"]
        verify_rack_assignment(a, sizes, 1, racks(3), racks(3), topics, owned, intermediate, 0)
    else:
        verify_rack_assignment(a, sizes, 1, racks(3), racks(3), topics, owned, plain, 0)
    a.prefer_rack_aware = True
    verify_rack_assignment(a, sizes, 3, racks(3), racks(3), topics, plain, plain, 0)


NON_EQUAL_PLAIN = ["t1-5, t2-0, t2-2, t2-4, t2-6", "t1-3, t2-1, t2-3, t2-5, t3-0", "t1-0, t1-1, t1-2, t1-4, t3-1"]  # fmt: skip


@pytest.mark.parametrize("cls", STICKY, ids=["sticky", "coop"])
def test_sticky_rack_aware_assignment_with_non_equal_subscription_where_racks_change_nothing(
    cls: type[StickyAssignor],
) -> None:
    """The first half of Java's case: racks absent, disjoint, or on every partition."""
    a = cls()
    sizes = {"t1": 6, "t2": 7, "t3": 2}
    topics = [ALL3, ALL3, ["t1", "t3"]]
    verify_both_ways(a, sizes, 3, null_racks(3), racks(3), topics, NON_EQUAL_PLAIN, -1)
    verify_both_ways(a, sizes, 3, racks(3), null_racks(3), topics, NON_EQUAL_PLAIN, -1)
    a.prefer_rack_aware = True
    verify_both_ways(a, sizes, 3, racks(3), racks(3), topics, NON_EQUAL_PLAIN, 0)
    verify_both_ways(a, sizes, 4, racks(4), racks(3), topics, NON_EQUAL_PLAIN, 0)
    a.prefer_rack_aware = False
    verify_both_ways(a, sizes, 3, racks(3), racks(3), topics, NON_EQUAL_PLAIN, 0)
    verify_both_ways(a, sizes, 3, racks(3), ["d", "e", "f"], topics, NON_EQUAL_PLAIN, -1)
    verify_both_ways(a, sizes, 3, racks(3), [None, "e", "f"], topics, NON_EQUAL_PLAIN, -1)


@pytest.mark.parametrize("cls", STICKY, ids=["sticky", "coop"])
def test_sticky_rack_aware_assignment_with_non_equal_subscription(
    cls: type[StickyAssignor],
) -> None:
    """The second half of Java's case: replicas on some racks only."""
    a = cls()
    sizes = {"t1": 6, "t2": 7, "t3": 2}
    topics = [ALL3, ALL3, ["t1", "t3"]]
    verify_both_ways(
        a, sizes, 1, racks(3), racks(3), topics,
        ["t1-3, t2-0, t2-2, t2-3, t2-6", "t1-4, t2-1, t2-4, t2-5, t3-0", "t1-0, t1-1, t1-2, t1-5, t3-1"],
        4,
    )  # fmt: skip
    verify_both_ways(
        a, sizes, 2, racks(3), racks(3), topics,
        ["t1-3, t2-0, t2-2, t2-5, t2-6", "t1-0, t2-1, t2-3, t2-4, t3-0", "t1-1, t1-2, t1-4, t1-5, t3-1"],
        0,
    )  # fmt: skip
    verify_both_ways(a, sizes, 3, racks(2), racks(3), topics, NON_EQUAL_PLAIN, 5)


@pytest.mark.parametrize("cls", STICKY, ids=["sticky", "coop"])
def test_sticky_rack_aware_non_equal_subscription_with_misaligned_ownership(
    cls: type[StickyAssignor],
) -> None:
    """The last part of Java's case: owned partitions off their member's rack.

    They are freed and placed as if nobody owned them, so locality improves (Java's
    own comment: attempted, not guaranteed); cooperative members give them up first,
    which leaves an intermediate assignment for one round.  Java's test hands the
    ownership over in ``ownedPartitions`` with no user data, which Java's eager
    StickyAssignor ignores (it reads history from user data alone), so for eager
    sticky Java checks fresh answers.  aiogroup's eager assignor falls back to
    ``owned_partitions``; with replicas on one rack each it still lands on Java's
    answer, but with every partition on every rack it keeps what members own where
    Java starts afresh, so that last check is ported for cooperative-sticky only.
    Eager members revoke everything before joining, so a real group never sends
    such a subscription.
    """
    a = cls()
    sizes = {"t1": 6, "t2": 7, "t3": 2}
    topics = [ALL3, ALL3, ["t1", "t3"]]
    owned = ["t1-0, t1-1, t1-2, t1-3, t1-4", "t1-5, t2-0, t2-1, t2-2, t2-3", "t2-4, t2-5, t2-6, t3-0, t3-1"]  # fmt: skip
    aligned = ["t1-3, t2-0, t2-2, t2-3, t2-6", "t1-4, t2-1, t2-4, t2-5, t3-0", "t1-0, t1-1, t1-2, t1-5, t3-1"]  # fmt: skip
    if cls is StickyAssignor:
        verify_rack_assignment(a, sizes, 1, racks(3), racks(3), topics, owned, aligned, 4)
        return
    intermediate = ["t1-3", "t2-1", "t3-1"]
    verify_rack_assignment(a, sizes, 1, racks(3), racks(3), topics, owned, intermediate, 0)
    verify_rack_assignment(a, sizes, 1, racks(3), racks(3), topics, intermediate, aligned, 4)
    # Every partition on every rack: the same as without racks, with or without
    # the forced rack-aware path.
    final = ["t1-2, t1-3, t1-4, t2-4, t2-5", "t2-0, t2-1, t2-2, t2-3, t2-6", "t1-0, t1-1, t1-5, t3-0, t3-1"]  # fmt: skip
    intermediate = ["t1-2, t1-3, t1-4", "t2-0, t2-1, t2-2, t2-3", "t3-0, t3-1"]
    for prefer in (False, True):
        a.prefer_rack_aware = prefer
        verify_rack_assignment(a, sizes, 3, racks(3), racks(3), topics, owned, intermediate, 0)
        verify_rack_assignment(a, sizes, 3, racks(3), racks(3), topics, intermediate, final, 0)


def test_coop_uniform_subscription_transfer_ownership_list_is_right() -> None:
    # Two brokers' racks, one replica each, consumers on racks a and b: each owns two
    # partitions on the other rack, so all four move (two per member).
    cluster = rack_cluster({"topic1": 4}, 1, [ALL_RACKS[0], ALL_RACKS[1]])
    a = CooperativeStickyAssignor()
    subs = {
        "c0": with_history(a, ["topic1"], [tp("topic1", 0), tp("topic1", 1)], 1, rack="a"),
        "c1": with_history(a, ["topic1"], [tp("topic1", 2), tp("topic1", 3)], 1, rack="b"),
    }
    goal = target(a, cluster, subs)
    assert len(transferring_ownership(a, subs, goal)) == 2


def test_range_rack_aware_static_member_range_assignment_persistent_after_member_id_changes() -> (
    None
):
    # Six brokers on racks a, b, c, a, b, c; replication factor 2, both topics placed
    # from broker 0, so partition i has replicas on racks (i, i+1) mod 3.
    brokers = [ALL_RACKS[i % 3] for i in range(6)]
    cluster = Cluster()
    for topic in ("topic1", "topic2"):
        cluster.partitions[topic] = 5
        for i in range(5):
            cluster.replica_racks[tp(topic, i)] = frozenset({brokers[i % 6], brokers[(i + 1) % 6]})
    members = {
        member: MemberSubscription(
            member, instance, ConsumerSubscription(topics=("topic1", "topic2"), rack_id=rack)
        )
        for member, instance, rack in [
            ("consumer1", "instance1", "a"),
            ("consumer2", "instance2", "b"),
            ("consumer3", "instance3", "c"),
        ]
    }
    assignor = RangeAssignor(prefer_rack_aware=True)

    def by_instance() -> dict[str | None, list]:
        result = assignor.assign(cluster, members)
        return {m.group_instance_id: sorted(result[k].partitions) for k, m in members.items()}

    first = by_instance()
    assert first == {
        "instance1": parse("topic1-0 topic1-2 topic2-0 topic2-2"),
        "instance2": parse("topic1-1 topic1-3 topic2-1 topic2-3"),
        "instance3": parse("topic1-4 topic2-4"),
    }
    for old, new in (("consumer3", "consumer4"), ("consumer2", "consumer5")):
        m = members.pop(old)
        members[new] = MemberSubscription(new, m.group_instance_id, m.subscription)
    assert by_instance() == first
