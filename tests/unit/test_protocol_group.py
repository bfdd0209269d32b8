"""Group-API structs, builders and parsers, without a broker.

The wire layouts are checked against an independent implementation: kafka-python 3
generates its messages from Apache Kafka's JSON specs.  Every request we build and
every response layout we define must decode there to the same values and re-encode
to the same bytes, at every version both implement.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.errors import IncompatibleBrokerVersion
from aiokafka.protocol import commit as aiokafka_commit
from aiokafka.protocol import coordination as aiokafka_coordination
from aiokafka.protocol import group as aiokafka_group
from kafka.protocol.consumer import group as kp_group
from kafka.protocol.metadata import find_coordinator as kp_find_coordinator

from aiogroup._protocol.group import (
    FindCoordinatorRequest,
    GroupApiRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    parse_find_coordinator,
    parse_heartbeat,
    parse_join_group,
    parse_leave_group,
    parse_offset_commit,
    parse_offset_fetch,
    parse_sync_group,
)
from aiogroup._protocol.messages import (
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    SYNC_GROUP,
)
from aiogroup._protocol.results import (
    FindCoordinatorResult,
    HeartbeatResult,
    JoinGroupMember,
    JoinGroupResult,
    LeaveGroupResult,
    OffsetCommitResult,
    OffsetFetchResult,
    SyncGroupResult,
)
from aiogroup._protocol.schema import TAGS, ApiStructs, Field, Kind, struct_to_dict
from aiogroup.structs import OffsetAndMetadata, TopicPartition

# kafka-python's class per API, and where its names differ from the ones we use.
KP_CLASSES: dict[str, tuple[Any, Any]] = {
    "FindCoordinator": (
        kp_find_coordinator.FindCoordinatorRequest,
        kp_find_coordinator.FindCoordinatorResponse,
    ),
    "JoinGroup": (kp_group.JoinGroupRequest, kp_group.JoinGroupResponse),
    "SyncGroup": (kp_group.SyncGroupRequest, kp_group.SyncGroupResponse),
    "Heartbeat": (kp_group.HeartbeatRequest, kp_group.HeartbeatResponse),
    "LeaveGroup": (kp_group.LeaveGroupRequest, kp_group.LeaveGroupResponse),
    "OffsetCommit": (kp_group.OffsetCommitRequest, kp_group.OffsetCommitResponse),
    "OffsetFetch": (kp_group.OffsetFetchRequest, kp_group.OffsetFetchResponse),
}
KP_ALIASES: dict[tuple[str, str], str] = {
    ("OffsetCommit", "generation_id"): "generation_id_or_member_epoch"
}

ALL_APIS = (
    FIND_COORDINATOR,
    JOIN_GROUP,
    SYNC_GROUP,
    HEARTBEAT,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    OFFSET_FETCH,
)


def kp_supports(kp_cls: Any, version: int) -> bool:
    return bool(kp_cls.min_version <= version <= kp_cls.max_version)


def assert_same_values(api: str, ours: Any, theirs: Any, where: str = "") -> None:
    """Every field of our decoded struct (nested dicts) equals kafka-python's field."""
    if isinstance(ours, dict):
        for name, value in ours.items():
            if name == TAGS:
                continue
            field = str(name)
            other = getattr(theirs, KP_ALIASES.get((api, field), field))
            assert_same_values(api, value, other, f"{where}.{name}")
    elif isinstance(ours, list):
        assert theirs is not None and len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_same_values(api, a, b, f"{where}[{i}]")
    else:
        assert ours == theirs, where


def check_against_kafka_python(
    api: ApiStructs, version: int, struct: Any, *, request: bool
) -> None:
    kp_cls = KP_CLASSES[api.name][0 if request else 1]
    encoded = struct.encode()
    # Our own decoder reads back exactly what we wrote.
    assert type(struct).decode(encoded) == struct
    if not kp_supports(kp_cls, version):
        return
    theirs = kp_cls.decode(encoded, version=version)
    assert_same_values(api.name, struct_to_dict(struct), theirs)
    # Its encoder consults a header that decoded objects lack.
    if request:
        theirs.with_header()
    else:
        theirs._header = None
    assert bytes(theirs.encode(version=version)) == encoded


