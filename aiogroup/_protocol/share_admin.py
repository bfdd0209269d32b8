"""Share-group (KIP-932) administration on the wire: describe, offsets, group configs.

Why a module of its own: a share group is administered through APIs of its own -
ShareGroupDescribe (77), DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91),
DeleteShareGroupOffsets (92) - none of which a consumer group uses, and its
per-group settings (``share.auto.offset.reset``, ``share.record.lock.duration.ms``,
``share.delivery.count.limit``, ...) are set through IncrementalAlterConfigs (44) on
the GROUP resource.  The share consumer itself (ShareGroupHeartbeat, ShareFetch,
ShareAcknowledge) lives in :mod:`aiogroup._protocol.share`; nothing here is on its path.

Layouts: Apache Kafka 4.4's generated ``org.apache.kafka.common.message.*Data``
classes (read with javap: field order and the version each field starts in) and the
message specs of KIP-932.  Versions are those 4.4 serves: ShareGroupDescribe v1 only
(v0 was the early-access layout and is gone), DescribeShareGroupOffsets v0-v1 (v1
adds each partition's lag, KIP-1226), Alter/DeleteShareGroupOffsets v0,
IncrementalAlterConfigs v0-v1.  Every one is flexible (KIP-482) from v0 but
IncrementalAlterConfigs (from v1).

A broker without share groups (the embedded Tansu, or a Kafka before 4.0) lists
none of these keys in ApiVersions; :meth:`GroupApiRequest.select_version` then
fails before sending, naming the API.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiogroup._protocol.group import GroupApiRequest, _fields, _require_int, _require_str
from aiogroup._protocol.schema import ApiStructs, Field, Kind, define_api

__all__ = [
    "ALTER_SHARE_GROUP_OFFSETS",
    "DELETE_SHARE_GROUP_OFFSETS",
    "DESCRIBE_SHARE_GROUP_OFFSETS",
    "INCREMENTAL_ALTER_CONFIGS",
    "SHARE_GROUP_DESCRIBE",
    "AlterGroupConfigsRequest",
    "AlterShareGroupOffsetsRequest",
    "DeleteShareGroupOffsetsRequest",
    "DescribeShareGroupOffsetsRequest",
    "DescribedShareGroup",
    "DescribedShareMember",
    "ShareGroupDescribeRequest",
    "ShareOffsetsResult",
    "ShareStartOffset",
    "parse_alter_group_configs",
    "parse_alter_share_group_offsets",
    "parse_delete_share_group_offsets",
    "parse_describe_share_group_offsets",
    "parse_share_group_describe",
]

_I8, _I16, _I32, _I64 = Kind.INT8, Kind.INT16, Kind.INT32, Kind.INT64
_STR, _BOOL, _UUID = Kind.STRING, Kind.BOOL, Kind.UUID

_SHARE_TOPIC_PARTITIONS = (
    Field(
        "topic_partitions",
        fields=(
            Field("topic_id", _UUID),
            Field("topic_name", _STR),
            Field("partitions", _I32, array=True),
        ),
    ),
)

#: The coordinator's view of a share group: state, epochs, members and what each is
#: assigned (a share group's assignment is not exclusive: a partition may be
#: assigned to several members).
SHARE_GROUP_DESCRIBE: ApiStructs = define_api(
    "ShareGroupDescribe",
    api_key=77,
    versions=range(1, 2),
    flexible_from=0,
    request_fields=(
        Field("group_ids", _STR, array=True),
        Field("include_authorized_operations", _BOOL),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32),
        Field(
            "groups",
            fields=(
                Field("error_code", _I16),
                Field("error_message", _STR),
                Field("group_id", _STR),
                Field("group_state", _STR),
                Field("group_epoch", _I32),
                Field("assignment_epoch", _I32),
                Field("assignor_name", _STR),
                Field(
                    "members",
                    fields=(
                        Field("member_id", _STR),
                        Field("rack_id", _STR),
                        Field("member_epoch", _I32),
                        Field("client_id", _STR),
                        Field("client_host", _STR),
                        Field("subscribed_topic_names", _STR, array=True),
                        Field(
                            "assignment",
                            single=True,
                            nullable=False,
                            fields=_SHARE_TOPIC_PARTITIONS,
                        ),
                    ),
                ),
                Field("authorized_operations", _I32),
            ),
        ),
    ),
)

#: Each share-partition's start offset (SPSO): every record below it is settled
#: (acknowledged or archived); from v1 also the lag (records at or past it not yet
#: settled).  ``topics`` null: every partition the group has state for.
DESCRIBE_SHARE_GROUP_OFFSETS: ApiStructs = define_api(
    "DescribeShareGroupOffsets",
    api_key=90,
    versions=range(2),
    flexible_from=0,
    request_fields=(
        Field(
            "groups",
            fields=(
                Field("group_id", _STR),
                Field(
                    "topics",
                    fields=(Field("topic_name", _STR), Field("partitions", _I32, array=True)),
                ),
            ),
        ),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32),
        Field(
            "groups",
            fields=(
                Field("group_id", _STR),
                Field(
                    "topics",
                    fields=(
                        Field("topic_name", _STR),
                        Field("topic_id", _UUID),
                        Field(
                            "partitions",
                            fields=(
                                Field("partition_index", _I32),
                                Field("start_offset", _I64),
                                Field("leader_epoch", _I32),
                                Field("lag", _I64, "1+"),
                                Field("error_code", _I16),
                                Field("error_message", _STR),
                            ),
                        ),
                    ),
                ),
                Field("error_code", _I16),
                Field("error_message", _STR),
            ),
        ),
    ),
)

#: Move share-partition start offsets (only while the group has no members).
ALTER_SHARE_GROUP_OFFSETS: ApiStructs = define_api(
    "AlterShareGroupOffsets",
    api_key=91,
    versions=range(1),
    flexible_from=0,
    request_fields=(
        Field("group_id", _STR),
        Field(
            "topics",
            fields=(
                Field("topic_name", _STR),
                Field(
                    "partitions",
                    fields=(Field("partition_index", _I32), Field("start_offset", _I64)),
                ),
            ),
        ),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32),
        Field("error_code", _I16),
        Field("error_message", _STR),
        Field(
            "responses",
            fields=(
                Field("topic_name", _STR),
                Field("topic_id", _UUID),
                Field(
                    "partitions",
                    fields=(
                        Field("partition_index", _I32),
                        Field("error_code", _I16),
                        Field("error_message", _STR),
                    ),
                ),
            ),
        ),
    ),
)

#: Forget a share group's state for whole topics (only while it has no members).
DELETE_SHARE_GROUP_OFFSETS: ApiStructs = define_api(
    "DeleteShareGroupOffsets",
    api_key=92,
    versions=range(1),
    flexible_from=0,
    request_fields=(
        Field("group_id", _STR),
        Field("topics", fields=(Field("topic_name", _STR),)),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32),
        Field("error_code", _I16),
        Field("error_message", _STR),
        Field(
            "responses",
            fields=(
                Field("topic_name", _STR),
                Field("topic_id", _UUID),
                Field("error_code", _I16),
                Field("error_message", _STR),
            ),
        ),
    ),
)

#: Set or delete dynamic configs of one resource; here the GROUP resource (type 32),
#: whose ``share.*`` keys are the share group's own settings.
INCREMENTAL_ALTER_CONFIGS: ApiStructs = define_api(
    "IncrementalAlterConfigs",
    api_key=44,
    versions=range(2),
    flexible_from=1,
    request_fields=(
        Field(
            "resources",
            fields=(
                Field("resource_type", _I8),
                Field("resource_name", _STR),
                Field(
                    "configs",
                    fields=(
                        Field("name", _STR),
                        Field("config_operation", _I8),
                        Field("value", _STR),
                    ),
                ),
            ),
        ),
        Field("validate_only", _BOOL),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32),
        Field(
            "responses",
            fields=(
                Field("error_code", _I16),
                Field("error_message", _STR),
                Field("resource_type", _I8),
                Field("resource_name", _STR),
            ),
        ),
    ),
)

#: ConfigResource.Type GROUP; AlterConfigOp SET / DELETE.
_GROUP_RESOURCE = 32
_SET, _DELETE = 0, 1


def _topics(value: Mapping[str, Sequence[int]] | None, what: str) -> dict[str, tuple[int, ...]]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must map topic names to partition numbers")
    return {
        _require_str("topic", t, empty_ok=False): tuple(
            sorted(_require_int("partition", p, minimum=0) for p in ps)
        )
        for t, ps in value.items()
    }


class ShareGroupDescribeRequest(GroupApiRequest):
    """ShareGroupDescribe for one group."""

    API = SHARE_GROUP_DESCRIBE

    def __init__(self, group_id: str) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)

    def _values(self) -> dict[str, Any]:
        return {"group_ids": [self.group_id], "include_authorized_operations": False}


class DescribeShareGroupOffsetsRequest(GroupApiRequest):
    """The start offsets of one share group: of ``topics`` (name -> partitions), or
    of every partition it has state for (``topics=None``)."""

    API = DESCRIBE_SHARE_GROUP_OFFSETS

    def __init__(self, group_id: str, topics: Mapping[str, Sequence[int]] | None = None) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)
        self.topics = None if topics is None else _topics(topics, "topics")

    def _values(self) -> dict[str, Any]:
        topics = (
            None
            if self.topics is None
            else [{"topic_name": t, "partitions": list(ps)} for t, ps in self.topics.items()]
        )
        return {"groups": [{"group_id": self.group_id, "topics": topics}]}


class AlterShareGroupOffsetsRequest(GroupApiRequest):
    """Set the start offsets of an empty share group: {topic: {partition: offset}}."""

    API = ALTER_SHARE_GROUP_OFFSETS

    def __init__(self, group_id: str, offsets: Mapping[str, Mapping[int, int]]) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)
        if not isinstance(offsets, Mapping) or not offsets:
            raise ValueError("offsets must name at least one topic: {topic: {partition: offset}}")
        self.offsets = {
            _require_str("topic", t, empty_ok=False): {
                _require_int("partition", p, minimum=0): _require_int("offset", o, minimum=0)
                for p, o in sorted(parts.items())
            }
            for t, parts in offsets.items()
        }

    def _values(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "topics": [
                {
                    "topic_name": t,
                    "partitions": [
                        {"partition_index": p, "start_offset": o} for p, o in parts.items()
                    ],
                }
                for t, parts in self.offsets.items()
            ],
        }


class DeleteShareGroupOffsetsRequest(GroupApiRequest):
    """Delete an empty share group's state for whole ``topics``."""

    API = DELETE_SHARE_GROUP_OFFSETS

    def __init__(self, group_id: str, topics: Sequence[str]) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)
        if isinstance(topics, str) or not topics:
            raise ValueError("topics must be a non-empty sequence of topic names")
        self.topics = tuple(_require_str("topic", t, empty_ok=False) for t in topics)

    def _values(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "topics": [{"topic_name": t} for t in self.topics]}


