"""KIP-848 wire layouts: ConsumerGroupHeartbeat v0/v1 and the member-epoch commit/fetch.

No independent Python implementation of API key 68 exists to check against
(kafka-python 3 stops at the classic group APIs), so the response is checked
against bytes laid out by hand from ConsumerGroupHeartbeatResponse.json - the
shape a Kafka 4 broker sends - and the request field by field.
"""

from __future__ import annotations

import struct
import uuid
from io import BytesIO

import pytest
from aiokafka.errors import IncompatibleBrokerVersion

from aiogroup._protocol.consumer_group import (
    LEAVE_STATIC_EPOCH,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResult,
    ConsumerOffsetCommitRequest,
    ConsumerOffsetFetchRequest,
    parse_consumer_group_heartbeat,
)
from aiogroup._protocol.messages import CONSUMER_GROUP_HEARTBEAT, OFFSET_COMMIT, OFFSET_FETCH
from aiogroup._protocol.schema import Field, Kind, NullableStruct, Uuid, struct_to_dict
from aiogroup.structs import OffsetAndMetadata, TopicPartition

T1 = uuid.UUID("00000000-0000-0000-0000-0000000000a1")
T2 = uuid.UUID("7c9a43b2-1b2f-4f0e-9a51-2d6ad0d0c0de")


def cstr(s: str | None) -> bytes:
    """A compact (nullable) string: uvarint(len + 1), 0 for null."""
    if s is None:
        return b"\x00"
    raw = s.encode()
    assert len(raw) < 127
    return bytes([len(raw) + 1]) + raw


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def test_api_key_versions_and_flexibility() -> None:
    assert CONSUMER_GROUP_HEARTBEAT.api_key == 68
    assert sorted(CONSUMER_GROUP_HEARTBEAT.requests) == [0, 1]
    assert all(CONSUMER_GROUP_HEARTBEAT.is_flexible(v) for v in (0, 1))


def full_request() -> ConsumerGroupHeartbeatRequest:
    return ConsumerGroupHeartbeatRequest(
        "g",
        "",
        0,
        instance_id="i-1",
        rack_id=None,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=["b", "a"],
        server_assignor="uniform",
        topic_partitions={T2: (1, 0), T1: ()},
    )


@pytest.mark.parametrize("version", [0, 1])
def test_request_round_trip(version: int) -> None:
    req = full_request()
    built = req.build(version)
    decoded = type(built).decode(built.encode())
    assert decoded == built
    fields = struct_to_dict(decoded)
    assert fields["group_id"] == "g"
    assert fields["member_epoch"] == 0
    assert fields["instance_id"] == "i-1"
    assert fields["rack_id"] is None
    assert fields["rebalance_timeout_ms"] == 30000
    assert fields["subscribed_topic_names"] == ["a", "b"]
    assert fields["server_assignor"] == "uniform"
    # Sorted by topic id bytes, partitions sorted.
    assert [(r["topic_id"], r["partitions"]) for r in fields["topic_partitions"]] == [
        (T1, []),
        (T2, [0, 1]),
    ]
    assert ("subscribed_topic_regex" in fields) == (version >= 1)


def test_request_bytes_match_the_spec_layout() -> None:
    """v0 request with the "unchanged" nulls, laid out by hand from the JSON spec."""
    req = ConsumerGroupHeartbeatRequest("g", "m", 5)
    expected = (
        cstr("g")
        + cstr("m")
        + i32(5)
        + cstr(None)  # instance_id
        + cstr(None)  # rack_id
        + i32(-1)  # rebalance_timeout_ms unchanged
        + b"\x00"  # subscribed_topic_names null
        + cstr(None)  # server_assignor
        + b"\x00"  # topic_partitions null
        + b"\x00"  # tagged fields
    )
    assert req.build(0).encode() == expected
    # v1 adds the regex after the topic names.
    v1 = req.build(1).encode()
    assert v1 == expected[: len(expected) - 4] + cstr(None) + expected[-4:]


def test_regex_needs_v1() -> None:
    req = ConsumerGroupHeartbeatRequest("g", "", 0, subscribed_topic_regex="t-.*")
    with pytest.raises(IncompatibleBrokerVersion, match=r"regex subscription.*v1"):
        req.build(0)
    assert struct_to_dict(req.build(1))["subscribed_topic_regex"] == "t-.*"


