"""Worked examples for each assignor, the name resolver and the aiokafka adapter."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import pytest
from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import (
    StickyAssignorUserDataV1,
    StickyPartitionAssignor,
)
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from aiogroup._protocol.classic_embedded import ConsumerAssignment, ConsumerSubscription
from aiogroup.assignors import (
    AiokafkaAssignorAdapter,
    ConsumerPartitionAssignor,
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    resolve_assignors,
    select_rebalance_protocol,
)
from aiogroup.assignors.abc import ClusterView
from aiogroup.assignors.sticky import decode_sticky_user_data, encode_sticky_user_data
from aiogroup.errors import ConfigurationError
from aiogroup.structs import RebalanceProtocol, TopicPartition


class Cluster:
    def __init__(self, partitions: Mapping[str, int]) -> None:
        self._partitions = dict(partitions)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        if topic not in self._partitions:
            return None
        return set(range(self._partitions[topic]))

    def topics(self) -> set[str]:
        # aiokafka's own sticky assignor asks for this beyond ClusterView.
        return set(self._partitions)


def tps(spec: str) -> tuple[TopicPartition, ...]:
    """'t0p0 t1p2' -> TopicPartition tuple, so tables read like Kafka's docs."""
    result = []
    for item in spec.split():
        topic, partition = item.rsplit("p", 1)
        result.append(TopicPartition(topic, int(partition)))
    return tuple(sorted(result))


def member(
    member_id: str,
    topics: Iterable[str],
    owned: str = "",
    generation_id: int = -1,
    instance_id: str | None = None,
    user_data: bytes | None = None,
) -> MemberSubscription:
    return MemberSubscription(
        member_id,
        instance_id,
        ConsumerSubscription(
            tuple(topics),
            user_data=user_data,
            owned_partitions=tps(owned),
            generation_id=generation_id,
        ),
    )


def group(*members: MemberSubscription) -> dict[str, MemberSubscription]:
    return {m.member_id: m for m in members}


def run(
    assignor: ConsumerPartitionAssignor,
    cluster: ClusterView,
    members: Mapping[str, MemberSubscription],
) -> dict[str, str]:
    result = assignor.assign(cluster, members)
    return {
        member_id: " ".join(f"{tp.topic}p{tp.partition}" for tp in asg.partitions)
        for member_id, asg in result.items()
    }


TWO_BY_THREE = Cluster({"t0": 3, "t1": 3})
UNEVEN = Cluster({"t0": 1, "t1": 2, "t2": 3})
FOUR_BY_TWO = Cluster({"t0": 2, "t1": 2, "t2": 2, "t3": 2})

