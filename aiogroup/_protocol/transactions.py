"""The two transaction APIs a fenced offset commit needs, in the versions aiokafka lacks.

aiokafka defines AddOffsetsToTxn and TxnOffsetCommit at v0 only; TxnOffsetCommit v0
names the group and nothing else, so the group coordinator cannot tell a zombie's
commit from the current member's.  KIP-447 added the member's generation, member id
and instance id in v3 (Kafka 2.5).  Layouts per Apache Kafka's message specs
(``AddOffsetsToTxnRequest.json``, ``TxnOffsetCommitRequest.json`` and their
responses); fields in snake_case.

We stop at TxnOffsetCommit v4 and AddOffsetsToTxn v4: TxnOffsetCommit v5 belongs to
transactions version 2 (KIP-890), where the offsets' partition joins the transaction
implicitly - aiokafka's producer runs version 1 transactions, which add it
explicitly (AddOffsetsToTxn).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiogroup._protocol.group import (
    GroupApiRequest,
    _by_topic,
    _checked_offset,
    _optional_str,
    _require_int,
    _require_str,
    _require_topic_partition,
)
from aiogroup._protocol.schema import ApiStructs, Field, Kind, define_api, struct_to_dict
from aiogroup.structs import OffsetAndMetadata, TopicPartition

__all__ = [
    "ADD_OFFSETS_TO_TXN",
    "TXN_OFFSET_COMMIT",
    "AddOffsetsToTxnRequest",
    "TxnOffsetCommitRequest",
    "parse_add_offsets_to_txn",
    "parse_txn_offset_commit",
]

_I16, _I32, _I64, _STR = Kind.INT16, Kind.INT32, Kind.INT64, Kind.STRING

#: The first TxnOffsetCommit version that carries the member's identity (KIP-447).
FENCED_COMMIT_VERSION = 3

ADD_OFFSETS_TO_TXN: ApiStructs = define_api(
    "AddOffsetsToTxn",
    api_key=25,
    versions=range(5),
    flexible_from=3,
    request_fields=(
        Field("transactional_id", _STR),
        Field("producer_id", _I64),
        Field("producer_epoch", _I16),
        Field("group_id", _STR),
    ),
    response_fields=(Field("throttle_time_ms", _I32), Field("error_code", _I16)),
)

TXN_OFFSET_COMMIT: ApiStructs = define_api(
    "TxnOffsetCommit",
    api_key=28,
    versions=range(5),
    flexible_from=3,
    request_fields=(
        Field("transactional_id", _STR),
        Field("group_id", _STR),
        Field("producer_id", _I64),
        Field("producer_epoch", _I16),
        Field("generation_id", _I32, "3+"),
        Field("member_id", _STR, "3+"),
        Field("group_instance_id", _STR, "3+"),
        Field(
            "topics",
            fields=(
                Field("name", _STR),
                Field(
                    "partitions",
                    fields=(
                        Field("partition_index", _I32),
                        Field("committed_offset", _I64),
                        Field("committed_leader_epoch", _I32, "2+"),
                        Field("committed_metadata", _STR),
                    ),
                ),
            ),
        ),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32),
        Field(
            "topics",
            fields=(
                Field("name", _STR),
                Field(
                    "partitions",
                    fields=(Field("partition_index", _I32), Field("error_code", _I16)),
                ),
            ),
        ),
    ),
)

_NO_EPOCH = -1


class AddOffsetsToTxnRequest(GroupApiRequest):
    """Put the group's offsets partition into the producer's open transaction."""

    API = ADD_OFFSETS_TO_TXN

    def __init__(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> None:
        self.transactional_id = _require_str("transactional_id", transactional_id, empty_ok=False)
        self.producer_id = _require_int("producer_id", producer_id, minimum=0)
        self.producer_epoch = _require_int("producer_epoch", producer_epoch, minimum=0)
        self.group_id = _require_str("group_id", group_id, empty_ok=False)

    def _values(self) -> dict[str, Any]:
        return {
            "transactional_id": self.transactional_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "group_id": self.group_id,
        }


class TxnOffsetCommitRequest(GroupApiRequest):
    """Offsets committed inside a transaction, under the member identity that read them.

    Never sent below v3: a commit that cannot carry the identity would silently drop
    the fencing the caller asked for, so an older broker gets
    ``IncompatibleBrokerVersion`` instead.
    """

    API = TXN_OFFSET_COMMIT

    def __init__(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> None:
        self.transactional_id = _require_str("transactional_id", transactional_id, empty_ok=False)
        self.producer_id = _require_int("producer_id", producer_id, minimum=0)
        self.producer_epoch = _require_int("producer_epoch", producer_epoch, minimum=0)
        self.group_id = _require_str("group_id", group_id, empty_ok=False)
        self.generation_id = _require_int("generation_id", generation_id)
        self.member_id = _require_str("member_id", member_id)
        self.group_instance_id = _optional_str(
            "group_instance_id", group_instance_id, empty_ok=False
        )
        if not isinstance(offsets, Mapping):
            raise TypeError("offsets must be a mapping of TopicPartition to OffsetAndMetadata")
        if not offsets:
            raise ValueError("offsets must not be empty")
        self.offsets = {
            key: _checked_offset(key, oam)
            for key, oam in (
                (_require_topic_partition("offsets", tp), oam) for tp, oam in offsets.items()
            )
        }

    def _check(self, version: int) -> None:
        self._needs(
            version, FENCED_COMMIT_VERSION, "a transactional commit fenced by group metadata"
        )

    def _values(self) -> dict[str, Any]:
        topics = [
            {
                "name": topic,
                "partitions": [
                    {
                        "partition_index": partition,
                        "committed_offset": self.offsets[TopicPartition(topic, partition)].offset,
                        "committed_leader_epoch": _NO_EPOCH,
                        "committed_metadata": self.offsets[
                            TopicPartition(topic, partition)
                        ].metadata,
                    }
                    for partition in partitions
                ],
            }
            for topic, partitions in _by_topic(list(self.offsets)).items()
        ]
        return {
            "transactional_id": self.transactional_id,
            "group_id": self.group_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "generation_id": self.generation_id,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "topics": topics,
        }


def parse_add_offsets_to_txn(resp: Any) -> int:
    """The response's error code (0: the group's offsets joined the transaction)."""
    return int(struct_to_dict(resp)["error_code"])


def parse_txn_offset_commit(resp: Any) -> dict[TopicPartition, int]:
    """Each partition's error code."""
    obj = struct_to_dict(resp)
    return {
        TopicPartition(topic["name"], row["partition_index"]): int(row["error_code"])
        for topic in obj["topics"] or ()
        for row in topic["partitions"] or ()
    }