class AlterGroupConfigsRequest(GroupApiRequest):
    """Set (or, with value None, delete) dynamic configs of one group."""

    API = INCREMENTAL_ALTER_CONFIGS

    def __init__(self, group_id: str, configs: Mapping[str, str | None]) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)
        if not isinstance(configs, Mapping) or not configs:
            raise ValueError("configs must map at least one config name to a value (or None)")
        self.configs = {
            _require_str("config name", k, empty_ok=False): (
                None if v is None else _require_str(f"value of {k}", v)
            )
            for k, v in configs.items()
        }

    def _values(self) -> dict[str, Any]:
        return {
            "resources": [
                {
                    "resource_type": _GROUP_RESOURCE,
                    "resource_name": self.group_id,
                    "configs": [
                        {"name": k, "config_operation": _DELETE if v is None else _SET, "value": v}
                        for k, v in self.configs.items()
                    ],
                }
            ],
            "validate_only": False,
        }


# -- answers ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DescribedShareMember:
    member_id: str
    member_epoch: int
    client_id: str
    client_host: str
    rack_id: str | None
    subscribed_topics: tuple[str, ...]
    #: (topic, partition) pairs assigned to it - shared with other members.
    assignment: frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class DescribedShareGroup:
    group_id: str
    error_code: int
    error_message: str | None
    group_state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[DescribedShareMember, ...]


