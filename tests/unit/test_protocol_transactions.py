"""AddOffsetsToTxn and TxnOffsetCommit layouts, checked against kafka-python 3.

kafka-python generates its messages from Apache Kafka's JSON specs, an implementation
independent of ours: every version we define must decode there to the same values
and re-encode to the same bytes.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.errors import IncompatibleBrokerVersion
from kafka.protocol.producer import transaction as kp_txn

from aiogroup._protocol.schema import TAGS, ApiStructs, struct_to_dict
from aiogroup._protocol.transactions import (
    ADD_OFFSETS_TO_TXN,
    TXN_OFFSET_COMMIT,
    AddOffsetsToTxnRequest,
    TxnOffsetCommitRequest,
    parse_add_offsets_to_txn,
    parse_txn_offset_commit,
)
from aiogroup.structs import OffsetAndMetadata, TopicPartition

KP = {
    "AddOffsetsToTxn": (kp_txn.AddOffsetsToTxnRequest, kp_txn.AddOffsetsToTxnResponse),
    "TxnOffsetCommit": (kp_txn.TxnOffsetCommitRequest, kp_txn.TxnOffsetCommitResponse),
}
OFFSETS = {
    TopicPartition("b", 1): OffsetAndMetadata(7, "m"),
    TopicPartition("a", 2): OffsetAndMetadata(5, ""),
    TopicPartition("a", 0): OffsetAndMetadata(3, ""),
}


def txn_commit() -> TxnOffsetCommitRequest:
    return TxnOffsetCommitRequest("tx", 4000, 3, "g", 12, "member-1", "instance-1", OFFSETS)


def same(ours: Any, theirs: Any, where: str = "") -> None:
    if isinstance(ours, dict):
        for name, value in ours.items():
            if name != TAGS:
                same(value, getattr(theirs, name), f"{where}.{name}")
    elif isinstance(ours, list):
        assert theirs is not None and len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            same(a, b, f"{where}[{i}]")
    else:
        assert ours == theirs, where


def check(api: ApiStructs, version: int, struct: Any, *, request: bool) -> None:
    encoded = struct.encode()
    assert type(struct).decode(encoded) == struct
    kp_cls = KP[api.name][0 if request else 1]
    assert kp_cls.min_version <= version <= kp_cls.max_version
    theirs = kp_cls.decode(encoded, version=version)
    same(struct_to_dict(struct), theirs)
    if request:
        theirs.with_header()
    else:
        theirs._header = None
    assert bytes(theirs.encode(version=version)) == encoded


@pytest.mark.parametrize("version", range(5))
def test_add_offsets_to_txn_matches_the_spec(version: int) -> None:
    struct = AddOffsetsToTxnRequest("tx", 4000, 3, "g").build(version)
    assert struct.FLEXIBLE_VERSION == (version >= 3)
    check(ADD_OFFSETS_TO_TXN, version, struct, request=True)
    answer = ADD_OFFSETS_TO_TXN.response(version, {"throttle_time_ms": 0, "error_code": 51})
    check(ADD_OFFSETS_TO_TXN, version, answer, request=False)
    assert parse_add_offsets_to_txn(answer) == 51


@pytest.mark.parametrize("version", [3, 4])
def test_txn_offset_commit_carries_the_member_identity(version: int) -> None:
    struct = txn_commit().build(version)
    check(TXN_OFFSET_COMMIT, version, struct, request=True)
    fields = struct_to_dict(struct)
    assert (fields["generation_id"], fields["member_id"], fields["group_instance_id"]) == (
        12,
        "member-1",
        "instance-1",
    )
    assert (fields["producer_id"], fields["producer_epoch"]) == (4000, 3)
    # Sorted by topic, then partition, so equal commits encode equally.
    assert [
        (t["name"], [p["partition_index"] for p in t["partitions"]]) for t in fields["topics"]
    ] == [
        ("a", [0, 2]),
        ("b", [1]),
    ]
    assert fields["topics"][1]["partitions"][0]["committed_metadata"] == "m"


@pytest.mark.parametrize("version", [0, 1, 2])
def test_txn_offset_commit_refuses_versions_without_the_identity(version: int) -> None:
    """v0-v2 would drop the fencing silently: refuse instead (KIP-447 needs v3)."""
    with pytest.raises(IncompatibleBrokerVersion, match="v3"):
        txn_commit().build(version)


def test_prepare_picks_v4_from_a_newer_broker_and_refuses_an_old_one() -> None:
    request = txn_commit()
    request.prepare({28: (0, 6)})
    assert request.api_version == 4
    with pytest.raises(IncompatibleBrokerVersion):
        txn_commit().prepare({28: (0, 2)})


@pytest.mark.parametrize("version", range(5))
def test_txn_offset_commit_answers_parse_per_partition(version: int) -> None:
    answer = TXN_OFFSET_COMMIT.response(
        version,
        {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": "a",
                    "partitions": [
                        {"partition_index": 0, "error_code": 0},
                        {"partition_index": 2, "error_code": 22},
                    ],
                }
            ],
        },
    )
    check(TXN_OFFSET_COMMIT, version, answer, request=False)
    assert parse_txn_offset_commit(answer) == {
        TopicPartition("a", 0): 0,
        TopicPartition("a", 2): 22,
    }


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("", 1, 0, "g", 1, "m", None, OFFSETS), ValueError),
        (("tx", -1, 0, "g", 1, "m", None, OFFSETS), ValueError),
        (("tx", 1, 0, "", 1, "m", None, OFFSETS), ValueError),
        (("tx", 1, 0, "g", 1, "m", None, {}), ValueError),
        (("tx", 1, 0, "g", 1, "m", "", OFFSETS), ValueError),
        (("tx", 1, 0, "g", 1, "m", None, [1]), TypeError),
    ],
)
def test_txn_offset_commit_rejects_malformed_input(args: tuple[Any, ...], error: type) -> None:
    with pytest.raises(error):
        TxnOffsetCommitRequest(*args)
