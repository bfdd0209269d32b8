"""Apache Kafka's StickyAssignorTest and CooperativeStickyAssignorTest, ported.

The cases each Java class adds to the shared AbstractStickyAssignorTest suite
(test_kafka_sticky_common.py): how each assignor reads a member's history, the
cooperative hold-back of contested partitions, and the multi-generation cases.
"""

from __future__ import annotations

import pytest
from aiokafka.protocol.struct import Struct
from aiokafka.protocol.types import Array, Int32, Schema, String

from aiogroup._protocol.classic_embedded import ConsumerAssignment, ConsumerSubscription
from aiogroup.assignors import CooperativeStickyAssignor, StickyAssignor
from tests.unit.assignors.support import (
    DEFAULT_GENERATION,
    RACK_SETUPS,
    RackSetup,
    members_of,
    tp,
)
from tests.unit.assignors.test_kafka_sticky_common import Group

C1, C2, C3 = "consumer1", "consumer2", "consumer3"
T, T1, T2, T3 = "topic", "topic1", "topic2", "topic3"
GEN = 1


@pytest.fixture(params=RACK_SETUPS, ids=lambda r: r.name)
def racks(request: pytest.FixtureRequest) -> RackSetup:
    setup: RackSetup = request.param
    return setup


RACK_AND_SUBSCRIPTION = [
    pytest.param(r, equal, id=f"{r.name}-{'equal' if equal else 'unequal'}")
    for equal in (True, False)
    for r in RACK_SETUPS
]


def sizes(a: dict) -> list[int]:
    return [len(a[m]) for m in sorted(a)]


# --- StickyAssignorTest -----------------------------------------------------------


@pytest.mark.parametrize(
    ("count", "expected_c1"),
    [(3, [tp(T, 1)]), (4, [tp(T, 1), tp(T, 3)])],
    ids=["equal_partitions_per_consumer", "unequal_partitions_per_consumer"],
)
def test_sticky_all_consumers_have_owned_partition_invalidated_when_claimed_by_multiple_consumers_in_same_generation(  # noqa: E501
    racks: RackSetup, count: int, expected_c1: list
) -> None:
    g = Group(StickyAssignor(prefer_rack_aware=True), racks).topic(T, count)
    g.owned(C1, [T], [tp(T, 0), tp(T, 1)], GEN, 0)
    g.owned(C2, [T], [tp(T, 0), tp(T, 2)], GEN, 1)
    g.owned(C3, [T], [], GEN, 2)
    a = g.verify(g.assign())
    assert a == {C1: expected_c1, C2: [tp(T, 2)], C3: [tp(T, 0)]}


@pytest.mark.parametrize(("racks", "equal"), RACK_AND_SUBSCRIPTION)
def test_sticky_assignment_with_multiple_generations1(racks: RackSetup, equal: bool) -> None:
    every = [T, T2]
    c2_topics = every if equal else [T]
    g = Group(StickyAssignor(prefer_rack_aware=True), racks).topic(T, 6).topic(T2, 6)
    g.fresh(C1, every, 0)
    g.fresh(C2, c2_topics, 1)
    g.fresh(C3, every, 2)
    a = g.verify(g.assign())
    r1 = dict(a)
    assert sizes(a) == [4, 4, 4]

    g.owned(C1, every, r1[C1], GEN, 0)
    g.owned(C2, c2_topics, r1[C2], GEN, 1)
    del g.subs[C3]
    a = g.verify(g.assign())
    r2 = dict(a)
    assert sizes(a) == [6, 6]
    if equal:
        assert set(r1[C1]) <= set(r2[C1])
    assert set(r1[C2]) <= set(r2[C2])
    assert set(r2[C2]) & set(r1[C3])

    del g.subs[C1]
    g.owned(C2, c2_topics, r2[C2], 2, 1)
    g.owned(C3, every, r1[C3], 1, 2)
    a = g.verify(g.assign())
    assert sizes(a) == [6, 6]
    assert not set(a[C2]) & set(a[C3])