def parse_share_group_describe(resp: Any) -> DescribedShareGroup:
    obj = _fields(resp)
    groups = obj["groups"] or ()
    if not groups:
        raise ValueError("ShareGroupDescribe response names no group")
    g = groups[0]
    members = tuple(
        DescribedShareMember(
            m["member_id"],
            m["member_epoch"],
            m["client_id"] or "",
            m["client_host"] or "",
            m["rack_id"],
            tuple(m["subscribed_topic_names"] or ()),
            frozenset(
                (row["topic_name"], p)
                for row in (m["assignment"] or {}).get("topic_partitions") or ()
                for p in row["partitions"] or ()
            ),
        )
        for m in g["members"] or ()
    )
    return DescribedShareGroup(
        g["group_id"],
        g["error_code"],
        g["error_message"],
        g["group_state"] or "",
        g["group_epoch"],
        g["assignment_epoch"],
        g["assignor_name"] or "",
        members,
    )


@dataclass(frozen=True, slots=True)
class ShareStartOffset:
    """One share-partition's start offset; ``lag`` is None before v1 or when unknown."""

    topic: str
    topic_id: uuid.UUID
    partition: int
    start_offset: int
    leader_epoch: int
    lag: int | None
    error_code: int
    error_message: str | None


@dataclass(frozen=True, slots=True)
class ShareOffsetsResult:
    """A share-offsets answer: the group's error and one row per partition (describe,
    alter) or per topic (delete, ``partition`` -1)."""

    error_code: int
    error_message: str | None
    rows: tuple[ShareStartOffset, ...]