# --- request layouts --------------------------------------------------------------------


def join_group(version: int) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id="g",
        session_timeout_ms=6000,
        rebalance_timeout_ms=30000,
        member_id="member-1",
        group_instance_id="instance-1" if version >= 5 else None,
        protocol_type="consumer",
        protocols=[("cooperative-sticky", b"\x00\x01meta"), ("range", b"")],
        reason="because",
    )


def sync_group(version: int) -> SyncGroupRequest:
    return SyncGroupRequest(
        group_id="g",
        generation_id=4,
        member_id="member-1",
        group_instance_id="instance-1" if version >= 3 else None,
        protocol_type="consumer",
        protocol_name="range",
        assignments=[("member-1", b"\x00\x00a"), ("member-2", b"")],
    )


def heartbeat(version: int) -> HeartbeatRequest:
    return HeartbeatRequest("g", 4, "member-1", "instance-1" if version >= 3 else None)


def leave_group(version: int) -> LeaveGroupRequest:
    return LeaveGroupRequest("g", "member-1", "instance-1" if version >= 3 else None, "bye")


def offset_commit(version: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        "g",
        4,
        "member-1",
        "instance-1" if version >= 7 else None,
        {
            TopicPartition("b-topic", 1): OffsetAndMetadata(10, "m1"),
            TopicPartition("a-topic", 0): OffsetAndMetadata(0, ""),
            TopicPartition("b-topic", 0): OffsetAndMetadata(2**40, "m0"),
        },
    )


def offset_fetch(version: int) -> OffsetFetchRequest:
    return OffsetFetchRequest(
        "g", [TopicPartition("b", 2), TopicPartition("a", 0), TopicPartition("b", 0)]
    )


def find_coordinator(version: int) -> FindCoordinatorRequest:
    return FindCoordinatorRequest("g", 1 if version >= 1 else 0)


REQUESTS: dict[str, Callable[[int], GroupApiRequest]] = {
    "FindCoordinator": find_coordinator,
    "JoinGroup": join_group,
    "SyncGroup": sync_group,
    "Heartbeat": heartbeat,
    "LeaveGroup": leave_group,
    "OffsetCommit": offset_commit,
    "OffsetFetch": offset_fetch,
}

ALL_VERSIONS = [(api, v) for api in ALL_APIS for v in sorted(api.requests)]


def version_id(param: Any) -> str:
    api, version = param
    return f"{api.name}-v{version}"


@pytest.mark.parametrize("case", ALL_VERSIONS, ids=version_id)
def test_request_layout_matches_kafka_spec(case: tuple[ApiStructs, int]) -> None:
    api, version = case
    builder = REQUESTS[api.name](version)
    struct = builder.build(version)
    assert (struct.API_KEY, struct.API_VERSION) == (api.api_key, version)
    assert struct.FLEXIBLE_VERSION == (version >= api.flexible_from)
    check_against_kafka_python(api, version, struct, request=True)


@pytest.mark.parametrize("case", ALL_VERSIONS, ids=version_id)
def test_request_header_is_v2_exactly_for_flexible_versions(case: tuple[ApiStructs, int]) -> None:
    api, version = case
    struct = REQUESTS[api.name](version).build(version)
    header = struct.build_request_header(correlation_id=7, client_id="cid").encode()
    expected = b"\x00" + bytes([api.api_key]) + b"\x00" + bytes([version])
    expected += b"\x00\x00\x00\x07\x00\x03cid"
    if version >= api.flexible_from:
        expected += b"\x00"  # empty tagged-field section
    assert header == expected