@pytest.mark.parametrize(("racks", "equal"), RACK_AND_SUBSCRIPTION)
def test_sticky_assignment_with_multiple_generations2(racks: RackSetup, equal: bool) -> None:
    every = [T, T2, T3]
    c1_topics = every if equal else [T]
    c3_topics = every if equal else [T, T2]
    g = Group(StickyAssignor(prefer_rack_aware=True), racks).topic(T, 4).topic(T2, 4).topic(T3, 4)
    g.fresh(C1, c1_topics, 0)
    g.fresh(C2, every, 1)
    g.fresh(C3, c3_topics, 2)
    r1 = g.verify(g.assign())
    assert sizes(r1) == [4, 4, 4]

    del g.subs[C1], g.subs[C3]
    g.owned(C2, every, r1[C2], 1, 1)
    r2 = g.verify(g.assign())
    assert len(r2[C2]) == 12
    assert set(r1[C2]) <= set(r2[C2])

    g.owned(C1, c1_topics, r1[C1], 1, 0)
    g.owned(C2, every, r2[C2], 2, 1)
    g.owned(C3, c3_topics, r1[C3], 1, 2)
    r3 = g.verify(g.assign())
    assert sizes(r3) == [4, 4, 4]


@pytest.mark.parametrize(("racks", "equal"), RACK_AND_SUBSCRIPTION)
def test_sticky_assignment_with_conflicting_previous_generations(
    racks: RackSetup, equal: bool
) -> None:
    every = [T, T2, T3]
    c1_topics = every if equal else [T]
    c2_topics = every if equal else [T, T2]
    g = Group(StickyAssignor(prefer_rack_aware=True), racks).topic(T, 4).topic(T2, 4).topic(T3, 4)
    c1_owned = (
        [tp(T, 0), tp(T, 1), tp(T, 2), tp(T2, 2), tp(T2, 3), tp(T3, 0)]
        if equal
        else [tp(T, 0), tp(T, 1), tp(T, 2), tp(T, 3)]
    )
    c2_owned = [tp(T, 0), tp(T, 1), tp(T2, 0), tp(T2, 1), tp(T2, 2), tp(T2, 3)]
    c3_owned = [tp(T, 2), tp(T, 3), tp(T3, 0), tp(T3, 1), tp(T3, 2), tp(T3, 3)]
    g.owned(C1, c1_topics, c1_owned, 1, 0)
    g.owned(C2, c2_topics, c2_owned, 2, 1)
    g.owned(C3, every, c3_owned, 2, 2)
    a = g.verify(g.assign())
    assert sizes(a) == [4, 4, 4]
    assert set(a[C2]) <= set(c2_owned)
    assert set(a[C3]) <= set(c3_owned)


class _StickyUserDataV0(Struct):  # type: ignore[misc]
    """StickyAssignor's first user-data layout: the previous assignment, no generation."""

    SCHEMA = Schema(
        ("previous_assignment", Array(("topic", String("utf-8")), ("partitions", Array(Int32)))),
    )


def test_sticky_schema_backward_compatibility(racks: RackSetup) -> None:
    g = Group(StickyAssignor(prefer_rack_aware=True), racks).topic(T, 3)
    g.fresh(C3, [T], 2)
    g.owned(C1, [T], [tp(T, 0), tp(T, 2)], 1, 0)
    old_layout = _StickyUserDataV0([(T, [1])]).encode()
    g.subs[C2] = ConsumerSubscription(
        topics=(T,), user_data=old_layout, rack_id=racks.consumer_rack(1)
    )
    a = g.verify(g.assign())
    assert sizes(a) == [1, 1, 1]
    assert set(a[C1]) <= {tp(T, 0), tp(T, 2)}
    assert set(a[C2]) <= {tp(T, 1)}


def test_sticky_member_data_with_inconsistent_data(racks: RackSetup) -> None:
    assignor = StickyAssignor()
    assignor.on_assignment(ConsumerAssignment((tp(T, 1),)), GEN)
    user_data = assignor.subscription_user_data(frozenset({T}))
    sub = ConsumerSubscription(topics=(T,), user_data=user_data, owned_partitions=(tp(T, 0),))
    claim = assignor.claims(members_of({"m": sub}))["m"]
    # The eager sticky assignor always honours what user_data says.
    assert list(claim.partitions) == [tp(T, 1)]
    assert claim.generation_id == GEN


def test_sticky_member_data_will_honor_user_data() -> None:
    from aiogroup.assignors.sticky import encode_sticky_user_data

    owned = [tp(T1, 0), tp(T2, 1)]
    sub = ConsumerSubscription(
        topics=(T,),
        user_data=encode_sticky_user_data(owned, GEN - 1),
        owned_partitions=(),
        generation_id=GEN,
    )
    claim = StickyAssignor().claims(members_of({"m": sub}))["m"]
    assert sorted(claim.partitions) == owned
    assert claim.generation_id == GEN - 1