CASES: list[
    tuple[str, ConsumerPartitionAssignor, Cluster, dict[str, MemberSubscription], dict[str, str]]
] = [
    (
        "range: first members get the extra partition of each topic",
        RangeAssignor(),
        TWO_BY_THREE,
        group(member("C0", ["t0", "t1"]), member("C1", ["t0", "t1"])),
        {"C0": "t0p0 t0p1 t1p0 t1p1", "C1": "t0p2 t1p2"},
    ),
    (
        "range: only subscribers of a topic share it",
        RangeAssignor(),
        UNEVEN,
        group(member("C0", ["t0"]), member("C1", ["t0", "t1"]), member("C2", ["t1", "t2"])),
        {"C0": "t0p0", "C1": "t1p0", "C2": "t1p1 t2p0 t2p1 t2p2"},
    ),
    (
        "range: static members sort by instance id, before dynamic ones",
        RangeAssignor(),
        Cluster({"t": 3}),
        group(
            member("a-dynamic", ["t"]),
            member("z-member", ["t"], instance_id="b"),
            member("y-member", ["t"], instance_id="a"),
        ),
        {"y-member": "tp0", "z-member": "tp1", "a-dynamic": "tp2"},
    ),
    (
        "range: unknown topics and members with nothing still appear",
        RangeAssignor(),
        Cluster({"t": 1}),
        group(member("C0", ["t", "missing"]), member("C1", ["t"]), member("C2", ["missing"])),
        {"C0": "tp0", "C1": "", "C2": ""},
    ),
    (
        "roundrobin: equal subscriptions deal across topics",
        RoundRobinAssignor(),
        TWO_BY_THREE,
        group(member("C0", ["t0", "t1"]), member("C1", ["t0", "t1"])),
        {"C0": "t0p0 t0p2 t1p1", "C1": "t0p1 t1p0 t1p2"},
    ),
    (
        "roundrobin: members not subscribed are skipped",
        RoundRobinAssignor(),
        UNEVEN,
        group(member("C0", ["t0"]), member("C1", ["t0", "t1"]), member("C2", ["t0", "t1", "t2"])),
        {"C0": "t0p0", "C1": "t1p0", "C2": "t1p1 t2p0 t2p1 t2p2"},
    ),
    (
        "sticky: first assignment is balanced",
        StickyAssignor(),
        FOUR_BY_TWO,
        group(*(member(f"C{i}", ["t0", "t1", "t2", "t3"]) for i in range(3))),
        {"C0": "t0p0 t1p1 t3p0", "C1": "t0p1 t2p0 t3p1", "C2": "t1p0 t2p1"},
    ),
    (
        "sticky: when C1 leaves, C0 and C2 keep theirs and split C1's",
        StickyAssignor(),
        FOUR_BY_TWO,
        group(
            member("C0", ["t0", "t1", "t2", "t3"], "t0p0 t1p1 t3p0", 1),
            member("C2", ["t0", "t1", "t2", "t3"], "t1p0 t2p1", 1),
        ),
        # KIP-54's prose example splits C1's partitions differently; this is what
        # Kafka's current (constrained) builder gives: C1's leftovers dealt round robin
        # in (topic, partition) order to the members below quota. Equally sticky.
        {"C0": "t0p0 t0p1 t1p1 t3p0", "C2": "t1p0 t2p0 t2p1 t3p1"},
    ),
    (
        "sticky: unequal subscriptions, most constrained partitions placed first",
        StickyAssignor(),
        UNEVEN,
        group(member("C0", ["t0"]), member("C1", ["t0", "t1"]), member("C2", ["t0", "t1", "t2"])),
        {"C0": "t0p0", "C1": "t1p0 t1p1", "C2": "t2p0 t2p1 t2p2"},
    ),
    (
        "sticky: after C0 leaves its partition goes to the least loaded",
        StickyAssignor(),
        UNEVEN,
        group(
            member("C1", ["t0", "t1"], "t1p0 t1p1", 2),
            member("C2", ["t0", "t1", "t2"], "t2p0 t2p1 t2p2", 2),
        ),
        {"C1": "t0p0 t1p0 t1p1", "C2": "t2p0 t2p1 t2p2"},
    ),
    (
        "sticky: a new member takes from the overloaded owner only",
        StickyAssignor(),
        Cluster({"t": 4}),
        group(member("A", ["t"], "tp0 tp1 tp2 tp3", 3), member("B", ["t"])),
        # A keeps its lowest (partition, topic), as Kafka's assignor does.
        {"A": "tp0 tp1", "B": "tp2 tp3"},
    ),
    (
        "sticky: the higher generation wins a conflicting claim",
        StickyAssignor(),
        Cluster({"t": 2}),
        group(member("A", ["t"], "tp0", 4), member("B", ["t"], "tp0", 5)),
        {"A": "tp1", "B": "tp0"},
    ),
    (
        "sticky: claims on unsubscribed or missing partitions are ignored",
        StickyAssignor(),
        Cluster({"t": 2, "u": 1}),
        group(member("A", ["t"], "up0 tp9", 1), member("B", ["t", "u"], "tp0 tp1", 1)),
        {"A": "tp0", "B": "tp1 up0"},
    ),
    (
        "cooperative: a partition moving to a new member is only revoked this round",
        CooperativeStickyAssignor(),
        Cluster({"t": 4}),
        group(member("A", ["t"], "tp0 tp1 tp2 tp3", 3), member("B", ["t"], "", 3)),
        {"A": "tp0 tp1", "B": ""},
    ),
    (
        "cooperative: the follow-up round hands the revoked partitions over",
        CooperativeStickyAssignor(),
        Cluster({"t": 4}),
        group(member("A", ["t"], "tp0 tp1", 4), member("B", ["t"], "", 4)),
        {"A": "tp0 tp1", "B": "tp2 tp3"},
    ),
    (
        "cooperative: the newer claim keeps a contested partition, the stale one revokes",
        CooperativeStickyAssignor(),
        Cluster({"t": 2}),
        group(member("A", ["t"], "tp0", 5), member("B", ["t"], "tp0", 4), member("C", ["t"])),
        {"A": "tp0", "B": "tp1", "C": ""},
    ),
    (
        "cooperative: equal claims cancel; a third member must wait for the next round",
        CooperativeStickyAssignor(),
        Cluster({"t": 3}),
        group(
            member("A", ["t"], "tp0 tp1", 5), member("B", ["t"], "tp0 tp2", 5), member("C", ["t"])
        ),
        {"A": "tp1", "B": "tp2", "C": ""},
    ),
]


