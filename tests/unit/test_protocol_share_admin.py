"""Share-group admin wire layouts, checked byte for byte against Apache Kafka 4.4's own
serializers.

The hex below is what ``org.apache.kafka.common.message.*Data`` of kafka-clients 4.4.0
write (``MessageUtil.toByteBufferAccessor(message, version)``, built in a throwaway Java
program against ``.kafka/4.4.0/libs``): every request we encode must equal it, and
every response must decode to the values the Java side set.
"""

from __future__ import annotations

import uuid

import pytest
from aiokafka.errors import IncompatibleBrokerVersion

from aiogroup._protocol.schema import ApiStructs
from aiogroup._protocol.share_admin import (
    ALTER_SHARE_GROUP_OFFSETS,
    DELETE_SHARE_GROUP_OFFSETS,
    DESCRIBE_SHARE_GROUP_OFFSETS,
    INCREMENTAL_ALTER_CONFIGS,
    SHARE_GROUP_DESCRIBE,
    AlterGroupConfigsRequest,
    AlterShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest,
    ShareGroupDescribeRequest,
    parse_alter_group_configs,
    parse_alter_share_group_offsets,
    parse_delete_share_group_offsets,
    parse_describe_share_group_offsets,
    parse_share_group_describe,
)

#: Kafka 4.4's bytes (see the module docstring); topic id 0102...0f10.
GOLDEN = {
    "sgd_resp_v1": (
        "0000000002000000026707537461626c6500000003000000030773696d706c6502036d310000"
        "0000030263032f68020274020102030405060708090a0b0c0d0e0f1002740300000000000000"
        "01000000800000000000"
    ),
    "sgd_req_v1": "0202670000",
    "dsgo_resp_v0": (
        "000000000202670202740102030405060708090a0b0c0d0e0f10020000000100000000000000"
        "050000000000000000000000000000"
    ),
    "dsgo_resp_v1": (
        "000000000202670202740102030405060708090a0b0c0d0e0f10020000000100000000000000"
        "0500000000000000000000000700000000000000000000"
    ),
    "dsgo_req_v1_all": "020267000000",
    "dsgo_req_v1_t": "020267020274030000000000000002000000",
    "asgo_req_v0": "026702027402000000000000000000000009000000",
    "asgo_resp_v0": "000000000000000202740102030405060708090a0b0c0d0e0f10020000000000030278000000",
    "dlsgo_req_v0": "02670202740000",
    "dlsgo_resp_v0": "00000000004405627573790202740102030405060708090a0b0c0d0e0f100000000000",
    "iac_req_v0": (
        "000000012000016700000002001773686172652e6175746f2e6f66667365742e726573657400"
        "00086561726c69657374001a73686172652e64656c69766572792e636f756e742e6c696d6974"
        "01ffff00"
    ),
    "iac_req_v1": (
        "02200267031873686172652e6175746f2e6f66667365742e726573657400096561726c696573"
        "74001b73686172652e64656c69766572792e636f756e742e6c696d6974010000000000"
    ),
    "iac_resp_v0": "00000000000000010028000362616420000167",
    "iac_resp_v1": "00000000020028046261642002670000",
}
TOPIC_ID = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")


def decode(api: ApiStructs, version: int, name: str) -> object:
    return api.responses[version].decode(bytes.fromhex(GOLDEN[name]))