def test_broker_without_api_68_gets_a_clear_error() -> None:
    req = ConsumerGroupHeartbeatRequest("g", "", 0)
    with pytest.raises(
        IncompatibleBrokerVersion, match="does not support the ConsumerGroupHeartbeat"
    ):
        req.prepare({11: (0, 9)})
    assert req.prepare({68: (0, 1)}).API_VERSION == 1
    assert req.api_version == 1


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"group_id": ""}, ValueError),
        ({"member_epoch": -3}, ValueError),
        ({"instance_id": ""}, ValueError),
        ({"subscribed_topic_names": "abc"}, TypeError),
        ({"topic_partitions": {"not-a-uuid": [0]}}, TypeError),
        ({"topic_partitions": {T1: [-1]}}, ValueError),
        ({"rebalance_timeout_ms": -2}, ValueError),
    ],
)
def test_request_rejects_bad_input(kwargs: dict[str, object], error: type[Exception]) -> None:
    args: dict[str, object] = {"group_id": "g", "member_id": "", "member_epoch": 0}
    args.update(kwargs)
    with pytest.raises(error):
        ConsumerGroupHeartbeatRequest(**args)  # type: ignore[arg-type]


def captured_response(assignment: bool) -> bytes:
    """A Kafka 4 answer to a join: member id, epoch 1, 5 s interval, two topics assigned."""
    body = i32(0) + i16(0) + cstr(None) + cstr("m-1") + i32(1) + i32(5000)
    if not assignment:
        return body + b"\xff" + b"\x00"
    rows = b""
    for tid, parts in ((T1, [2, 0]), (T2, [])):
        rows += tid.bytes + bytes([len(parts) + 1]) + b"".join(i32(p) for p in parts) + b"\x00"
    return body + b"\x01" + bytes([3]) + rows + b"\x00" + b"\x00"


@pytest.mark.parametrize("version", [0, 1])
def test_captured_response_decodes(version: int) -> None:
    cls = CONSUMER_GROUP_HEARTBEAT.responses[version]
    result = parse_consumer_group_heartbeat(cls.decode(captured_response(True)))
    assert result == ConsumerGroupHeartbeatResult(
        error_code=0,
        error_message=None,
        member_id="m-1",
        member_epoch=1,
        heartbeat_interval_ms=5000,
        assignment={T1: (0, 2), T2: ()},
        throttle_time_ms=0,
    )
    no_assignment = parse_consumer_group_heartbeat(cls.decode(captured_response(False)))
    assert no_assignment.assignment is None


@pytest.mark.parametrize(
    "assignment",
    [None, {"topic_partitions": []}, {"topic_partitions": [{"topic_id": T2, "partitions": [3]}]}],
)
def test_response_round_trip(assignment: dict[str, object] | None) -> None:
    values = {
        "throttle_time_ms": 7,
        "error_code": 110,
        "error_message": "fenced",
        "member_id": None,
        "member_epoch": 4,
        "heartbeat_interval_ms": 3000,
        "assignment": assignment,
    }
    resp = CONSUMER_GROUP_HEARTBEAT.response(1, values)
    decoded = type(resp).decode(resp.encode())
    assert decoded == resp
    result = parse_consumer_group_heartbeat(decoded)
    assert result.error_code == 110 and result.error_message == "fenced"
    assert result.member_id is None and result.throttle_time_ms == 7
    if assignment is None:
        assert result.assignment is None
    else:
        assert result.assignment == {
            r["topic_id"]: tuple(r["partitions"])  # type: ignore[index]
            for r in assignment["topic_partitions"]  # type: ignore[attr-defined]
        }


def test_nullable_struct_and_uuid_types() -> None:
    from aiokafka.protocol.types import Int32, Schema

    ns = NullableStruct(Schema(("x", Int32)))
    assert ns.encode(None) == b"\xff"
    assert ns.decode(BytesIO(ns.encode((5,)))) == (5,)
    assert ns.decode(BytesIO(b"\xff")) is None
    assert Uuid.decode(BytesIO(T2.bytes)) == T2
    with pytest.raises(ValueError, match="truncated"):
        Uuid.decode(BytesIO(b"\x00" * 3))
    with pytest.raises(ValueError, match="single=True needs fields"):
        Field("x", Kind.INT32, single=True)


OFFSETS = {
    TopicPartition("t", 1): OffsetAndMetadata(10, "m"),
    TopicPartition("t", 0): OffsetAndMetadata(3, ""),
}


def test_commit_carries_member_epoch_on_v9_only() -> None:
    req = ConsumerOffsetCommitRequest("g", 7, "m-1", None, OFFSETS)
    assert max(OFFSET_COMMIT.requests) == 9
    built = req.prepare({8: (0, 9)})
    fields = struct_to_dict(type(built).decode(built.encode()))
    assert req.api_version == 9
    assert fields["generation_id"] == 7 and fields["member_id"] == "m-1"
    with pytest.raises(IncompatibleBrokerVersion, match=r"member epoch.*v9\+"):
        req.prepare({8: (0, 8)})