@pytest.mark.parametrize(
    ("assignor", "cluster", "members", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_worked_example(
    assignor: ConsumerPartitionAssignor,
    cluster: Cluster,
    members: dict[str, MemberSubscription],
    expected: dict[str, str],
) -> None:
    assert run(assignor, cluster, members) == expected


def test_empty_group_gets_empty_result() -> None:
    for assignor in resolve_assignors(["range", "roundrobin", "sticky", "cooperative-sticky"]):
        assert assignor.assign(Cluster({"t": 3}), {}) == {}


# --- sticky user data (eager members carry their history there) ----------------------


def test_sticky_remembers_its_assignment_in_user_data() -> None:
    previous = StickyAssignor()
    assert previous.subscription_user_data(frozenset({"t"})) is None
    previous.on_assignment(ConsumerAssignment(tps("tp0 tp1 tp2")), generation_id=7)
    user_data = previous.subscription_user_data(frozenset({"t"}))
    members = group(member("A", ["t"], user_data=user_data), member("B", ["t"]))
    assert run(StickyAssignor(), Cluster({"t": 4}), members) == {"A": "tp0 tp1", "B": "tp2 tp3"}


def test_sticky_user_data_layout_matches_kafka() -> None:
    ours = encode_sticky_user_data(tps("ap1 ap0 bp3"), 9)
    theirs = StickyAssignorUserDataV1.decode(ours)
    assert sorted(theirs.previous_assignment) == [("a", [0, 1]), ("b", [3])]
    assert theirs.generation == 9
    java_style = StickyAssignorUserDataV1([("a", [2]), ("c", [0, 5])], 4).encode()
    claim = decode_sticky_user_data(java_style)
    assert claim is not None
    assert (claim.partitions, claim.generation_id) == (tps("ap2 cp0 cp5"), 4)


def test_sticky_user_data_v0_without_generation_is_read() -> None:
    v0 = encode_sticky_user_data(tps("ap2"), 3)[:-4]
    claim = decode_sticky_user_data(v0)
    assert claim is not None
    assert (claim.partitions, claim.generation_id) == (tps("ap2"), -1)


@pytest.mark.parametrize("garbage", [b"\xff", b"\x00\x00\x00\x05abc", b"\x00"])
def test_unreadable_sticky_user_data_is_ignored_not_fatal(garbage: bytes) -> None:
    assert decode_sticky_user_data(garbage) is None
    members = group(member("A", ["t"], "tp1", 1, user_data=garbage), member("B", ["t"]))
    assert run(StickyAssignor(), Cluster({"t": 2}), members) == {"A": "tp1", "B": "tp0"}


def test_cooperative_reads_generation_from_user_data_of_old_subscriptions() -> None:
    old = CooperativeStickyAssignor()
    old.on_assignment(ConsumerAssignment(tps("tp0")), generation_id=6)
    user_data = old.subscription_user_data(frozenset({"t"}))
    a = MemberSubscription(
        "A", None, ConsumerSubscription(("t",), user_data, tps("tp0"), version=1)
    )
    b = member("B", ["t"], "tp0", 5)
    # A's v1 subscription has no generation field; its user data says 6, beating B's 5.
    # (Were A's generation unknown, B would keep tp0 and A would get tp1.)
    assert run(CooperativeStickyAssignor(), Cluster({"t": 2}), group(a, b)) == {
        "A": "tp0",
        "B": "tp1",
    }


# --- resolve_assignors / select_rebalance_protocol ------------------------------------


def test_names_resolve_to_assignors_in_order() -> None:
    assignors = resolve_assignors(["cooperative-sticky", "sticky", "roundrobin", "range"])
    assert [type(a) for a in assignors] == [
        CooperativeStickyAssignor,
        StickyAssignor,
        RoundRobinAssignor,
        RangeAssignor,
    ]
    assert [a.name for a in assignors] == ["cooperative-sticky", "sticky", "roundrobin", "range"]


def test_classes_and_instances_are_accepted() -> None:
    instance = RangeAssignor()
    resolved = resolve_assignors([instance, StickyAssignor])
    assert resolved[0] is instance
    assert isinstance(resolved[1], StickyAssignor)


def test_a_single_name_string_is_one_assignor() -> None:
    assert [a.name for a in resolve_assignors("roundrobin")] == ["roundrobin"]


def test_unknown_name_is_named_with_the_known_ones() -> None:
    with pytest.raises(ConfigurationError) as info:
        resolve_assignors(["range", "balanced"])
    message = str(info.value)
    assert "'balanced'" in message
    for known in ("cooperative-sticky", "range", "roundrobin", "sticky"):
        assert known in message


@pytest.mark.parametrize("bad", [42, None, object(), int])
def test_other_objects_are_rejected(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="partition assignor must be"):
        resolve_assignors([bad])


def test_empty_and_duplicate_strategies_are_rejected() -> None:
    with pytest.raises(ConfigurationError, match="at least one"):
        resolve_assignors([])
    with pytest.raises(ConfigurationError, match="'range' is listed twice"):
        resolve_assignors(["range", RangeAssignor()])


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["cooperative-sticky"], RebalanceProtocol.COOPERATIVE),
        (["cooperative-sticky", "range"], RebalanceProtocol.EAGER),
        (["range", "cooperative-sticky"], RebalanceProtocol.EAGER),
        (["sticky"], RebalanceProtocol.EAGER),
        (["range", "roundrobin"], RebalanceProtocol.EAGER),
    ],
)
def test_cooperative_only_when_every_assignor_supports_it(
    names: list[str], expected: RebalanceProtocol
) -> None:
    assert select_rebalance_protocol(resolve_assignors(names)) is expected