def test_builders_lay_out_offsets_sorted_and_grouped_by_topic() -> None:
    obj = struct_to_dict(offset_commit(9).build(9))
    layout = [
        (t["name"], [(p["partition_index"], p["committed_offset"]) for p in t["partitions"]])
        for t in obj["topics"]
    ]
    assert layout == [("a-topic", [(0, 0)]), ("b-topic", [(0, 2**40), (1, 10)])]
    assert obj["topics"][1]["partitions"][1]["committed_metadata"] == "m1"
    assert obj["topics"][1]["partitions"][1]["committed_leader_epoch"] == -1

    fetch = struct_to_dict(offset_fetch(9).build(9))
    assert fetch["groups"][0]["group_id"] == "g"
    assert fetch["groups"][0]["member_id"] is None
    assert fetch["groups"][0]["member_epoch"] == -1
    assert [(t["name"], t["partition_indexes"]) for t in fetch["groups"][0]["topics"]] == [
        ("a", [0]),
        ("b", [0, 2]),
    ]
    assert fetch["require_stable"] is False


def test_offset_fetch_all_partitions_sends_null_topics() -> None:
    request = OffsetFetchRequest("g", None, require_stable=True)
    assert struct_to_dict(request.build(7))["topics"] is None
    v9 = struct_to_dict(request.build(9))
    assert v9["groups"][0]["topics"] is None
    assert v9["require_stable"] is True
    theirs = kp_group.OffsetFetchRequest.decode(request.build(9).encode(), version=9)
    assert theirs.groups[0].topics is None


def test_leave_group_v3_plus_names_the_member_in_the_batch() -> None:
    obj = struct_to_dict(leave_group(5).build(5))
    assert "member_id" not in obj
    assert [(m["member_id"], m["group_instance_id"], m["reason"]) for m in obj["members"]] == [
        ("member-1", "instance-1", "bye")
    ]
    assert struct_to_dict(leave_group(2).build(2)) == {"group_id": "g", "member_id": "member-1"}


def test_informational_fields_are_dropped_where_the_version_has_no_room() -> None:
    assert "reason" not in struct_to_dict(join_group(7).build(7))
    assert struct_to_dict(join_group(8).build(8))["reason"] == "because"
    v4 = struct_to_dict(sync_group(4).build(4))
    assert "protocol_type" not in v4 and "protocol_name" not in v4
    v5 = struct_to_dict(sync_group(5).build(5))
    assert (v5["protocol_type"], v5["protocol_name"]) == ("consumer", "range")


# --- version selection ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("broker", "expected"),
    [((0, 9), 9), ((0, 12), 9), ((0, 5), 5), ((3, 3), 3), ((6, 20), 9)],
)
def test_prepare_picks_highest_common_version_and_records_it(
    broker: tuple[int, int], expected: int
) -> None:
    request = join_group(0)  # no group_instance_id: any version can carry it
    assert request.api_version is None
    struct = request.prepare({JoinGroupRequest.API_KEY: broker, 18: (0, 3)})
    assert struct.API_VERSION == expected
    assert request.api_version == expected
    assert type(struct) is JOIN_GROUP.requests[expected]


def test_prepare_refuses_an_api_the_broker_does_not_list() -> None:
    with pytest.raises(IncompatibleBrokerVersion, match="does not support the Heartbeat API"):
        heartbeat(0).prepare({JoinGroupRequest.API_KEY: (0, 9)})


def test_prepare_refuses_when_the_broker_only_speaks_newer_versions() -> None:
    with pytest.raises(IncompatibleBrokerVersion, match="no common OffsetFetch version"):
        offset_fetch(9).prepare({OffsetFetchRequest.API_KEY: (10, 12)})


def test_build_accepts_a_struct_class_like_aiokafka_requests() -> None:
    struct = heartbeat(3).build(HEARTBEAT.requests[3])
    assert type(struct) is HEARTBEAT.requests[3]
    assert struct_to_dict(struct)["group_instance_id"] == "instance-1"


def test_build_refuses_a_version_we_do_not_define() -> None:
    with pytest.raises(IncompatibleBrokerVersion, match="Heartbeat v5"):
        heartbeat(4).build(5)


