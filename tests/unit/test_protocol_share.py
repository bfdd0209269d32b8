"""Share consumer wire layouts (ShareGroupHeartbeat, ShareFetch, ShareAcknowledge),
checked byte for byte against Apache Kafka 4.4's own serializers.

The hex below is what ``org.apache.kafka.common.message.Share*Data`` of kafka-clients
4.4.0 write (``MessageUtil.toByteBufferAccessor(message, version)``, built in a
throwaway Java program against ``.kafka/4.4.0/libs``): every request we encode must
equal it, and every response must decode to the values the Java side set.
"""

from __future__ import annotations

import uuid

import pytest
from aiokafka.errors import IncompatibleBrokerVersion

from aiogroup._protocol.schema import ApiStructs
from aiogroup._protocol.share import (
    SHARE_ACKNOWLEDGE,
    SHARE_FETCH,
    SHARE_GROUP_HEARTBEAT,
    AckBatch,
    AcknowledgeType,
    AcquiredRange,
    AcquireMode,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    ShareGroupHeartbeatRequest,
    parse_share_acknowledge,
    parse_share_fetch,
    parse_share_group_heartbeat,
)

#: Kafka 4.4's bytes (see the module docstring); topic id 0102...0f10.
GOLDEN = {
    "sgh_req_join": "0267026d000000000002027400",
    "sgh_req_leave": "0267026dffffffff000000",
    "sgh_resp_assign": (
        "00000000000000026d000000030000138801020102030405060708090a0b0c0d0e0f10030000"
        "000000000002000000"
    ),
    "sgh_resp_err": "000000000019027800ffffffff00000000ff00",
    "sf_req_v1": (
        "0267026d00000001000001f400000001001000000000000a0000000a020102030405060708090a"
        "0b0c0d0e0f100200000000020000000000000005000000000000000704010002000000020102"
        "030405060708090a0b0c0d0e0f1002000000020000"
    ),
    "sf_req_v2": (
        "0267026d00000001000001f400000001001000000000000a0000000a0101020102030405060708"
        "090a0b0c0d0e0f100200000000020000000000000005000000000000000704010002000000020102"
        "030405060708090a0b0c0d0e0f1002000000020000"
    ),
    "sf_resp": (
        "0000000000000000007530020102030405060708090a0b0c0d0e0f1003000000000000000000"
        "0000000001000000040004010203020000000000000005000000000000000900020000000000"
        "010006036e6c004a0461636b000000020000000500010100000200000002026800002384000000"
    ),
    "sa_req_v1": (
        "0267026d00000002020102030405060708090a0b0c0d0e0f1002000000030200000000000000"
        "000000000000000001020300000000"
    ),
    "sa_req_v2": (
        "0267026d0000000201020102030405060708090a0b0c0d0e0f100200000003020000000000000000"
        "0000000000000001020400000000"
    ),
    "sa_resp_v1": (
        "00000000000000020102030405060708090a0b0c0d0e0f1003000000030000000000000100000000"
        "000000000004007e056c6f636bffffffffffffffff0000000100"
    ),
    "sa_resp_v2": (
        "0000000000000000003a98020102030405060708090a0b0c0d0e0f1003000000030000000000000100"
        "000000000000000004007e056c6f636bffffffffffffffff0000000100"
    ),
}
TID = uuid.UUID("01020304-0506-0708-090a-0b0c0d0e0f10")


def decode(api: ApiStructs, version: int, name: str) -> object:
    return api.responses[version].decode(bytes.fromhex(GOLDEN[name]))


def _fetch(version: int) -> ShareFetchRequest:
    return ShareFetchRequest(
        "g",
        "m",
        1,
        {TID: {0: [AckBatch(5, 7, (1, 0, 2))]}},
        forgotten={TID: [2]},
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=1_048_576,
        max_records=10,
        batch_size=10,
        acquire_mode=AcquireMode.RECORD_LIMIT if version == 2 else AcquireMode.BATCH_OPTIMIZED,
        is_renew_ack=version == 2,
    )


def _ack(version: int) -> ShareAcknowledgeRequest:
    kind = AcknowledgeType.RENEW if version == 2 else AcknowledgeType.REJECT
    return ShareAcknowledgeRequest("g", "m", 2, {TID: {3: [AckBatch(0, 1, (kind,))]}})


@pytest.mark.parametrize(
    ("request_", "version", "name"),
    [
        (ShareGroupHeartbeatRequest("g", "m", 0, subscribed_topic_names=["t"]), 1, "sgh_req_join"),
        (ShareGroupHeartbeatRequest("g", "m", -1), 1, "sgh_req_leave"),
        (_fetch(1), 1, "sf_req_v1"),
        (_fetch(2), 2, "sf_req_v2"),
        (_ack(1), 1, "sa_req_v1"),
        (
            ShareAcknowledgeRequest(
                "g", "m", 2, {TID: {3: [AckBatch(0, 1, (4,))]}}, is_renew_ack=True
            ),
            2,
            "sa_req_v2",
        ),
    ],
)
def test_requests_encode_as_kafka_does(request_: object, version: int, name: str) -> None:
    assert request_.build(version).encode().hex() == GOLDEN[name]  # type: ignore[attr-defined]


def test_a_renew_in_the_batches_marks_the_request_as_renewing_on_v2_only() -> None:
    # _ack(2) holds a RENEW but does not set is_renew_ack: the flag is the caller's.
    assert _ack(2).build(2).encode().hex() != GOLDEN["sa_req_v2"]
    with pytest.raises(IncompatibleBrokerVersion, match="RENEW acknowledgement"):
        _ack(2).build(1)