def test_protocol_needs_an_assignor() -> None:
    with pytest.raises(ConfigurationError):
        select_rebalance_protocol([])


# --- aiokafka assignors through the adapter -------------------------------------------


class RecordingAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """A user-written aiokafka assignor: everything to the first member, sorted by id."""

    name = "everything-to-first"
    version = 1
    seen_members: ClassVar[dict[str, Any]] = {}
    seen_assignments: ClassVar[list[Any]] = []
    seen_generations: ClassVar[list[int]] = []

    @classmethod
    def assign(
        cls, cluster: Any, members: Mapping[str, ConsumerProtocolMemberMetadata]
    ) -> dict[str, ConsumerProtocolMemberAssignment]:
        cls.seen_members = dict(members)
        first = min(members)
        topics = sorted({t for m in members.values() for t in m.subscription})
        everything = [(t, sorted(cluster.partitions_for_topic(t) or ())) for t in topics]
        return {
            member_id: ConsumerProtocolMemberAssignment(
                cls.version, everything if member_id == first else [], b"ud-" + member_id.encode()
            )
            for member_id in members
            if member_id != "omitted"
        }

    @classmethod
    def metadata(cls, topics: Iterable[str]) -> ConsumerProtocolMemberMetadata:
        return ConsumerProtocolMemberMetadata(cls.version, list(topics), b"hello")

    @classmethod
    def on_assignment(cls, assignment: ConsumerProtocolMemberAssignment) -> None:
        cls.seen_assignments.append(assignment)

    @classmethod
    def on_generation_assignment(cls, generation: int) -> None:
        cls.seen_generations.append(generation)