def test_sticky_assignor_with_old_version_subscriptions() -> None:
    g = Group(StickyAssignor()).topic(T1, 3)
    g.subs[C1] = _versioned(g, [T1], [tp(T1, 0)], 0)
    g.subs[C2] = _versioned(g, [T1], [tp(T1, 1)], 1)
    g.owned(C3, [T1], [], GEN, 2)
    a = g.verify(g.assign())
    assert a == {C1: [tp(T1, 0)], C2: [tp(T1, 1)], C3: [tp(T1, 2)]}


def _versioned(g: Group, topics: list[str], owned: list, version: int) -> ConsumerSubscription:
    from tests.unit.assignors.support import with_history

    return with_history(g.assignor, topics, owned, GEN, version=version)


# --- CooperativeStickyAssignorTest --------------------------------------------------


def _claim_generation(assignor: CooperativeStickyAssignor, sub: ConsumerSubscription) -> int:
    return assignor.claims(members_of({"m": sub}))["m"].generation_id


def test_coop_encode_and_decode_generation() -> None:
    assignor = CooperativeStickyAssignor()
    sub = ConsumerSubscription(
        topics=(T,), user_data=assignor.subscription_user_data(frozenset({T})), version=1
    )
    assert _claim_generation(assignor, sub) == DEFAULT_GENERATION
    assignor.on_assignment(ConsumerAssignment(()), 10)
    sub = ConsumerSubscription(
        topics=(T,), user_data=assignor.subscription_user_data(frozenset({T})), version=1
    )
    assert _claim_generation(assignor, sub) == 10


def test_coop_decode_generation() -> None:
    sub = ConsumerSubscription(topics=(T,), version=1)
    assert _claim_generation(CooperativeStickyAssignor(), sub) == DEFAULT_GENERATION


@pytest.mark.parametrize(
    ("count", "expected_c1"),
    [(3, [tp(T, 1)]), (4, [tp(T, 1), tp(T, 3)])],
    ids=["equal_partitions_per_consumer", "unequal_partitions_per_consumer"],
)
def test_coop_all_consumers_have_owned_partition_invalidated_when_claimed_by_multiple_consumers_in_same_generation(  # noqa: E501
    racks: RackSetup, count: int, expected_c1: list
) -> None:
    g = Group(CooperativeStickyAssignor(prefer_rack_aware=True), racks).topic(T, count)
    g.owned(C1, [T], [tp(T, 0), tp(T, 1)], GEN, 0)
    g.owned(C2, [T], [tp(T, 0), tp(T, 2)], GEN, 1)
    g.owned(C3, [T], [], GEN, 2)
    a = g.assign()
    # topic-0 still counts as owned by both, so nobody gets it until both revoke it.
    assert a == {C1: expected_c1, C2: [tp(T, 2)], C3: []}
    g.verify(a)


def test_coop_member_data_with_inconsistent_data() -> None:
    assignor = CooperativeStickyAssignor()
    assignor.on_assignment(ConsumerAssignment((tp(T, 1),)), GEN)
    user_data = assignor.subscription_user_data(frozenset({T}))
    sub = ConsumerSubscription(
        topics=(T,), user_data=user_data, owned_partitions=(tp(T, 0),), version=1
    )
    claim = assignor.claims(members_of({"m": sub}))["m"]
    # Cooperative user_data carries only the generation; owned partitions come from
    # the subscription.
    assert list(claim.partitions) == [tp(T, 0)]
    assert claim.generation_id == GEN


@pytest.mark.parametrize("user_data_generation", [GEN, GEN - 1], ids=["equal", "higher"])
def test_coop_member_data_with_empty_partitions(user_data_generation: int) -> None:
    # Java: testMemberDataWithEmptyPartitionsAndEqualGeneration / ...AndHigherGeneration.
    helper = CooperativeStickyAssignor()
    helper.on_assignment(ConsumerAssignment((tp(T1, 0), tp(T2, 1))), user_data_generation)
    sub = ConsumerSubscription(
        topics=(T,),
        user_data=helper.subscription_user_data(frozenset({T})),
        owned_partitions=(),
        generation_id=GEN,
    )
    claim = CooperativeStickyAssignor().claims(members_of({"m": sub}))["m"]
    assert list(claim.partitions) == []
    assert claim.generation_id == GEN


def test_coop_assignor_with_old_version_subscriptions() -> None:
    g = Group(CooperativeStickyAssignor()).topic(T1, 3)
    g.subs[C1] = _versioned(g, [T1], [tp(T1, 0)], 1)
    g.subs[C2] = _versioned(g, [T1], [tp(T1, 1)], 1)
    g.owned(C3, [T1], [], GEN, 2)
    a = g.verify(g.assign())
    assert a == {C1: [tp(T1, 0)], C2: [tp(T1, 1)], C3: [tp(T1, 2)]}