def parse_describe_share_group_offsets(resp: Any) -> ShareOffsetsResult:
    obj = _fields(resp)
    groups = obj["groups"] or ()
    if not groups:
        raise ValueError("DescribeShareGroupOffsets response names no group")
    g = groups[0]
    rows = tuple(
        ShareStartOffset(
            t["topic_name"],
            t["topic_id"],
            p["partition_index"],
            p["start_offset"],
            p["leader_epoch"],
            p["lag"] if p.get("lag", -1) >= 0 else None,
            p["error_code"],
            p["error_message"],
        )
        for t in g["topics"] or ()
        for p in t["partitions"] or ()
    )
    return ShareOffsetsResult(g["error_code"], g["error_message"], rows)


def parse_alter_share_group_offsets(resp: Any) -> ShareOffsetsResult:
    obj = _fields(resp)
    rows = tuple(
        ShareStartOffset(
            t["topic_name"],
            t["topic_id"],
            p["partition_index"],
            -1,
            -1,
            None,
            p["error_code"],
            p["error_message"],
        )
        for t in obj["responses"] or ()
        for p in t["partitions"] or ()
    )
    return ShareOffsetsResult(obj["error_code"], obj["error_message"], rows)


def parse_delete_share_group_offsets(resp: Any) -> ShareOffsetsResult:
    obj = _fields(resp)
    rows = tuple(
        ShareStartOffset(
            t["topic_name"], t["topic_id"], -1, -1, -1, None, t["error_code"], t["error_message"]
        )
        for t in obj["responses"] or ()
    )
    return ShareOffsetsResult(obj["error_code"], obj["error_message"], rows)


def parse_alter_group_configs(resp: Any) -> tuple[int, str | None]:
    """The one resource's (error code, error message)."""
    obj = _fields(resp)
    rows = obj["responses"] or ()
    if not rows:
        raise ValueError("IncrementalAlterConfigs response names no resource")
    return rows[0]["error_code"], rows[0]["error_message"]