@pytest.mark.parametrize(
    ("request_", "version", "name"),
    [
        (ShareGroupDescribeRequest("g"), 1, "sgd_req_v1"),
        (DescribeShareGroupOffsetsRequest("g"), 1, "dsgo_req_v1_all"),
        (DescribeShareGroupOffsetsRequest("g", {"t": [2, 0]}), 1, "dsgo_req_v1_t"),
        (AlterShareGroupOffsetsRequest("g", {"t": {0: 9}}), 0, "asgo_req_v0"),
        (DeleteShareGroupOffsetsRequest("g", ["t"]), 0, "dlsgo_req_v0"),
        (
            AlterGroupConfigsRequest(
                "g", {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": None}
            ),
            0,
            "iac_req_v0",
        ),
        (
            AlterGroupConfigsRequest(
                "g", {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": None}
            ),
            1,
            "iac_req_v1",
        ),
    ],
)
def test_requests_encode_as_kafka_does(request_: object, version: int, name: str) -> None:
    assert request_.build(version).encode().hex() == GOLDEN[name]  # type: ignore[attr-defined]


def test_share_group_describe_response() -> None:
    found = parse_share_group_describe(decode(SHARE_GROUP_DESCRIBE, 1, "sgd_resp_v1"))
    assert (found.group_id, found.group_state, found.group_epoch, found.assignor_name) == (
        "g",
        "Stable",
        3,
        "simple",
    )
    (member,) = found.members
    assert (member.member_id, member.rack_id, member.client_id, member.client_host) == (
        "m1",
        None,
        "c",
        "/h",
    )
    assert member.subscribed_topics == ("t",)
    assert member.assignment == {("t", 0), ("t", 1)}


@pytest.mark.parametrize(("version", "lag"), [(0, None), (1, 7)])
def test_describe_offsets_response(version: int, lag: int | None) -> None:
    result = parse_describe_share_group_offsets(
        decode(DESCRIBE_SHARE_GROUP_OFFSETS, version, f"dsgo_resp_v{version}")
    )
    (row,) = result.rows
    assert (row.topic, row.topic_id, row.partition, row.start_offset, row.lag) == (
        "t",
        TOPIC_ID,
        1,
        5,
        lag,
    )
    assert (result.error_code, row.error_code) == (0, 0)


def test_alter_and_delete_offsets_responses() -> None:
    altered = parse_alter_share_group_offsets(decode(ALTER_SHARE_GROUP_OFFSETS, 0, "asgo_resp_v0"))
    (row,) = altered.rows
    assert (row.topic, row.partition, row.error_code, row.error_message) == ("t", 0, 3, "x")
    deleted = parse_delete_share_group_offsets(
        decode(DELETE_SHARE_GROUP_OFFSETS, 0, "dlsgo_resp_v0")
    )
    assert (deleted.error_code, deleted.error_message) == (68, "busy")
    assert [(r.topic, r.topic_id, r.error_code) for r in deleted.rows] == [("t", TOPIC_ID, 0)]


@pytest.mark.parametrize("version", [0, 1])
def test_alter_configs_response(version: int) -> None:
    answer = decode(INCREMENTAL_ALTER_CONFIGS, version, f"iac_resp_v{version}")
    assert parse_alter_group_configs(answer) == (40, "bad")


def test_versions_kafka_44_serves() -> None:
    assert sorted(SHARE_GROUP_DESCRIBE.requests) == [1]
    assert sorted(DESCRIBE_SHARE_GROUP_OFFSETS.requests) == [0, 1]
    assert sorted(ALTER_SHARE_GROUP_OFFSETS.requests) == [0]
    assert sorted(DELETE_SHARE_GROUP_OFFSETS.requests) == [0]
    assert sorted(INCREMENTAL_ALTER_CONFIGS.requests) == [0, 1]


def test_broker_without_share_groups_gets_a_clear_error() -> None:
    # The embedded Tansu's ApiVersions: no key 77.
    with pytest.raises(IncompatibleBrokerVersion, match="does not support the ShareGroupDescribe"):
        ShareGroupDescribeRequest("g").prepare({10: (0, 4), 69: (0, 0)})


@pytest.mark.parametrize(
    ("build", "error"),
    [
        (lambda: ShareGroupDescribeRequest(""), ValueError),
        (lambda: DescribeShareGroupOffsetsRequest("g", {"t": [-1]}), ValueError),
        (lambda: AlterShareGroupOffsetsRequest("g", {}), ValueError),
        (lambda: AlterShareGroupOffsetsRequest("g", {"t": {0: -5}}), ValueError),
        (lambda: DeleteShareGroupOffsetsRequest("g", "t"), ValueError),
        (lambda: DeleteShareGroupOffsetsRequest("g", []), ValueError),
        (lambda: AlterGroupConfigsRequest("g", {}), ValueError),
        (lambda: AlterGroupConfigsRequest("g", {"share.x": 5}), TypeError),
    ],
)
def test_bad_input_is_refused(build: object, error: type[Exception]) -> None:
    with pytest.raises(error):
        build()  # type: ignore[operator]
