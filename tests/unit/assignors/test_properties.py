"""Property tests: every assignor over random groups, subscriptions and prior ownership."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, replace

from hypothesis import given
from hypothesis import strategies as st

from aiogroup._protocol.classic_embedded import ConsumerAssignment, ConsumerSubscription
from aiogroup.assignors import (
    ConsumerPartitionAssignor,
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from aiogroup.structs import TopicPartition

ALL_ASSIGNORS = (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)


class Cluster:
    def __init__(self, partitions: Mapping[str, int]) -> None:
        self.partitions = dict(partitions)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        if topic not in self.partitions:
            return None
        return set(range(self.partitions[topic]))

    def all_of(self, topics: frozenset[str]) -> set[TopicPartition]:
        return {
            TopicPartition(t, p)
            for t in topics
            if t in self.partitions
            for p in range(self.partitions[t])
        }


@dataclass
class Scenario:
    cluster: Cluster
    members: dict[str, MemberSubscription]
    equal_subscriptions: bool

    def topics_of(self, member_id: str) -> frozenset[str]:
        return frozenset(self.members[member_id].subscription.topics)

    def subscribed_partitions(self) -> set[TopicPartition]:
        return self.cluster.all_of(frozenset().union(*map(self.topics_of, self.members)))


@st.composite
def scenarios(draw: st.DrawFn, equal: bool | None = None) -> Scenario:
    topic_counts = draw(st.lists(st.integers(1, 16), min_size=1, max_size=4))
    cluster = Cluster({f"t{i}": n for i, n in enumerate(topic_counts)})
    names = [*cluster.partitions, "gone"]  # "gone" is subscribed to but does not exist
    every = sorted(cluster.all_of(frozenset(names)) | {TopicPartition("t0", 99)})
    member_count = draw(st.integers(1, 8))
    if equal is None:
        equal = draw(st.booleans())
    shared = draw(st.sets(st.sampled_from(names), min_size=1))
    members = {}
    for i in range(member_count):
        member_id = f"member-{draw(st.integers(0, 10**6))}-{i}"
        instance = draw(st.none() | st.sampled_from([f"static-{i}", f"s{9 - i}"]))
        topics = shared if equal else draw(st.sets(st.sampled_from(names), min_size=1))
        owned = draw(st.sets(st.sampled_from(every), max_size=12))
        members[member_id] = MemberSubscription(
            member_id,
            instance,
            ConsumerSubscription(
                tuple(sorted(topics)),
                owned_partitions=tuple(sorted(owned)),
                generation_id=draw(st.integers(-1, 4)),
            ),
        )
    return Scenario(cluster, members, equal)


def counts(result: Mapping[str, ConsumerAssignment]) -> list[int]:
    return [len(asg.partitions) for asg in result.values()]


def valid_owners(scenario: Scenario) -> dict[TopicPartition, str]:
    """Independent oracle: the unique highest-generation claim on a subscribed partition."""
    best: dict[TopicPartition, list[tuple[int, str]]] = {}
    for member_id, m in scenario.members.items():
        mine = scenario.cluster.all_of(scenario.topics_of(member_id))
        for tp in set(m.subscription.owned_partitions) & mine:
            best.setdefault(tp, []).append((m.subscription.generation_id, member_id))
    owners = {}
    for tp, claims in best.items():
        top = max(g for g, _ in claims)
        winners = [member_id for g, member_id in claims if g == top]
        if len(winners) == 1:
            owners[tp] = winners[0]
    return owners


def check_shape(scenario: Scenario, result: Mapping[str, ConsumerAssignment]) -> None:
    """Every member present; only its subscribed, existing partitions; nothing twice."""
    assert set(result) == set(scenario.members)
    seen: set[TopicPartition] = set()
    for member_id, asg in result.items():
        assert set(asg.partitions) <= scenario.cluster.all_of(scenario.topics_of(member_id))
        assert not seen & set(asg.partitions)
        assert len(set(asg.partitions)) == len(asg.partitions)
        seen |= set(asg.partitions)


def assigned(result: Mapping[str, ConsumerAssignment]) -> set[TopicPartition]:
    return {tp for asg in result.values() for tp in asg.partitions}


def locally_balanced(scenario: Scenario, result: Mapping[str, ConsumerAssignment]) -> bool:
    """No member could take a partition from one holding two or more more than it."""
    for asg_a in result.values():
        for b, asg_b in result.items():
            if len(asg_a.partitions) >= len(asg_b.partitions) + 2 and any(
                tp.topic in scenario.topics_of(b) for tp in asg_a.partitions
            ):
                return False
    return True


def follow_up(scenario: Scenario, result: Mapping[str, ConsumerAssignment]) -> Scenario:
    """The next rebalance: everyone owns what it was just given, one generation later."""
    generation = max(m.subscription.generation_id for m in scenario.members.values()) + 1
    members = {
        member_id: MemberSubscription(
            member_id,
            m.group_instance_id,
            ConsumerSubscription(
                m.subscription.topics,
                owned_partitions=result[member_id].partitions,
                generation_id=generation,
            ),
        )
        for member_id, m in scenario.members.items()
    }
    return Scenario(scenario.cluster, members, scenario.equal_subscriptions)


# --- all assignors ---------------------------------------------------------------------


@given(scenarios(), st.sampled_from(ALL_ASSIGNORS), st.randoms(use_true_random=False))
def test_shape_and_determinism(
    scenario: Scenario, assignor_cls: type[ConsumerPartitionAssignor], rnd: random.Random
) -> None:
    result = assignor_cls().assign(scenario.cluster, scenario.members)
    check_shape(scenario, result)
    shuffled = list(scenario.members.items())
    rnd.shuffle(shuffled)
    assert assignor_cls().assign(scenario.cluster, dict(shuffled)) == result


@given(scenarios(), st.sampled_from((RangeAssignor, RoundRobinAssignor, StickyAssignor)))
def test_every_subscribed_partition_is_assigned(
    scenario: Scenario, assignor_cls: type[ConsumerPartitionAssignor]
) -> None:
    result = assignor_cls().assign(scenario.cluster, scenario.members)
    assert assigned(result) == scenario.subscribed_partitions()


@given(scenarios(equal=True))
def test_range_balances_each_topic(scenario: Scenario) -> None:
    result = RangeAssignor().assign(scenario.cluster, scenario.members)
    for topic in scenario.cluster.partitions:
        per_member = [sum(tp.topic == topic for tp in a.partitions) for a in result.values()]
        if any(per_member):
            assert max(per_member) - min(per_member) <= 1


@given(scenarios(equal=True), st.sampled_from((RoundRobinAssignor, StickyAssignor)))
def test_equal_subscriptions_are_balanced(
    scenario: Scenario, assignor_cls: type[ConsumerPartitionAssignor]
) -> None:
    sizes = counts(assignor_cls().assign(scenario.cluster, scenario.members))
    assert max(sizes) - min(sizes) <= 1


# --- sticky ---------------------------------------------------------------------------


@given(scenarios())
def test_sticky_is_locally_balanced_for_any_subscriptions(scenario: Scenario) -> None:
    assert locally_balanced(scenario, StickyAssignor().assign(scenario.cluster, scenario.members))


@given(scenarios(equal=True), st.sampled_from((StickyAssignor, CooperativeStickyAssignor)))
def test_owned_partitions_stay_up_to_the_fair_share(
    scenario: Scenario, assignor_cls: type[ConsumerPartitionAssignor]
) -> None:
    result = assignor_cls().assign(scenario.cluster, scenario.members)
    fair_share = len(scenario.subscribed_partitions()) // len(scenario.members)
    owned_by: dict[str, set[TopicPartition]] = {m: set() for m in scenario.members}
    for tp, member_id in valid_owners(scenario).items():
        owned_by[member_id].add(tp)
    for member_id, owned in owned_by.items():
        kept = owned & set(result[member_id].partitions)
        assert len(kept) >= min(len(owned), fair_share)


@given(scenarios(equal=True))
def test_sticky_moves_nothing_when_already_balanced(scenario: Scenario) -> None:
    first = StickyAssignor().assign(scenario.cluster, scenario.members)
    again = StickyAssignor().assign(scenario.cluster, follow_up(scenario, first).members)
    assert again == first


# --- cooperative-sticky ------------------------------------------------------------------


@given(scenarios())
def test_cooperative_never_hands_over_a_partition_someone_else_holds(scenario: Scenario) -> None:
    result = CooperativeStickyAssignor().assign(scenario.cluster, scenario.members)
    for member_id, asg in result.items():
        for tp in asg.partitions:
            mine = tp in scenario.members[member_id].subscription.owned_partitions
            others = [
                other
                for other, m in scenario.members.items()
                if other != member_id and tp in m.subscription.owned_partitions
            ]
            assert mine or not others, (tp, member_id, others)


@given(scenarios(equal=True))
def test_cooperative_completes_balanced_after_the_follow_up_round(scenario: Scenario) -> None:
    assignor = CooperativeStickyAssignor()
    first = assignor.assign(scenario.cluster, scenario.members)
    second_round = follow_up(scenario, first)
    second = assignor.assign(second_round.cluster, second_round.members)
    check_shape(second_round, second)
    assert assigned(second) == scenario.subscribed_partitions()
    sizes = counts(second)
    assert max(sizes) - min(sizes) <= 1
    # Nothing granted in the first round is taken back in the second.
    for member_id, asg in first.items():
        assert set(asg.partitions) <= set(second[member_id].partitions)


@given(scenarios(equal=False))
def test_cooperative_converges_for_unequal_subscriptions(scenario: Scenario) -> None:
    assignor = CooperativeStickyAssignor()
    current = scenario
    result = assignor.assign(current.cluster, current.members)
    for _ in range(4):
        current = follow_up(current, result)
        nxt = assignor.assign(current.cluster, current.members)
        check_shape(current, nxt)
        if nxt == result:
            break
        result = nxt
    assert nxt == result, "no stable assignment after four follow-up rounds"
    assert assigned(result) == scenario.subscribed_partitions()
    assert locally_balanced(scenario, result)


@given(scenarios())
def test_cooperative_target_matches_sticky_once_nothing_is_in_flight(scenario: Scenario) -> None:
    # With no prior ownership nothing needs withholding, so both give the same answer.
    fresh = {
        member_id: MemberSubscription(
            member_id, m.group_instance_id, ConsumerSubscription(m.subscription.topics)
        )
        for member_id, m in scenario.members.items()
    }
    assert CooperativeStickyAssignor().assign(scenario.cluster, fresh) == StickyAssignor().assign(
        scenario.cluster, fresh
    )


@given(scenarios(equal=True), st.sampled_from((StickyAssignor, CooperativeStickyAssignor)))
def test_sticky_keeps_as_many_owned_partitions_as_balance_allows(
    scenario: Scenario, assignor_cls: type[ConsumerPartitionAssignor]
) -> None:
    """Exactly the most that a balanced assignment can keep: every member keeps up to
    the lower share, and the members that owned more than it fill the larger shares."""
    result = assignor_cls().assign(scenario.cluster, scenario.members)
    total = len(scenario.subscribed_partitions())
    lower, larger_shares = divmod(total, len(scenario.members))
    owned_by: dict[str, set[TopicPartition]] = {m: set() for m in scenario.members}
    for tp, member_id in valid_owners(scenario).items():
        owned_by[member_id].add(tp)
    best = sum(min(len(o), lower) for o in owned_by.values()) + min(
        sum(len(o) > lower for o in owned_by.values()), larger_shares
    )
    kept = sum(len(owned_by[m] & set(asg.partitions)) for m, asg in result.items())
    assert kept == best


# --- racks (KIP-881) ---------------------------------------------------------------------

RACKS = ("a", "b", "c")


class RackCluster(Cluster):
    """A cluster whose partitions have replicas on some of ``RACKS``."""

    def __init__(
        self, partitions: Mapping[str, int], replica_racks: Mapping[TopicPartition, frozenset[str]]
    ) -> None:
        super().__init__(partitions)
        self.replica_racks = dict(replica_racks)

    def partition_racks(self, tp: TopicPartition) -> frozenset[str] | None:
        if tp.topic not in self.partitions:
            return None
        return self.replica_racks.get(tp, frozenset())


@st.composite
def rack_scenarios(draw: st.DrawFn, equal: bool | None = None) -> Scenario:
    """A scenario whose members state racks (some none) and whose replicas sit on
    one to three racks, so both the rack-matching and the plain paths get drawn."""
    base = draw(scenarios(equal))
    every = sorted(base.cluster.all_of(frozenset(base.cluster.partitions)))
    replica_racks = {
        tp: frozenset(draw(st.sets(st.sampled_from(RACKS), min_size=1, max_size=3))) for tp in every
    }
    members = {
        member_id: MemberSubscription(
            member_id,
            m.group_instance_id,
            replace(m.subscription, rack_id=draw(st.none() | st.sampled_from(RACKS))),
        )
        for member_id, m in base.members.items()
    }
    return Scenario(
        RackCluster(base.cluster.partitions, replica_racks), members, base.equal_subscriptions
    )


@given(
    rack_scenarios(),
    st.sampled_from((StickyAssignor, CooperativeStickyAssignor)),
    st.randoms(use_true_random=False),
)
def test_rack_aware_sticky_is_well_formed_balanced_and_deterministic(
    scenario: Scenario, assignor_cls: type[ConsumerPartitionAssignor], rnd: random.Random
) -> None:
    """Locality is only ever a tie-break: the rack-aware answer keeps every promise
    the plain one makes (shape, local balance) and does not depend on member order."""
    result = assignor_cls().assign(scenario.cluster, scenario.members)
    check_shape(scenario, result)
    if assignor_cls is StickyAssignor:
        assert assigned(result) == scenario.subscribed_partitions()
        assert locally_balanced(scenario, result)
    shuffled = list(scenario.members.items())
    rnd.shuffle(shuffled)
    assert assignor_cls().assign(scenario.cluster, dict(shuffled)) == result


@given(rack_scenarios(equal=False))
def test_rack_aware_cooperative_converges_for_unequal_subscriptions(scenario: Scenario) -> None:
    assignor = CooperativeStickyAssignor()
    current = scenario
    result = assignor.assign(current.cluster, current.members)
    for _ in range(4):
        current = follow_up(current, result)
        nxt = assignor.assign(current.cluster, current.members)
        check_shape(current, nxt)
        if nxt == result:
            break
        result = nxt
    assert nxt == result, "no stable assignment after four follow-up rounds"
    assert assigned(result) == scenario.subscribed_partitions()
    assert locally_balanced(scenario, result)


@given(rack_scenarios(), st.sampled_from((StickyAssignor, CooperativeStickyAssignor)))
def test_racks_that_cannot_matter_change_nothing(
    scenario: Scenario, assignor_cls: type[ConsumerPartitionAssignor]
) -> None:
    """KIP-881 skips rack matching when every partition has a replica on every rack
    (every member is local to everything) and when no member's rack holds a replica:
    the answer is then exactly the plain one."""
    plain = assignor_cls().assign(Cluster(scenario.cluster.partitions), scenario.members)
    everywhere = RackCluster(
        scenario.cluster.partitions,
        {tp: frozenset(RACKS) for tp in scenario.subscribed_partitions()},
    )
    assert assignor_cls().assign(everywhere, scenario.members) == plain
    elsewhere = RackCluster(
        scenario.cluster.partitions,
        {tp: frozenset({"x", "y"}) for tp in scenario.subscribed_partitions()},
    )
    assert assignor_cls().assign(elsewhere, scenario.members) == plain