@pytest.mark.parametrize(
    ("request_factory", "too_old", "first_ok"),
    [
        (lambda: join_group(5), 4, 5),
        (lambda: sync_group(3), 2, 3),
        (lambda: heartbeat(3), 2, 3),
        (lambda: leave_group(3), 2, 3),
        (lambda: offset_commit(7), 6, 7),
        (lambda: OffsetFetchRequest("g", None), 1, 2),
        (lambda: FindCoordinatorRequest("txn", 1), 0, 1),
    ],
)
def test_versions_that_cannot_carry_the_request_are_refused(
    request_factory: Callable[[], GroupApiRequest], too_old: int, first_ok: int
) -> None:
    request = request_factory()
    with pytest.raises(IncompatibleBrokerVersion, match=f"v{first_ok}\\+"):
        request.prepare({request.API_KEY: (0, too_old)})
    assert request.api_version is None
    assert request.prepare({request.API_KEY: (0, first_ok)}).API_VERSION == first_ok


def test_apis_reach_the_versions_aiogroup_promises() -> None:
    maxima = {api.name: api.max_version for api in ALL_APIS}
    assert maxima == {
        "FindCoordinator": 6,
        "JoinGroup": 9,
        "SyncGroup": 5,
        "Heartbeat": 4,
        "LeaveGroup": 5,
        "OffsetCommit": 9,
        "OffsetFetch": 9,
    }


# --- input validation -------------------------------------------------------------------


def bad(value: Any) -> Any:
    """Hides a deliberately ill-typed argument from the type checker."""
    return value


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (lambda: JoinGroupRequest("", 1, 1, "", None, "consumer", [("r", b"")]), "group_id"),
        (lambda: JoinGroupRequest("g", 0, 1, "", None, "consumer", [("r", b"")]), "session"),
        (lambda: JoinGroupRequest("g", 1, 1, "", None, "consumer", []), "protocols"),
        (lambda: JoinGroupRequest("g", 1, 1, "", None, "consumer", [("r", bad("x"))]), "protocols"),
        (lambda: JoinGroupRequest("g", 1, 1, "", "", "consumer", [("r", b"")]), "instance"),
        (lambda: SyncGroupRequest("g", True, "m", None, None, None, []), "generation_id"),
        (lambda: HeartbeatRequest("g", 1, "", None), "member_id"),
        (lambda: LeaveGroupRequest("g", "m", None, reason=bad(3)), "reason"),
        (lambda: OffsetCommitRequest("g", 1, "m", None, {}), "offsets"),
        (
            lambda: OffsetCommitRequest("g", 1, "m", None, {("t", 0): OffsetAndMetadata(-1, "")}),
            "offset",
        ),
        (lambda: OffsetCommitRequest("g", 1, "m", None, bad({"t": 1})), "offsets"),
        (
            lambda: OffsetCommitRequest("g", 1, "m", None, {("t", 0): bad((True, ""))}),
            r"offsets\[TopicPartition\(topic='t', partition=0\)\]\.offset must be an int",
        ),
        (
            lambda: OffsetCommitRequest("g", 1, "m", None, {("t", 0): bad((1, b"x"))}),
            r"\.metadata must be a str",
        ),
        (
            lambda: OffsetCommitRequest("g", 1, "m", None, {("t", 0): bad((1, "", 2))}),
            "must be OffsetAndMetadata",
        ),
        (lambda: OffsetFetchRequest("g", bad("topic")), "partitions"),
        (lambda: OffsetFetchRequest("g", [("t", -1)]), "partitions"),
        (lambda: FindCoordinatorRequest(""), "key"),
        (lambda: FindCoordinatorRequest("g", 5), "key_type"),
    ],
)
def test_bad_input_is_refused_at_once_naming_the_argument(
    factory: Callable[[], object], message: str
) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        factory()


def test_offset_commit_normalizes_plain_tuples_and_null_metadata() -> None:
    req = OffsetCommitRequest(
        "g", 1, "m", None, {("t", 1): bad((7, None)), ("t", 0): OffsetAndMetadata(3, "x")}
    )
    assert req.offsets == {
        TopicPartition("t", 1): OffsetAndMetadata(7, ""),
        TopicPartition("t", 0): OffsetAndMetadata(3, "x"),
    }
    assert all(type(oam) is OffsetAndMetadata for oam in req.offsets.values())