def test_offset_fetch_names_the_member_on_v9_only() -> None:
    req = ConsumerOffsetFetchRequest("g", "m-1", 7, [TopicPartition("t", 0)])
    assert max(OFFSET_FETCH.requests) == 9
    built = req.prepare({9: (0, 9)})
    fields = struct_to_dict(type(built).decode(built.encode()))
    (group,) = fields["groups"]
    assert group["member_id"] == "m-1" and group["member_epoch"] == 7
    assert group["topics"] == [{"name": "t", "partition_indexes": [0], "_tagged_fields": {}}]
    assert fields["require_stable"] is True
    with pytest.raises(IncompatibleBrokerVersion, match="member epoch"):
        req.prepare({9: (0, 8)})


def test_static_leave_epoch_is_accepted() -> None:
    req = ConsumerGroupHeartbeatRequest("g", "m", LEAVE_STATIC_EPOCH, instance_id="i")
    assert struct_to_dict(req.build(1))["member_epoch"] == -2


def test_topic_ids_request_and_response() -> None:
    from aiogroup._protocol.consumer_group import TopicIdsRequest, parse_topic_ids
    from aiogroup._protocol.messages import TOPIC_METADATA

    req = TopicIdsRequest(["b", "a"])
    built = req.prepare({3: (0, 13)})
    assert req.api_version == 12
    fields = struct_to_dict(type(built).decode(built.encode()))
    assert [t["name"] for t in fields["topics"]] == ["a", "b"]
    assert fields["allow_auto_topic_creation"] is False
    assert struct_to_dict(TopicIdsRequest(None).build(12))["topics"] is None
    with pytest.raises(IncompatibleBrokerVersion, match="no common Metadata version"):
        req.prepare({3: (0, 5)})
    resp = TOPIC_METADATA.response(
        12,
        {
            "throttle_time_ms": 0,
            "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
            "cluster_id": "c",
            "controller_id": 1,
            "topics": [
                {
                    "error_code": 0,
                    "name": "a",
                    "topic_id": T1,
                    "is_internal": False,
                    "partitions": [
                        {
                            "error_code": 0,
                            "partition_index": 0,
                            "leader_id": 1,
                            "leader_epoch": 0,
                            "replica_nodes": [1],
                            "isr_nodes": [1],
                            "offline_replicas": [],
                        }
                    ],
                    "topic_authorized_operations": -2147483648,
                },
                {
                    "error_code": 3,
                    "name": "gone",
                    "topic_id": T2,
                    "is_internal": False,
                    "partitions": [],
                    "topic_authorized_operations": 0,
                },
            ],
            "cluster_authorized_operations": 0,
        },
    )
    assert parse_topic_ids(type(resp).decode(resp.encode())) == {T1: "a"}


def test_consumer_group_describe_round_trip() -> None:
    from aiogroup._protocol.consumer_group import (
        ConsumerGroupDescribeRequest,
        parse_consumer_group_describe,
    )
    from aiogroup._protocol.messages import CONSUMER_GROUP_DESCRIBE

    req = ConsumerGroupDescribeRequest("g")
    built = req.prepare({69: (0, 1)})
    assert struct_to_dict(type(built).decode(built.encode()))["group_ids"] == ["g"]
    assignment = {"topic_partitions": [{"topic_id": T1, "topic_name": "t", "partitions": [1, 0]}]}
    resp = CONSUMER_GROUP_DESCRIBE.response(
        0,
        {
            "throttle_time_ms": 0,
            "groups": [
                {
                    "error_code": 0,
                    "error_message": None,
                    "group_id": "g",
                    "group_state": "Stable",
                    "group_epoch": 3,
                    "assignment_epoch": 3,
                    "assignor_name": "uniform",
                    "members": [
                        {
                            "member_id": "m",
                            "instance_id": None,
                            "rack_id": None,
                            "member_epoch": 3,
                            "client_id": "c",
                            "client_host": "/127.0.0.1",
                            "subscribed_topic_names": ["t"],
                            "subscribed_topic_regex": None,
                            "assignment": assignment,
                            "target_assignment": {"topic_partitions": []},
                        }
                    ],
                    "authorized_operations": 0,
                }
            ],
        },
    )
    raw = resp.encode()
    # A non-nullable struct is inline: no presence marker before its array.
    assert CONSUMER_GROUP_DESCRIBE.responses[0].decode(raw) == resp
    group = parse_consumer_group_describe(type(resp).decode(raw))
    assert group.group_state == "Stable" and group.group_epoch == 3
    (member,) = group.members
    assert member.client_id == "c" and member.assignment == {("t", 0), ("t", 1)}
    assert member.target_assignment == frozenset()