def test_aiokafka_assignor_class_is_adapted_both_ways() -> None:
    [adapter] = resolve_assignors([RecordingAssignor])
    assert isinstance(adapter, AiokafkaAssignorAdapter)
    assert adapter.name == "everything-to-first"
    assert adapter.supported_protocols == (RebalanceProtocol.EAGER,)
    assert adapter.subscription_user_data(frozenset({"b", "a"})) == b"hello"

    members = group(
        member("m1", ["a"], user_data=b"x"), member("m2", ["a", "b"]), member("omitted", ["b"])
    )
    result = adapter.assign(Cluster({"a": 2, "b": 1}), members)

    seen = RecordingAssignor.seen_members
    assert set(seen) == {"m1", "m2", "omitted"}
    assert isinstance(seen["m1"], ConsumerProtocolMemberMetadata)
    assert (seen["m2"].subscription, seen["m1"].user_data) == (["a", "b"], b"x")
    assert result == {
        "m1": ConsumerAssignment(tps("ap0 ap1 bp0"), b"ud-m1", 1),
        "m2": ConsumerAssignment((), b"ud-m2", 1),
        "omitted": ConsumerAssignment(()),
    }

    adapter.on_assignment(ConsumerAssignment(tps("ap1 ap0 bp0"), b"u", 3), generation_id=12)
    given = RecordingAssignor.seen_assignments[-1]
    assert isinstance(given, ConsumerProtocolMemberAssignment)
    assert sorted(given.partitions()) == list(tps("ap0 ap1 bp0"))
    assert given.user_data == b"u"
    assert RecordingAssignor.seen_generations[-1] == 12


@pytest.mark.parametrize(
    ("theirs", "ours"),
    [(RangePartitionAssignor, RangeAssignor), (RoundRobinPartitionAssignor, RoundRobinAssignor)],
)
def test_aiokafka_builtin_assignors_agree_with_ours(theirs: Any, ours: Any) -> None:
    [adapter] = resolve_assignors([theirs])
    members = group(member("C0", ["t0"]), member("C1", ["t0", "t1"]), member("C2", ["t1", "t2"]))
    assert run(adapter, UNEVEN, members) == run(ours(), UNEVEN, members)


def test_aiokafka_sticky_keeps_state_through_the_adapter() -> None:
    [adapter] = resolve_assignors([StickyPartitionAssignor])
    adapter.on_assignment(ConsumerAssignment(tps("tp1 tp2")), generation_id=3)
    user_data = adapter.subscription_user_data(frozenset({"t"}))
    assert user_data
    members = group(member("A", ["t"], user_data=user_data), member("B", ["t"]))
    result = run(adapter, Cluster({"t": 4}), members)
    assert set(result["A"].split()) == {"tp1", "tp2"}
    # Our sticky reads the same user data, so a mixed group stays sticky.
    assert run(StickyAssignor(), Cluster({"t": 4}), members)["A"] == "tp1 tp2"


def test_adapter_rejects_results_for_strangers() -> None:
    class Stranger(RecordingAssignor):
        name = "stranger"

        @classmethod
        def assign(cls, cluster: Any, members: Any) -> dict[str, Any]:
            return {"nobody": ConsumerProtocolMemberAssignment(0, [], b"")}

    [adapter] = resolve_assignors([Stranger])
    with pytest.raises(ValueError, match="unknown members"):
        adapter.assign(Cluster({}), group(member("m", ["t"])))


def test_adapter_needs_a_name() -> None:
    class Nameless(AbstractPartitionAssignor):  # type: ignore[misc]
        assign = RecordingAssignor.assign
        metadata = RecordingAssignor.metadata
        on_assignment = RecordingAssignor.on_assignment

    with pytest.raises(ConfigurationError, match="has no name"):
        resolve_assignors([Nameless])


@pytest.mark.parametrize("assignor_cls", [StickyAssignor, CooperativeStickyAssignor])
def test_a_fourth_member_takes_one_partition_from_each_and_nothing_else_moves(
    assignor_cls: type[ConsumerPartitionAssignor],
) -> None:
    """4/4/4 + a newcomer: three partitions move, one from each, none between the three
    (one move per step; draining a donor down to the newcomer's level overshot)."""
    members = group(
        member("a", ["t"], "tp1 tp4 tp7 tp10", 1),
        member("b", ["t"], "tp2 tp5 tp8 tp11", 1),
        member("c", ["t"], "tp0 tp3 tp6 tp9", 1),
        member("d", ["t"]),
    )
    result = assignor_cls().assign(Cluster({"t": 12}), members)
    for name in "abc":
        kept = set(result[name].partitions)
        assert len(kept) == 3 and kept <= set(members[name].subscription.owned_partitions)
    if assignor_cls is StickyAssignor:
        assert len(result["d"].partitions) == 3
    else:  # cooperative: the moving partitions are revoked first, granted next round
        assert result["d"].partitions == ()
