"""kafka-python's assignor tests (test/consumer/test_assignors.py), ported.

Cases that restate one of Apache Kafka's (one consumer, mixed subscriptions, the
random-subscription rounds, stickiness...) live once, in the Java port.  What is
here is kafka-python's own: its worked examples, its single-topic generation cases
and its cooperative cases.  Where kafka-python pins a different (equally balanced,
equally sticky) split than Apache Kafka's current algorithm, the Java answer is the
one aiogroup gives and the kafka-python expectation is kept as a strict xfail, so
the disagreement stays visible.
"""

from __future__ import annotations

import random

import pytest

from aiogroup._protocol.classic_embedded import ConsumerSubscription
from aiogroup.assignors import (
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from tests.unit.assignors.support import (
    Cluster,
    assign,
    check_validity_and_balance,
    is_sticky,
    parse,
    tp,
    with_history,
)

JAVA_DIFFERS = (
    "kafka-python pins its own tie-break for which partitions a member below quota "
    "receives; aiogroup gives Apache Kafka's constrained-builder answer (round robin "
    "in topic/partition order, asserted exactly by the Java port). Both are balanced "
    "and keep every owned partition."
)


def subs(**topics: str) -> dict[str, ConsumerSubscription]:
    return {m: ConsumerSubscription(topics=tuple(t.split())) for m, t in topics.items()}


def history(
    assignor: StickyAssignor, topics: str, owned: list, generation: int = 1
) -> ConsumerSubscription:
    return with_history(assignor, topics.split(), owned, generation)


def test_assignor_roundrobin() -> None:
    result = assign(RoundRobinAssignor(), Cluster({"t0": 3, "t1": 3}), subs(C0="t0 t1", C1="t0 t1"))
    assert result == {"C0": parse("t0-0 t0-2 t1-1"), "C1": parse("t0-1 t1-0 t1-2")}


def test_assignor_range() -> None:
    result = assign(RangeAssignor(), Cluster({"t0": 3, "t1": 3}), subs(C0="t0 t1", C1="t0 t1"))
    assert result == {"C0": parse("t0-0 t0-1 t1-0 t1-1"), "C1": parse("t0-2 t1-2")}


FOUR_BY_TWO = Cluster({"t0": 2, "t1": 2, "t2": 2, "t3": 2})


def test_sticky_assignor1_fresh() -> None:
    every = "t0 t1 t2 t3"
    first = assign(StickyAssignor(), FOUR_BY_TWO, subs(C0=every, C1=every, C2=every))
    assert first == {
        "C0": parse("t0-0 t1-1 t3-0"),
        "C1": parse("t0-1 t2-0 t3-1"),
        "C2": parse("t1-0 t2-1"),
    }


def _assignor1_after_c1_leaves() -> dict:
    a = StickyAssignor()
    every = "t0 t1 t2 t3"
    group = {
        "C0": history(a, every, parse("t0-0 t1-1 t3-0")),
        "C2": history(a, every, parse("t1-0 t2-1")),
    }
    return assign(a, FOUR_BY_TWO, group)


def test_sticky_assignor1_after_a_member_leaves_keeps_everything_owned() -> None:
    result = _assignor1_after_c1_leaves()
    assert set(parse("t0-0 t1-1 t3-0")) <= set(result["C0"])
    assert set(parse("t1-0 t2-1")) <= set(result["C2"])
    assert sorted(map(len, result.values())) == [4, 4]


@pytest.mark.xfail(reason=JAVA_DIFFERS, strict=True)
def test_sticky_assignor1_after_a_member_leaves_kafka_python_split() -> None:
    assert _assignor1_after_c1_leaves() == {
        "C0": parse("t0-0 t1-1 t2-0 t3-0"),
        "C2": parse("t0-1 t1-0 t2-1 t3-1"),
    }


def test_sticky_assignor2() -> None:
    cluster = Cluster({"t0": 1, "t1": 2, "t2": 3})
    a = StickyAssignor()
    first = assign(a, cluster, subs(C0="t0", C1="t0 t1", C2="t0 t1 t2"))
    assert first == {"C0": parse("t0-0"), "C1": parse("t1-0 t1-1"), "C2": parse("t2-0 t2-1 t2-2")}
    group = {"C1": history(a, "t0 t1", first["C1"]), "C2": history(a, "t0 t1 t2", first["C2"])}
    assert assign(a, cluster, group) == {
        "C1": parse("t0-0 t1-0 t1-1"),
        "C2": parse("t2-0 t2-1 t2-2"),
    }


def _add_remove_topic() -> list[dict]:
    cluster = Cluster({"t1": 3, "t2": 3})
    a = StickyAssignor()
    rounds = [assign(a, cluster, subs(C1="t1", C2="t1"))]
    for topics in ("t1 t2", "t2"):
        last = rounds[-1]
        group = {m: history(a, topics, last[m]) for m in ("C1", "C2")}
        rounds.append(assign(a, cluster, group))
    return rounds


def test_sticky_add_remove_topic_two_consumers_first_round() -> None:
    assert _add_remove_topic()[0] == {"C1": parse("t1-0 t1-2"), "C2": parse("t1-1")}


@pytest.mark.xfail(reason=JAVA_DIFFERS, strict=True)
def test_sticky_add_remove_topic_two_consumers_kafka_python_split() -> None:
    _, second, third = _add_remove_topic()
    assert second == {"C1": parse("t1-0 t1-2 t2-1"), "C2": parse("t1-1 t2-0 t2-2")}
    assert third == {"C1": parse("t2-1"), "C2": parse("t2-0 t2-2")}


def test_sticky_add_remove_topic_two_consumers_stays_sticky() -> None:
    first, second, third = _add_remove_topic()
    for m in ("C1", "C2"):
        assert set(first[m]) <= set(second[m])
        assert set(third[m]) <= set(second[m])
    assert sorted(map(len, second.values())) == [3, 3]
    assert sorted(map(len, third.values())) == [1, 2]


def test_conflicting_previous_assignments() -> None:
    a = StickyAssignor()
    group = {m: history(a, "t", [tp("t", 0), tp("t", 0)], 1) for m in ("C1", "C2")}
    result = assign(a, Cluster({"t": 2}), group)
    check_validity_and_balance(group, result)


def test_assignment_with_multiple_generations1() -> None:
    cluster = Cluster({"t": 6})
    a = StickyAssignor()
    first = assign(a, cluster, subs(C1="t", C2="t", C3="t"))
    assert sorted(map(len, first.values())) == [2, 2, 2]

    group = {m: history(a, "t", first[m]) for m in ("C1", "C2")}
    second = assign(a, cluster, group)
    check_validity_and_balance(group, second)
    assert sorted(map(len, second.values())) == [3, 3]
    assert set(first["C1"]) <= set(second["C1"]) and set(first["C2"]) <= set(second["C2"])
    assert is_sticky(a, group, second)

    group = {"C2": history(a, "t", second["C2"], 2), "C3": history(a, "t", first["C3"], 1)}
    third = assign(a, cluster, group)
    check_validity_and_balance(group, third)
    assert sorted(map(len, third.values())) == [3, 3]
    assert is_sticky(a, group, third)


def _multiple_generations2() -> tuple[dict, dict, dict]:
    cluster = Cluster({"t": 6})
    a = StickyAssignor()
    first = assign(a, cluster, subs(C1="t", C2="t", C3="t"))
    group = {"C2": history(a, "t", first["C2"], 1)}
    second = assign(a, cluster, group)
    assert len(second["C2"]) == 6 and set(first["C2"]) <= set(second["C2"])

    group = {
        "C1": history(a, "t", first["C1"], 1),
        "C2": history(a, "t", second["C2"], 2),
        "C3": history(a, "t", first["C3"], 1),
    }
    third = assign(a, cluster, group)
    check_validity_and_balance(group, third)
    assert is_sticky(a, group, third)
    return first, group, third


def test_assignment_with_multiple_generations2() -> None:
    first, _, third = _multiple_generations2()
    assert sorted(map(len, third.values())) == [2, 2, 2]
    assert set(third["C2"]) <= set(first["C2"]) | set(first["C1"]) | set(first["C3"])


@pytest.mark.xfail(
    reason=(
        "kafka-python hands partitions back to their owners from an older generation; "
        "Apache Kafka's constrained (equal-subscription) builder, which aiogroup follows, "
        "ignores claims that lost to a newer generation and deals the shed partitions "
        "round robin, and Java's own version of this case asserts only the 2/2/2 sizes"
    ),
    strict=True,
)
def test_assignment_with_multiple_generations2_returns_partitions_to_older_owners() -> None:
    first, _, third = _multiple_generations2()
    assert third == first


def test_assignment_with_conflicting_previous_generations() -> None:
    a = StickyAssignor()
    group = {
        "C1": history(a, "t", parse("t-0 t-1 t-4"), 1),
        "C2": history(a, "t", parse("t-0 t-2 t-3"), 1),
        "C3": history(a, "t", parse("t-3 t-4 t-5"), 2),
    }
    result = assign(a, Cluster({"t": 6}), group)
    check_validity_and_balance(group, result)
    assert is_sticky(a, group, result)


def test_sticky_large_assignment_with_multiple_consumers_leaving() -> None:
    rand = random.Random(7)
    a = StickyAssignor()
    topics = [f"t{i}" for i in range(1, 41)]
    cluster = Cluster({t: rand.randint(0, 10) for t in topics})
    group = {
        f"C{i}": ConsumerSubscription(
            topics=tuple(sorted({rand.choice(topics) for _ in range(rand.randint(1, 20))}))
        )
        for i in range(1, 201)
    }
    first = assign(a, cluster, group)
    check_validity_and_balance(group, first)
    group = {m: with_history(a, s.topics, first[m], 1) for m, s in group.items()}
    for _ in range(50):
        group.pop(f"C{rand.randint(1, 200)}", None)
    second = assign(a, cluster, group)
    check_validity_and_balance(group, second)
    assert is_sticky(a, group, second)


# --- KIP-429 cooperative-sticky -----------------------------------------------------


def test_cooperative_fresh_assignment_defers_nothing() -> None:
    result = assign(CooperativeStickyAssignor(), Cluster({"t": 4}), subs(C0="t", C1="t"))
    assert sum(map(len, result.values())) == 4


def test_cooperative_defers_the_partition_that_moves() -> None:
    a = CooperativeStickyAssignor()
    group = {"C0": history(a, "t", parse("t-0 t-1 t-2")), "C1": history(a, "t", parse("t-3"))}
    result = assign(a, Cluster({"t": 4}), group)
    assert not set(result["C0"]) & set(result["C1"])
    assigned = set(result["C0"]) | set(result["C1"])
    assert len(set(parse("t-0 t-1 t-2 t-3")) - assigned) == 1


def test_cooperative_returns_an_assignment_for_every_member() -> None:
    result = assign(CooperativeStickyAssignor(), Cluster({"t": 2}), subs(C0="t", C1="t"))
    assert set(result) == {"C0", "C1"}