def test_field_specs_reject_ambiguous_definitions() -> None:
    with pytest.raises(ValueError, match="exactly one of kind or fields"):
        Field("x")
    with pytest.raises(ValueError, match="exactly one of kind or fields"):
        Field("x", Kind.INT8, fields=(Field("y", Kind.INT8),))
    with pytest.raises(ValueError, match="bad version range"):
        Field("x", Kind.INT8, "v3")
    assert Field("x", Kind.INT8, "2-4").present_in(4)
    assert not Field("x", Kind.INT8, "2-4").present_in(5)
    assert Field("x", Kind.INT8, "1").present_in(1)
    assert not Field("x", Kind.INT8, "1").present_in(2)


# --- responses: layouts and parsers -----------------------------------------------------

JOIN_VALUES = {
    "throttle_time_ms": 5,
    "error_code": 0,
    "generation_id": 3,
    "protocol_type": "consumer",
    "protocol_name": "range",
    "leader": "m1",
    "skip_assignment": True,
    "member_id": "m2",
    "members": [
        {"member_id": "m1", "group_instance_id": "i1", "metadata": b"meta1"},
        {"member_id": "m2", "group_instance_id": None, "metadata": b""},
    ],
}


def join_expected(v: int) -> JoinGroupResult:
    return JoinGroupResult(
        error_code=0,
        generation_id=3,
        protocol_type="consumer" if v >= 7 else None,
        protocol_name="range",
        leader="m1",
        member_id="m2",
        members=(
            JoinGroupMember("m1", "i1" if v >= 5 else None, b"meta1"),
            JoinGroupMember("m2", None, b""),
        ),
        throttle_time_ms=5 if v >= 2 else 0,
        skip_assignment=v >= 9,
    )


SYNC_VALUES = {
    "throttle_time_ms": 5,
    "error_code": 27,
    "protocol_type": "consumer",
    "protocol_name": "range",
    "assignment": b"\x00\x00assignment",
}


def sync_expected(v: int) -> SyncGroupResult:
    return SyncGroupResult(
        error_code=27,
        assignment=b"\x00\x00assignment",
        protocol_type="consumer" if v >= 5 else None,
        protocol_name="range" if v >= 5 else None,
        throttle_time_ms=5 if v >= 1 else 0,
    )


HEARTBEAT_VALUES = {"throttle_time_ms": 5, "error_code": 22}


def heartbeat_expected(v: int) -> HeartbeatResult:
    return HeartbeatResult(error_code=22, throttle_time_ms=5 if v >= 1 else 0)


LEAVE_VALUES = {
    "throttle_time_ms": 5,
    "error_code": 0,
    "members": [
        {"member_id": "m1", "group_instance_id": "i1", "error_code": 0},
        {"member_id": "m2", "group_instance_id": None, "error_code": 25},
    ],
}


def leave_expected(v: int) -> LeaveGroupResult:
    members = (("m1", "i1", 0), ("m2", None, 25)) if v >= 3 else ()
    return LeaveGroupResult(error_code=0, members=members)


COMMIT_VALUES = {
    "throttle_time_ms": 5,
    "topics": [
        {
            "name": "t",
            "partitions": [
                {"partition_index": 0, "error_code": 0},
                {"partition_index": 1, "error_code": 22},
            ],
        },
        {"name": "u", "partitions": [{"partition_index": 7, "error_code": 25}]},
    ],
}


def commit_expected(v: int) -> OffsetCommitResult:
    return OffsetCommitResult(
        errors={("t", 0): 0, ("t", 1): 22, ("u", 7): 25}, throttle_time_ms=5 if v >= 3 else 0
    )


_FETCH_TOPICS = [
    {
        "name": "t",
        "partitions": [
            {
                "partition_index": 0,
                "committed_offset": 42,
                "committed_leader_epoch": 7,
                "metadata": "meta",
                "error_code": 0,
            },
            {
                "partition_index": 1,
                "committed_offset": -1,
                "committed_leader_epoch": -1,
                "metadata": None,
                "error_code": 0,
            },
        ],
    }
]
FETCH_VALUES = {
    "throttle_time_ms": 5,
    "topics": _FETCH_TOPICS,
    "error_code": 16,
    "groups": [{"group_id": "g", "topics": _FETCH_TOPICS, "error_code": 16}],
}


