"""Apache Kafka's AbstractStickyAssignorTest, ported: run for sticky and cooperative-sticky.

Each test keeps its Java name (snake_case) and asserts what the Java test asserts,
with Java's exact expected assignments.  Kafka runs most of them under three rack
configurations; with replication factor 3 over 3 racks every partition has a
replica on every rack, so the expected assignments do not change (the rack-aware
cases that do change them are in test_kafka_sticky_racks.py).  Where Java asserts
``partitionsTransferringOwnership`` is null (its general, unequal-subscription
builder does not compute it) there is nothing to port.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from aiogroup._protocol.classic_embedded import ConsumerSubscription
from aiogroup.assignors import CooperativeStickyAssignor, StickyAssignor
from tests.unit.assignors.support import (
    DEFAULT_GENERATION,
    RACK_SETUPS,
    Cluster,
    ClusterBuilder,
    RackSetup,
    assign,
    is_fully_balanced,
    is_sticky,
    members_of,
    name,
    subscription,
    target,
    tp,
    transferring_ownership,
    verify,
    with_history,
)

C, C1, C2, C3, C4 = "consumer", "consumer1", "consumer2", "consumer3", "consumer4"
T, T1, T2, T3 = "topic", "topic1", "topic2", "topic3"
GEN = 1


@pytest.fixture(params=[StickyAssignor, CooperativeStickyAssignor], ids=["sticky", "coop"])
def assignor(request: pytest.FixtureRequest) -> StickyAssignor:
    cls: type[StickyAssignor] = request.param
    return cls(prefer_rack_aware=True)  # Java: initializeRacks sets preferRackAwareLogic


@pytest.fixture(params=RACK_SETUPS, ids=lambda r: r.name)
def racks(request: pytest.FixtureRequest) -> RackSetup:
    setup: RackSetup = request.param
    return setup


def consumer_racks(has_rack: bool) -> RackSetup:
    return RACK_SETUPS[0] if has_rack else RACK_SETUPS[1]


class Group:
    """One test's state: the cluster, the members' subscriptions, and the assignor."""

    def __init__(self, assignor: StickyAssignor, racks: RackSetup | None = None) -> None:
        self.assignor = assignor
        self.builder = ClusterBuilder(racks)
        self.racks = self.builder.racks
        self.subs: dict[str, ConsumerSubscription] = {}
        self.index: dict[str, int] = {}

    @property
    def cluster(self) -> Cluster:
        return self.builder.cluster

    def topic(self, topic: str, count: int) -> Group:
        self.builder.add(topic, count)
        return self

    def fresh(self, member: str, topics: list[str], index: int) -> None:
        self.index[member] = index
        self.subs[member] = subscription(topics, self.racks.consumer_rack(index))

    def owned(
        self, member: str, topics: list[str], partitions: list, generation: int, index: int
    ) -> None:
        self.index[member] = index
        self.subs[member] = with_history(
            self.assignor, topics, partitions, generation, self.racks.consumer_rack(index)
        )

    def assign(self) -> dict:
        return assign(self.assignor, self.cluster, self.subs)

    def transfers(self) -> dict:
        return transferring_ownership(
            self.assignor, self.subs, target(self.assignor, self.cluster, self.subs)
        )

    def verify(self, assignment: dict) -> dict:
        return verify(self.assignor, self.cluster, self.subs, assignment)


def test_member_data(assignor: StickyAssignor) -> None:
    owned = [tp(T1, 0), tp(T2, 1)]
    versions = [1, 2] if isinstance(assignor, CooperativeStickyAssignor) else [0, 1, 2]
    for v in versions:
        sub = with_history(assignor, [T], owned, GEN, version=v)
        claim = assignor.claims(members_of({"m": sub}))["m"]
        assert sorted(claim.partitions) == owned, v
        assert claim.generation_id == GEN, v


@pytest.mark.parametrize("has_rack", [False, True])
def test_one_consumer_no_topic(assignor: StickyAssignor, has_rack: bool) -> None:
    g = Group(assignor, consumer_racks(has_rack))
    g.fresh(C, [], 0)
    a = g.assign()
    assert a == {C: []}
    assert g.transfers() == {}
    a = g.verify(a)
    assert is_fully_balanced(a)


@pytest.mark.parametrize("has_rack", [False, True])
def test_one_consumer_nonexistent_topic(assignor: StickyAssignor, has_rack: bool) -> None:
    g = Group(assignor, consumer_racks(has_rack)).topic(T, 0)
    g.fresh(C, [T], 0)
    a = g.assign()
    assert a == {C: []}
    assert g.transfers() == {}
    assert is_fully_balanced(g.verify(a))


def test_one_consumer_one_topic(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks).topic(T, 3)
    g.fresh(C, [T], 0)
    a = g.assign()
    assert a[C] == [tp(T, 0), tp(T, 1), tp(T, 2)]
    assert g.transfers() == {}
    assert is_fully_balanced(g.verify(a))


def test_only_assigns_partitions_from_subscribed_topics(
    assignor: StickyAssignor, racks: RackSetup
) -> None:
    g = Group(assignor, racks).topic(T, 2)
    g.owned(C, [T], [tp(T, 0), tp(T, 1), tp("other", 0), tp("other", 1)], GEN, 0)
    a = g.assign()
    assert a[C] == [tp(T, 0), tp(T, 1)]
    assert g.transfers() == {}
    assert is_fully_balanced(g.verify(a))


def test_one_consumer_multiple_topics(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks).topic(T1, 1).topic(T2, 2)
    g.fresh(C, [T1, T2], 0)
    a = g.assign()
    assert a[C] == [tp(T1, 0), tp(T2, 0), tp(T2, 1)]
    assert g.transfers() == {}
    assert is_fully_balanced(g.verify(a))


def test_two_consumers_one_topic_one_partition(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks).topic(T, 1)
    g.fresh(C1, [T], 0)
    g.fresh(C2, [T], 1)
    a = g.assign()
    assert g.transfers() == {}
    assert is_fully_balanced(g.verify(a))


def test_two_consumers_one_topic_two_partitions(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks).topic(T, 2)
    g.fresh(C1, [T], 0)
    g.fresh(C2, [T], 1)
    a = g.assign()
    assert a == {C1: [tp(T, 0)], C2: [tp(T, 1)]}
    assert g.transfers() == {}
    assert is_fully_balanced(g.verify(a))


def test_multiple_consumers_mixed_topic_subscriptions(
    assignor: StickyAssignor, racks: RackSetup
) -> None:
    g = Group(assignor, racks).topic(T1, 3).topic(T2, 2)
    g.fresh(C1, [T1], 0)
    g.fresh(C2, [T1, T2], 1)
    g.fresh(C3, [T1], 2)
    a = g.assign()
    assert a == {C1: [tp(T1, 0), tp(T1, 2)], C2: [tp(T2, 0), tp(T2, 1)], C3: [tp(T1, 1)]}
    assert is_fully_balanced(g.verify(a))


def test_two_consumers_two_topics_six_partitions(
    assignor: StickyAssignor, racks: RackSetup
) -> None:
    g = Group(assignor, racks).topic(T1, 3).topic(T2, 3)
    g.fresh(C1, [T1, T2], 0)
    g.fresh(C2, [T1, T2], 1)
    a = g.assign()
    assert a[C1] == [tp(T1, 0), tp(T1, 2), tp(T2, 1)]
    assert a[C2] == [tp(T1, 1), tp(T2, 0), tp(T2, 2)]
    assert g.transfers() == {}
    assert is_fully_balanced(g.verify(a))


def test_consumer_owning_min_quota_expected_max_quota(
    assignor: StickyAssignor, racks: RackSetup
) -> None:
    g = Group(assignor, racks).topic(T1, 2).topic(T2, 3)
    g.owned(C1, [T1, T2], [tp(T1, 0), tp(T2, 1)], GEN, 0)
    g.owned(C2, [T1, T2], [tp(T1, 1), tp(T2, 2)], GEN, 1)
    a = g.assign()
    assert a[C1] == sorted([tp(T1, 0), tp(T2, 1), tp(T2, 0)])
    assert a[C2] == [tp(T1, 1), tp(T2, 2)]
    assert g.transfers() == {}
    assert is_fully_balanced(g.verify(a))


def test_max_quota_consumer_more_than_num_expected_max_capacity_members(
    assignor: StickyAssignor, racks: RackSetup
) -> None:
    g = Group(assignor, racks).topic(T1, 2).topic(T2, 2)
    g.owned(C1, [T1, T2], [tp(T1, 0), tp(T2, 0)], GEN, 0)
    g.owned(C2, [T1, T2], [tp(T1, 1), tp(T2, 1)], GEN, 1)
    g.owned(C3, [T1, T2], [], GEN, 2)
    a = g.assign()
    assert g.transfers() == {tp(T2, 0): C3}
    a = g.verify(a)
    assert a == {C1: [tp(T1, 0)], C2: [tp(T1, 1), tp(T2, 1)], C3: [tp(T2, 0)]}
    assert is_fully_balanced(a)


def test_all_consumers_are_under_min_quota(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks).topic(T1, 2).topic(T2, 3)
    g.owned(C1, [T1, T2], [tp(T1, 0)], GEN, 0)
    g.owned(C2, [T1, T2], [tp(T1, 1)], GEN, 1)
    g.owned(C3, [T1, T2], [], GEN, 2)
    a = g.assign()
    assert g.transfers() == {}
    a = g.verify(a)
    assert a == {C1: [tp(T1, 0), tp(T2, 1)], C2: [tp(T1, 1), tp(T2, 2)], C3: [tp(T2, 0)]}
    assert is_fully_balanced(a)


def test_add_remove_consumer_one_topic(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks).topic(T, 3)
    g.fresh(C1, [T], 0)
    a = g.assign()
    assert a[C1] == [tp(T, 0), tp(T, 1), tp(T, 2)]
    a = g.verify(a)
    assert is_fully_balanced(a)

    g.owned(C1, [T], a[C1], GEN, 0)
    g.owned(C2, [T], [], GEN, 1)
    a = g.assign()
    assert g.transfers() == {tp(T, 2): C2}
    a = g.verify(a)
    assert a == {C1: [tp(T, 0), tp(T, 1)], C2: [tp(T, 2)]}
    assert is_fully_balanced(a)

    del g.subs[C1]
    g.owned(C2, [T], a[C2], GEN, 1)
    a = g.assign()
    a = g.verify(a)
    assert set(a[C2]) == {tp(T, 0), tp(T, 1), tp(T, 2)}
    assert g.transfers() == {}
    assert is_fully_balanced(a)


def _per_topic(a: dict, topic: str) -> set[int]:
    return {sum(1 for p in parts if p.topic == topic) for parts in a.values()}


def test_topic_balance_after_reassignment(assignor: StickyAssignor, racks: RackSetup) -> None:
    both = [T1, T2]
    g = Group(assignor, racks).topic(T1, 12).topic(T2, 12)
    g.fresh(C1, both, 0)
    a = g.assign()
    assert _per_topic(a, T1) == {12} and _per_topic(a, T2) == {12}
    assert g.transfers() == {}
    assert is_fully_balanced(g.verify(a))

    g.owned(C1, both, a[C1], GEN, 0)
    g.owned(C2, both, [], GEN, 1)
    a = g.verify(g.assign())
    assert _per_topic(a, T1) == {6} and _per_topic(a, T2) == {6}
    assert is_fully_balanced(a)

    g.owned(C1, both, a[C1], GEN, 0)
    g.owned(C2, both, a[C2], GEN, 1)
    g.owned(C3, both, [], GEN, 2)
    g.owned(C4, both, [], GEN, 3)
    a = g.verify(g.assign())
    assert _per_topic(a, T1) == {3} and _per_topic(a, T2) == {3}
    assert is_fully_balanced(a)

    del g.subs[C1], g.subs[C2]
    g.owned(C3, both, a[C3], GEN, 2)
    g.owned(C4, both, a[C4], GEN, 3)
    a = g.assign()
    a = g.verify(a)
    assert _per_topic(a, T1) == {6} and _per_topic(a, T2) == {6}
    assert g.transfers() == {}
    assert is_fully_balanced(a)


def test_add_remove_two_consumers_two_topics(assignor: StickyAssignor, racks: RackSetup) -> None:
    both = [T1, T2]
    g = Group(assignor, racks).topic(T1, 3).topic(T2, 4)
    g.fresh(C1, both, 0)
    g.fresh(C2, both, 1)
    a = g.assign()
    assert a[C1] == [tp(T1, 0), tp(T1, 2), tp(T2, 1), tp(T2, 3)]
    assert a[C2] == [tp(T1, 1), tp(T2, 0), tp(T2, 2)]
    assert g.transfers() == {}
    a = g.verify(a)
    assert is_fully_balanced(a)

    g.owned(C1, both, a[C1], GEN, 0)
    g.owned(C2, both, a[C2], GEN, 1)
    g.owned(C3, both, [], GEN, 2)
    g.owned(C4, both, [], GEN, 3)
    a = g.assign()
    assert g.transfers() == {tp(T1, 2): C3, tp(T2, 3): C3, tp(T2, 2): C4}
    a = g.verify(a)
    assert a == {
        C1: [tp(T1, 0), tp(T2, 1)],
        C2: [tp(T1, 1), tp(T2, 0)],
        C3: [tp(T1, 2), tp(T2, 3)],
        C4: [tp(T2, 2)],
    }
    assert is_fully_balanced(a)

    del g.subs[C1], g.subs[C2]
    g.owned(C3, both, a[C3], GEN, 2)
    g.owned(C4, both, a[C4], GEN, 3)
    a = g.assign()
    a = g.verify(a)
    assert a == {
        C3: [tp(T1, 0), tp(T1, 2), tp(T2, 1), tp(T2, 3)],
        C4: [tp(T1, 1), tp(T2, 0), tp(T2, 2)],
    }
    assert g.transfers() == {}
    assert is_fully_balanced(a)


def test_poor_round_robin_assignment_scenario(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks)
    for i in range(1, 6):
        g.topic(f"topic{i}", i % 2 + 1)
    all_five = [f"topic{i}" for i in range(1, 6)]
    odd = ["topic1", "topic3", "topic5"]
    g.fresh("consumer1", all_five, 0)
    g.fresh("consumer2", odd, 1)
    g.fresh("consumer3", odd, 2)
    g.fresh("consumer4", all_five, 3)
    g.verify(g.assign())


def test_add_remove_topic_two_consumers(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks).topic(T, 3)
    g.fresh(C1, [T], 0)
    g.fresh(C2, [T], 1)
    a = g.assign()
    assert g.transfers() == {}
    a = g.verify(a)
    assert is_fully_balanced(a)
    first1, first2 = a[C1], a[C2]
    assert sorted([len(first1), len(first2)]) == [1, 2]

    g.topic(T2, 3)
    g.owned(C1, [T, T2], a[C1], GEN, 0)
    g.owned(C2, [T, T2], a[C2], GEN, 1)
    a = g.assign()
    assert g.transfers() == {}
    a = g.verify(a)
    assert is_fully_balanced(a)
    second1, second2 = a[C1], a[C2]
    assert len(second1) == 3 and len(second2) == 3
    assert set(first1) <= set(second1) and set(first2) <= set(second2)

    g.builder.remove(T)
    g.owned(C1, [T2], a[C1], GEN, 0)
    g.owned(C2, [T2], a[C2], GEN, 1)
    a = g.assign()
    assert g.transfers() == {}
    a = g.verify(a)
    assert is_fully_balanced(a)
    assert sorted([len(a[C1]), len(a[C2])]) == [1, 2]
    assert set(a[C1]) <= set(second1) and set(a[C2]) <= set(second2)


def _resubscribe_all(g: Group, a: dict) -> None:
    for member, sub in list(g.subs.items()):
        g.owned(member, list(sub.topics), a[member], GEN, g.index[member])


def test_reassignment_after_one_consumer_leaves(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks)
    for i in range(1, 20):
        g.topic(name("t", i, 20), i)
    for i in range(1, 20):
        g.fresh(name("c", i, 20), [name("t", j, 20) for j in range(1, i + 1)], i)
    a = g.verify(g.assign())
    _resubscribe_all(g, a)
    del g.subs["c10"]
    a = g.assign()
    verified = g.verify(a)
    assert is_sticky(assignor, g.subs, verified)


def test_reassignment_after_one_consumer_added(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks).topic("topic", 20)
    for i in range(1, 10):
        g.fresh(name("c", i, 10), ["topic"], i)
    a = g.assign()
    assert g.transfers() == {}
    g.verify(a)
    g.fresh(name("c", 10, 10), ["topic"], 10)
    a = g.assign()
    assert g.transfers() == {}
    g.verify(a)


def test_same_subscriptions(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks)
    for i in range(1, 15):
        g.topic(name("t", i, 15), i)
    every = [name("t", j, 15) for j in range(1, 15)]
    for i in range(1, 9):
        g.fresh(name("c", i, 9), every, i)
    a = g.assign()
    assert g.transfers() == {}
    a = g.verify(a)
    _resubscribe_all(g, a)
    del g.subs[name("c", 5, 9)]
    a = g.assign()
    assert g.transfers() == {}
    g.verify(a)


def _large_group(
    g: Group,
    topic_count: int,
    partitions: int,
    consumers: int,
    subs: Callable[[int, list[str]], list[str]],
) -> None:
    topics = [name("t", i, topic_count) for i in range(topic_count)]
    for t in topics:
        g.topic(t, partitions)
    for i in range(consumers):
        g.fresh(name("c", i, consumers), subs(i, topics), i)


def _second_generation(g: Group, a: dict, consumers: int) -> None:
    for i in range(1, consumers):
        member = name("c", i, consumers)
        g.owned(member, list(g.subs[member].topics), a[member], GEN, i)


@pytest.mark.scale
@pytest.mark.parametrize("has_rack", [False, True])
def test_large_assignment_and_group_with_uniform_subscription(
    assignor: StickyAssignor, has_rack: bool
) -> None:
    # Java: 500 topics x 2,000 partitions (one million) without racks, 50 x 2,000 with,
    # over 2,000 consumers, within a 30 s timeout.
    g = Group(assignor, consumer_racks(has_rack))
    _large_group(g, 50 if has_rack else 500, 2_000, 2_000, lambda i, topics: topics)
    a = g.assign()
    assert is_fully_balanced(a)
    _second_generation(g, a, 2_000)
    a = g.assign()
    assert is_fully_balanced(a)
    assert len({p for parts in a.values() for p in parts}) == sum(map(len, a.values()))


@pytest.mark.scale
@pytest.mark.parametrize("has_rack", [False, True])
def test_large_assignment_and_group_with_non_equal_subscription(
    assignor: StickyAssignor, has_rack: bool
) -> None:
    g = Group(assignor, consumer_racks(has_rack))
    last = 2_000 - 1
    _large_group(
        g,
        50 if has_rack else 500,
        2_000,
        2_000,
        lambda i, topics: topics[:1] if i == last else topics,
    )
    a = g.assign()
    _second_generation(g, a, 2_000)
    a = g.assign()
    assert len({p for parts in a.values() for p in parts}) == sum(map(len, a.values()))


@pytest.mark.scale
@pytest.mark.parametrize("has_rack", [False, True])
def test_assignment_and_group_with_non_equal_subscription_not_timeout(
    assignor: StickyAssignor, has_rack: bool
) -> None:
    count = 50 if has_rack else 100

    def subs(i: int, topics: list[str]) -> list[str]:
        return topics[: count // 2] if i % 4 == 0 else topics[count // 2 :]

    g = Group(assignor, consumer_racks(has_rack))
    _large_group(g, count, 200, 500, subs)
    a = g.assign()
    _second_generation(g, a, 500)
    a = g.assign()
    check = dict(a)
    assert len({p for parts in check.values() for p in parts}) == sum(map(len, a.values()))


def test_subscription_not_equal_and_assign_same_partition_with_3_generation(
    assignor: StickyAssignor,
) -> None:
    for gens in ([1, 2, 3], [1, 3, 2], [2, 1, 3], [2, 3, 1], [3, 1, 2], [3, 2, 1]):
        g = Group(assignor).topic(T, 6).topic(T1, 1)
        g.owned(C1, [T], [tp(T, 0), tp(T, 2)], gens[0], 0)
        g.owned(C2, [T], [tp(T, 1), tp(T, 2), tp(T, 3)], gens[1], 1)
        g.owned(C3, [T], [tp(T, 2), tp(T, 4), tp(T, 5)], gens[2], 2)
        g.owned(C4, [T1], [tp(T1, 0)], 2, 3)
        a = g.assign()
        every = [p for parts in a.values() for p in parts]
        assert len(every) == len(set(every))
        for parts in a.values():
            assert 1 <= len(parts) <= 2, a


@pytest.mark.parametrize("has_rack", [False, True])
def test_large_assignment_with_multiple_consumers_leaving_and_random_subscription(
    assignor: StickyAssignor, has_rack: bool
) -> None:
    rand = random.Random(20240223 + has_rack)
    g = Group(assignor, consumer_racks(has_rack))
    topic_count, consumer_count = 40, 200
    for i in range(topic_count):
        g.topic(name("t", i, topic_count), rand.randrange(10) + 1)
    for i in range(consumer_count):
        topics = [
            name("t", rand.randrange(topic_count), topic_count) for _ in range(rand.randrange(20))
        ]
        g.fresh(name("c", i, consumer_count), topics, i)
    a = g.assign()
    _second_generation(g, a, consumer_count)
    for _ in range(50):
        g.subs.pop(name("c", rand.randrange(consumer_count), consumer_count), None)
    a = g.assign()
    a = g.verify(a)
    assert is_sticky(assignor, g.subs, a)


def test_new_subscription(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks)
    for i in range(1, 5):
        g.topic(name("t", i, 5), 1)
    for i in range(3):
        g.fresh(name("c", i, 3), [name("t", j, 5) for j in range(i, 3 * i - 1)], i)
    g.verify(g.assign())
    c0 = name("c", 0, 3)
    g.fresh(c0, [*g.subs[c0].topics, name("t", 1, 5)], 0)
    a = g.verify(g.assign())
    assert is_sticky(assignor, g.subs, a)


def test_move_existing_assignments(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks)
    for i in range(1, 7):
        g.topic(f"topic{i}", 1)
    g.owned(C1, ["topic1", "topic2"], [tp("topic1", 0)], GEN, 0)
    g.owned(
        C2, ["topic1", "topic2", "topic3", "topic4"], [tp("topic2", 0), tp("topic3", 0)], GEN, 1
    )
    g.owned(
        C3,
        ["topic2", "topic3", "topic4", "topic5", "topic6"],
        [tp("topic4", 0), tp("topic5", 0), tp("topic6", 0)],
        GEN,
        2,
    )
    g.verify(g.assign())


def test_stickiness(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks).topic(T1, 3)
    for i, c in enumerate([C1, C2, C3, C4]):
        g.fresh(c, [T1], i)
    a = g.assign()
    assert g.transfers() == {}
    a = g.verify(a)
    assert all(len(parts) <= 1 for parts in a.values())
    before = {c: parts[0] for c, parts in a.items() if parts}

    del g.subs[C1]
    for i, c in enumerate([C2, C3, C4], start=1):
        g.owned(c, [T1], a[c], GEN, i)
    a = g.assign()
    assert g.transfers() == {}
    a = g.verify(a)
    for c, parts in a.items():
        assert len(parts) == 1
        assert c not in before or before[c] in parts, f"{c} lost its partition"


def test_assignment_updated_for_deleted_topic(assignor: StickyAssignor, racks: RackSetup) -> None:
    g = Group(assignor, racks).topic(T1, 1).topic(T3, 100)
    g.fresh(C, [T1, T2, T3], 0)
    a = g.assign()
    assert g.transfers() == {}
    assert sum(map(len, a.values())) == 101
    assert set(a) == {C}
    assert is_fully_balanced(a)


def test_no_exception_thrown_when_only_subscribed_topic_deleted(
    assignor: StickyAssignor, racks: RackSetup
) -> None:
    g = Group(assignor, racks).topic(T, 3)
    g.fresh(C, [T], 0)
    a = g.assign()
    assert g.transfers() == {}
    g.owned(C, [T], a[C], GEN, 0)
    g.builder.remove(T)
    a = g.assign()
    assert g.transfers() == {}
    assert a == {C: []}


def _random_sublist(rand: random.Random, items: list[str]) -> list[str]:
    chosen = list(items)
    for _ in range(rand.randrange(len(items))):
        chosen.pop(rand.randrange(len(chosen)))
    return sorted(chosen)


def test_reassignment_with_random_subscriptions_and_changes(
    assignor: StickyAssignor, racks: RackSetup
) -> None:
    rand = random.Random(16 + len(racks.name))
    for _ in range(100):
        g = Group(type(assignor)(prefer_rack_aware=True), racks)
        num_topics = 10 + rand.randrange(10)
        topics = [name("t", i, 20) for i in range(num_topics)]
        for i, t in enumerate(topics):
            g.topic(t, i + 1)
        num_consumers = 20 + rand.randrange(20)
        for i in range(num_consumers):
            g.fresh(name("c", i, 40), _random_sublist(rand, topics), i)
        a = g.verify(g.assign())
        for i in range(num_consumers):
            c = name("c", i, 40)
            g.owned(c, _random_sublist(rand, topics), a[c], GEN, i)
        a = g.verify(g.assign())
        assert is_sticky(g.assignor, g.subs, a)


def test_all_consumers_reach_expected_quota_and_are_considered_filled(
    assignor: StickyAssignor, racks: RackSetup
) -> None:
    g = Group(assignor, racks).topic(T, 4)
    g.owned(C1, [T], [tp(T, 0), tp(T, 1)], GEN, 0)
    g.owned(C2, [T], [tp(T, 2)], GEN, 1)
    g.owned(C3, [T], [], GEN, 2)
    a = g.assign()
    assert a == {C1: [tp(T, 0), tp(T, 1)], C2: [tp(T, 2)], C3: [tp(T, 3)]}
    assert g.transfers() == {}
    assert is_fully_balanced(g.verify(a))


@pytest.mark.parametrize("stale", [10 - 1, DEFAULT_GENERATION], ids=["stale", "no_generation"])
def test_owned_partitions_are_invalidated_for_consumer_with_stale_or_no_generation(
    assignor: StickyAssignor, racks: RackSetup, stale: int
) -> None:
    # Java: testOwnedPartitionsAreInvalidatedForConsumerWithStaleGeneration and
    # ...WithNoGeneration (the same case with DEFAULT_GENERATION).
    claimed = [tp(T, 0), tp(T, 2), tp(T2, 1)]
    g = Group(assignor, racks).topic(T, 3).topic(T2, 3)
    g.owned(C1, [T, T2], claimed, 10, 0)
    g.owned(C2, [T, T2], claimed, stale, 1)
    a = g.assign()
    assert set(a[C1]) == set(claimed)
    assert set(a[C2]) == {tp(T, 1), tp(T2, 0), tp(T2, 2)}
    assert g.transfers() == {}
    assert is_fully_balanced(g.verify(a))


def test_partitions_transferring_ownership_include_the_partition_claimed_by_multiple_consumers_in_same_generation(  # noqa: E501
    assignor: StickyAssignor, racks: RackSetup
) -> None:
    g = Group(assignor, racks).topic(T, 3)
    g.owned(C1, [T], [tp(T, 0), tp(T, 1)], GEN, 0)
    g.owned(C2, [T], [tp(T, 0), tp(T, 2)], GEN, 1)
    g.owned(C3, [T], [], GEN, 2)
    a = g.assign()
    assert g.transfers() == {tp(T, 0): C3}
    a = g.verify(a)
    assert a == {C1: [tp(T, 1)], C2: [tp(T, 2)], C3: [tp(T, 0)]}
    assert is_fully_balanced(a)


def test_ensure_partitions_assigned_to_highest_generation(
    assignor: StickyAssignor, racks: RackSetup
) -> None:
    every = [T, T2, T3]
    g = Group(assignor, racks).topic(T, 3).topic(T2, 3).topic(T3, 3)
    g.owned(C1, every, [tp(T, 0), tp(T2, 0), tp(T3, 0)], 10, 0)
    g.owned(C2, every, [tp(T, 1), tp(T2, 1), tp(T3, 1)], 9, 1)
    g.owned(C3, every, [tp(T2, 1), tp(T3, 0), tp(T3, 2)], 8, 1)
    a = g.assign()
    assert set(a[C1]) == {tp(T, 0), tp(T2, 0), tp(T3, 0)}
    assert set(a[C2]) == {tp(T, 1), tp(T2, 1), tp(T3, 1)}
    assert set(a[C3]) == {tp(T, 2), tp(T2, 2), tp(T3, 2)}
    assert g.transfers() == {}
    assert is_fully_balanced(g.verify(a))


def test_no_reassignment_on_current_members(assignor: StickyAssignor, racks: RackSetup) -> None:
    every = [T, T2, T3, T1]
    g = Group(assignor, racks).topic(T, 3).topic(T1, 3).topic(T2, 3).topic(T3, 3)
    g.owned(C1, every, [], DEFAULT_GENERATION, 0)
    g.owned(C2, every, [tp(T, 0), tp(T2, 0), tp(T1, 0)], 9, 1)
    g.owned(C3, every, [tp(T3, 2), tp(T2, 2), tp(T1, 1)], 8, 2)
    g.owned(C4, every, [tp(T3, 1), tp(T, 1), tp(T, 2)], 7, 3)
    a = g.assign()
    assert set(a[C1]) == {tp(T1, 2), tp(T2, 1), tp(T3, 0)}
    assert g.transfers() == {}
    assert is_fully_balanced(g.verify(a))


def test_owned_partitions_are_invalidated_for_consumer_with_multiple_generation(
    assignor: StickyAssignor, racks: RackSetup
) -> None:
    g = Group(assignor, racks).topic(T, 3).topic(T2, 3)
    g.owned(C1, [T, T2], [tp(T, 0), tp(T2, 1), tp(T, 1)], 10, 0)
    g.owned(C2, [T, T2], [tp(T, 0), tp(T2, 1), tp(T2, 2)], 8, 1)
    a = g.assign()
    assert set(a[C1]) == {tp(T, 0), tp(T2, 1), tp(T, 1)}
    assert set(a[C2]) == {tp(T, 2), tp(T2, 2), tp(T2, 0)}
    assert g.transfers() == {}
    assert is_fully_balanced(g.verify(a))