def test_v2_features_are_refused_on_v1() -> None:
    with pytest.raises(IncompatibleBrokerVersion, match="KIP-1206"):
        _fetch(2).build(1)
    renewing = ShareFetchRequest("g", "m", 1, {TID: {0: [AckBatch(0, 0, (4,))]}})
    with pytest.raises(IncompatibleBrokerVersion, match="KIP-1222"):
        renewing.build(1)


def test_versions_follow_the_broker() -> None:
    req = _fetch(1)
    req.prepare({78: (1, 2)})
    assert req.api_version == 2
    req.prepare({78: (1, 1)})
    assert req.api_version == 1
    with pytest.raises(IncompatibleBrokerVersion, match="does not support the ShareFetch API"):
        req.prepare({1: (0, 17)})
    with pytest.raises(IncompatibleBrokerVersion, match="no common ShareGroupHeartbeat"):
        ShareGroupHeartbeatRequest("g", "m", 0).prepare({76: (0, 0)})


def test_heartbeat_response_with_an_assignment() -> None:
    found = parse_share_group_heartbeat(decode(SHARE_GROUP_HEARTBEAT, 1, "sgh_resp_assign"))
    assert (found.error_code, found.member_id, found.member_epoch) == (0, "m", 3)
    assert found.heartbeat_interval_ms == 5000
    assert found.assignment == {TID: (0, 2)}


def test_heartbeat_response_with_an_error_and_no_assignment() -> None:
    found = parse_share_group_heartbeat(decode(SHARE_GROUP_HEARTBEAT, 1, "sgh_resp_err"))
    assert (found.error_code, found.error_message, found.member_id) == (25, "x", None)
    assert found.member_epoch == -1
    assert found.assignment is None


@pytest.mark.parametrize("version", [1, 2])
def test_fetch_response(version: int) -> None:
    found = parse_share_fetch(decode(SHARE_FETCH, version, "sf_resp"))
    assert (found.error_code, found.acquisition_lock_timeout_ms) == (0, 30000)
    first, second = found.partitions
    assert (first.topic_id, first.partition, first.error_code) == (TID, 0, 0)
    assert (first.leader_id, first.leader_epoch) == (1, 4)
    assert first.records == b"\x01\x02\x03"
    assert first.acquired == (AcquiredRange(5, 9, 2),)
    assert (second.partition, second.error_code, second.error_message) == (1, 6, "nl")
    assert (second.acknowledge_error_code, second.acknowledge_error_message) == (74, "ack")
    assert second.records == b""
    assert second.acquired == ()
    assert found.node_endpoints == {2: ("h", 9092)}


@pytest.mark.parametrize(("version", "lock"), [(1, -1), (2, 15000)])
def test_acknowledge_response(version: int, lock: int) -> None:
    found = parse_share_acknowledge(decode(SHARE_ACKNOWLEDGE, version, f"sa_resp_v{version}"))
    assert found.acquisition_lock_timeout_ms == lock
    ok, bad = found.partitions
    assert (ok.topic_id, ok.partition, ok.error_code, ok.leader_id) == (TID, 3, 0, 1)
    assert (bad.partition, bad.error_code, bad.error_message, bad.leader_id) == (4, 126, "lock", -1)
    assert found.node_endpoints == {}


def test_responses_round_trip_through_our_own_structs() -> None:
    """Encode a response with our structs and decode it again: the fields survive."""
    values = {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": None,
        "acquisition_lock_timeout_ms": 100,
        "responses": [
            {
                "topic_id": TID,
                "partitions": [
                    {
                        "partition_index": 7,
                        "error_code": 0,
                        "error_message": None,
                        "acknowledge_error_code": 0,
                        "acknowledge_error_message": None,
                        "current_leader": {"leader_id": 3, "leader_epoch": 9},
                        "records": None,
                        "acquired_records": [
                            {"first_offset": 0, "last_offset": 3, "delivery_count": 1}
                        ],
                    }
                ],
            }
        ],
        "node_endpoints": [],
    }
    raw = SHARE_FETCH.response(2, values).encode()
    found = parse_share_fetch(SHARE_FETCH.responses[2].decode(raw))
    (part,) = found.partitions
    assert (part.partition, part.leader_epoch, part.records) == (7, 9, None)
    assert part.acquired == (AcquiredRange(0, 3, 1),)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: AckBatch(5, 4, (1,)), ValueError, "not a range"),
        (lambda: AckBatch(-1, 0, (1,)), ValueError, "not a range"),
        (lambda: AckBatch(0, 2, (1, 1)), ValueError, "needs 1 or 3 types"),
        (lambda: AckBatch(0, 0, (9,)), ValueError, "9"),
        (lambda: ShareGroupHeartbeatRequest("", "m", 0), ValueError, "group_id"),
        (lambda: ShareGroupHeartbeatRequest("g", "", 0), ValueError, "member_id"),
        (lambda: ShareGroupHeartbeatRequest("g", "m", -2), ValueError, "member_epoch"),
        (
            lambda: ShareGroupHeartbeatRequest("g", "m", 0, subscribed_topic_names="t"),
            TypeError,
            "not a str",
        ),
        (lambda: ShareFetchRequest("g", "m", 0, {"t": {}}), TypeError, "uuid.UUID"),  # type: ignore[dict-item]
        (lambda: ShareFetchRequest("g", "m", 0, {TID: {0: [(0, 0, 1)]}}), TypeError, "AckBatch"),  # type: ignore[list-item]
        (lambda: ShareFetchRequest("g", "m", -2, {}), ValueError, "session_epoch"),
        (lambda: ShareAcknowledgeRequest("g", "m", 0, {}), ValueError, "epoch 0"),
    ],
)
def test_bad_input_is_named(make: object, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        make()  # type: ignore[operator]