def fetch_expected(v: int) -> OffsetFetchResult:
    return OffsetFetchResult(
        error_code=16 if v >= 2 else 0,
        partitions={("t", 0): (42, 7 if v >= 5 else -1, "meta", 0), ("t", 1): (-1, -1, None, 0)},
    )


FIND_VALUES = {
    "throttle_time_ms": 5,
    "error_code": 15,
    "error_message": "not yet",
    "node_id": 3,
    "host": "broker-3",
    "port": 9093,
    "coordinators": [
        {
            "key": "g",
            "node_id": 3,
            "host": "broker-3",
            "port": 9093,
            "error_code": 15,
            "error_message": "not yet",
        }
    ],
}


def find_expected(v: int) -> FindCoordinatorResult:
    return FindCoordinatorResult(15, 3, "broker-3", 9093, "not yet" if v >= 1 else None)


RESPONSES: dict[str, tuple[dict[str, Any], Callable[[int], Any], Callable[[Any], Any]]] = {
    "FindCoordinator": (FIND_VALUES, find_expected, parse_find_coordinator),
    "JoinGroup": (JOIN_VALUES, join_expected, parse_join_group),
    "SyncGroup": (SYNC_VALUES, sync_expected, parse_sync_group),
    "Heartbeat": (HEARTBEAT_VALUES, heartbeat_expected, parse_heartbeat),
    "LeaveGroup": (LEAVE_VALUES, leave_expected, parse_leave_group),
    "OffsetCommit": (COMMIT_VALUES, commit_expected, parse_offset_commit),
    "OffsetFetch": (FETCH_VALUES, fetch_expected, parse_offset_fetch),
}


@pytest.mark.parametrize("case", ALL_VERSIONS, ids=version_id)
def test_response_layout_matches_kafka_spec_and_parses(case: tuple[ApiStructs, int]) -> None:
    api, version = case
    values, expected, parse = RESPONSES[api.name]
    struct = api.response(version, values)
    check_against_kafka_python(api, version, struct, request=False)
    # What the connection hands back is the decoded struct, not the one we built.
    decoded = api.requests[version].RESPONSE_TYPE.decode(struct.encode())
    assert parse(decoded) == expected(version)


def test_parsers_handle_an_empty_batch_answer_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no coordinator"):
        parse_find_coordinator(FIND_COORDINATOR.response(4, {**FIND_VALUES, "coordinators": []}))
    with pytest.raises(ValueError, match="no group"):
        parse_offset_fetch(OFFSET_FETCH.response(8, {**FETCH_VALUES, "groups": []}))


# --- parsers on aiokafka's own response structs -----------------------------------------


def _aiokafka_join(cls: Any) -> Any:
    v = cls.API_VERSION
    members = [("m1", "i1", b"meta1") if v >= 5 else ("m1", b"meta1")]
    head = [5] if v >= 2 else []
    return cls(*head, 0, 3, "range", "m1", "m2", members)


AIOKAFKA_CASES: list[tuple[Any, Callable[[Any], Any], Any]] = [
    *[
        (
            _aiokafka_join(cls),
            parse_join_group,
            JoinGroupResult(
                error_code=0,
                generation_id=3,
                protocol_type=None,
                protocol_name="range",
                leader="m1",
                member_id="m2",
                members=(JoinGroupMember("m1", "i1" if cls.API_VERSION >= 5 else None, b"meta1"),),
                throttle_time_ms=5 if cls.API_VERSION >= 2 else 0,
            ),
        )
        for cls in (
            aiokafka_group.JoinGroupResponse_v0,
            aiokafka_group.JoinGroupResponse_v1,
            aiokafka_group.JoinGroupResponse_v2,
            aiokafka_group.JoinGroupResponse_v5,
        )
    ],
    (
        aiokafka_group.SyncGroupResponse_v0(27, b"a"),
        parse_sync_group,
        SyncGroupResult(27, b"a"),
    ),
    (
        aiokafka_group.SyncGroupResponse_v3(5, 0, b"a"),
        parse_sync_group,
        SyncGroupResult(0, b"a", throttle_time_ms=5),
    ),
    (aiokafka_group.HeartbeatResponse_v0(27), parse_heartbeat, HeartbeatResult(27)),
    (aiokafka_group.HeartbeatResponse_v1(5, 0), parse_heartbeat, HeartbeatResult(0, 5)),
    (aiokafka_group.LeaveGroupResponse_v0(25), parse_leave_group, LeaveGroupResult(25)),
    (aiokafka_group.LeaveGroupResponse_v1(5, 0), parse_leave_group, LeaveGroupResult(0)),
    (
        aiokafka_commit.OffsetCommitResponse_v2([("t", [(0, 0), (1, 22)])]),
        parse_offset_commit,
        OffsetCommitResult({("t", 0): 0, ("t", 1): 22}),
    ),
    (
        aiokafka_commit.OffsetCommitResponse_v3(5, [("t", [(0, 0)])]),
        parse_offset_commit,
        OffsetCommitResult({("t", 0): 0}, throttle_time_ms=5),
    ),
    (
        aiokafka_commit.OffsetFetchResponse_v1([("t", [(0, 42, "m", 0)])]),
        parse_offset_fetch,
        OffsetFetchResult(0, {("t", 0): (42, -1, "m", 0)}),
    ),
    (
        aiokafka_commit.OffsetFetchResponse_v3(5, [("t", [(0, 42, "", 0), (1, -1, "", 0)])], 16),
        parse_offset_fetch,
        OffsetFetchResult(16, {("t", 0): (42, -1, "", 0), ("t", 1): (-1, -1, "", 0)}),
    ),
    (
        aiokafka_coordination.FindCoordinatorResponse_v0(0, 1, "h", 9092),
        parse_find_coordinator,
        FindCoordinatorResult(0, 1, "h", 9092),
    ),
    (
        aiokafka_coordination.FindCoordinatorResponse_v1(5, 15, "busy", 1, "h", 9092),
        parse_find_coordinator,
        FindCoordinatorResult(15, 1, "h", 9092, "busy"),
    ),
]


@pytest.mark.parametrize(
    ("response", "parse", "expected"),
    AIOKAFKA_CASES,
    ids=lambda x: type(x).__name__ if hasattr(x, "SCHEMA") else "",
)
def test_parsers_accept_aiokafka_response_structs(
    response: Any, parse: Callable[[Any], Any], expected: Any
) -> None:
    # Through the wire and back, as the connection would hand it over.
    decoded = type(response).decode(response.encode())
    assert parse(decoded) == expected


def test_our_structs_encode_like_aiokafka_where_both_define_a_version() -> None:
    """aiokafka's hand-written layouts are a second, independent reference."""
    pairs: list[tuple[Any, Any]] = [
        (
            join_group(5).build(5),
            aiokafka_group.JoinGroupRequest_v5(
                "g",
                6000,
                30000,
                "member-1",
                "instance-1",
                "consumer",
                [("cooperative-sticky", b"\x00\x01meta"), ("range", b"")],
            ),
        ),
        (
            sync_group(3).build(3),
            aiokafka_group.SyncGroupRequest_v3(
                "g", 4, "member-1", "instance-1", [("member-1", b"\x00\x00a"), ("member-2", b"")]
            ),
        ),
        (heartbeat(1).build(1), aiokafka_group.HeartbeatRequest_v1("g", 4, "member-1")),
        (leave_group(1).build(1), aiokafka_group.LeaveGroupRequest_v1("g", "member-1")),
        (
            offset_commit(3).build(3),
            aiokafka_commit.OffsetCommitRequest_v3(
                "g",
                4,
                "member-1",
                -1,
                [("a-topic", [(0, 0, "")]), ("b-topic", [(0, 2**40, "m0"), (1, 10, "m1")])],
            ),
        ),
        (
            offset_fetch(3).build(3),
            aiokafka_commit.OffsetFetchRequest_v3("g", [("a", [0]), ("b", [0, 2])]),
        ),
        (find_coordinator(1).build(1), aiokafka_coordination.FindCoordinatorRequest_v1("g", 1)),
    ]
    for ours, theirs in pairs:
        assert ours.encode() == theirs.encode(), type(ours).__name__
