"""Share-group (KIP-932) consumer APIs on the wire: ShareGroupHeartbeat, ShareFetch,
ShareAcknowledge.

Why a module of its own: a share consumer speaks three APIs no other member uses -
membership through ShareGroupHeartbeat (76), records through ShareFetch (78), which
also carries acknowledgements, and ShareAcknowledge (79) for acknowledgements alone.
The administration APIs are in :mod:`aiogroup._protocol.share_admin`.

Layouts: Apache Kafka 4.4's generated ``org.apache.kafka.common.message.*Data``
classes (their ``SCHEMAS``, printed field by field, and bytes they write, kept as
golden hex in the unit tests).  Versions are those 4.4 serves: ShareGroupHeartbeat v1
only, ShareFetch and ShareAcknowledge v1-v2 (v0 was the early-access layout, gone in
4.1).  ShareFetch v1 already carries ``max_records`` and ``batch_size`` and answers the
acquisition lock duration (``acquisition_lock_timeout_ms``); v2 adds
``share_acquire_mode`` (KIP-1206: 1 makes ``max_records`` a strict limit) and
``is_renew_ack`` (KIP-1222: the request holds RENEW acknowledgements and the broker
must not acquire more records); ShareAcknowledge v2 adds ``is_renew_ack`` and answers
the lock duration too.  Every version is flexible (KIP-482).

Partitions are named by topic id (KIP-516) on these APIs; names are the caller's.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiogroup._protocol.group import (
    GroupApiRequest,
    _fields,
    _optional_str,
    _require_int,
    _require_str,
)
from aiogroup._protocol.schema import ApiStructs, Field, Kind, define_api
from aiogroup._protocol.share_types import AckBatch, AcknowledgeType, AcquireMode

__all__ = [
    "SHARE_ACKNOWLEDGE",
    "SHARE_FETCH",
    "SHARE_GROUP_HEARTBEAT",
    "AckBatch",
    "AcknowledgeType",
    "AcquireMode",
    "AcquiredRange",
    "ShareAcknowledgePartition",
    "ShareAcknowledgeRequest",
    "ShareAcknowledgeResult",
    "ShareFetchPartition",
    "ShareFetchRequest",
    "ShareFetchResult",
    "ShareGroupHeartbeatRequest",
    "ShareGroupHeartbeatResult",
    "parse_share_acknowledge",
    "parse_share_fetch",
    "parse_share_group_heartbeat",
]

_I8, _I16, _I32, _I64 = Kind.INT8, Kind.INT16, Kind.INT32, Kind.INT64
_STR, _BOOL, _UUID, _BYTES = Kind.STRING, Kind.BOOL, Kind.UUID, Kind.BYTES

#: member_epoch values with a meaning of their own (ShareGroupHeartbeatRequest.json).
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
#: share_session_epoch: 0 opens a session, -1 closes it, otherwise it counts requests.
OPEN_SESSION_EPOCH = 0
CLOSE_SESSION_EPOCH = -1


_ACK_BATCH = (
    Field("first_offset", _I64),
    Field("last_offset", _I64),
    Field("acknowledge_types", _I8, array=True),
)
_LEADER = Field(
    "current_leader",
    single=True,
    nullable=False,
    fields=(Field("leader_id", _I32), Field("leader_epoch", _I32)),
)
_NODE_ENDPOINTS = Field(
    "node_endpoints",
    fields=(
        Field("node_id", _I32),
        Field("host", _STR),
        Field("port", _I32),
        Field("rack", _STR),
    ),
)

SHARE_GROUP_HEARTBEAT: ApiStructs = define_api(
    "ShareGroupHeartbeat",
    api_key=76,
    versions=range(1, 2),
    flexible_from=0,
    request_fields=(
        Field("group_id", _STR),
        # The client's own UUID (KIP-1082): the member id from the first heartbeat on.
        Field("member_id", _STR),
        # 0 joins, -1 leaves.
        Field("member_epoch", _I32),
        Field("rack_id", _STR),
        # Null: unchanged since the last heartbeat.
        Field("subscribed_topic_names", _STR, array=True),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32),
        Field("error_code", _I16),
        Field("error_message", _STR),
        Field("member_id", _STR),
        Field("member_epoch", _I32),
        Field("heartbeat_interval_ms", _I32),
        Field(
            "assignment",
            single=True,
            fields=(
                Field(
                    "topic_partitions",
                    fields=(Field("topic_id", _UUID), Field("partitions", _I32, array=True)),
                ),
            ),
        ),
    ),
)

SHARE_FETCH: ApiStructs = define_api(
    "ShareFetch",
    api_key=78,
    versions=range(1, 3),
    flexible_from=0,
    request_fields=(
        Field("group_id", _STR),
        Field("member_id", _STR),
        Field("share_session_epoch", _I32),
        Field("max_wait_ms", _I32),
        Field("min_bytes", _I32),
        Field("max_bytes", _I32),
        Field("max_records", _I32),
        Field("batch_size", _I32),
        Field("share_acquire_mode", _I8, "2+"),
        Field("is_renew_ack", _BOOL, "2+"),
        Field(
            "topics",
            fields=(
                Field("topic_id", _UUID),
                Field(
                    "partitions",
                    fields=(
                        Field("partition_index", _I32),
                        Field("acknowledgement_batches", fields=_ACK_BATCH),
                    ),
                ),
            ),
        ),
        Field(
            "forgotten_topics_data",
            fields=(Field("topic_id", _UUID), Field("partitions", _I32, array=True)),
        ),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32),
        Field("error_code", _I16),
        Field("error_message", _STR),
        Field("acquisition_lock_timeout_ms", _I32),
        Field(
            "responses",
            fields=(
                Field("topic_id", _UUID),
                Field(
                    "partitions",
                    fields=(
                        Field("partition_index", _I32),
                        Field("error_code", _I16),
                        Field("error_message", _STR),
                        Field("acknowledge_error_code", _I16),
                        Field("acknowledge_error_message", _STR),
                        _LEADER,
                        Field("records", _BYTES),
                        Field(
                            "acquired_records",
                            fields=(
                                Field("first_offset", _I64),
                                Field("last_offset", _I64),
                                Field("delivery_count", _I16),
                            ),
                        ),
                    ),
                ),
            ),
        ),
        _NODE_ENDPOINTS,
    ),
)

SHARE_ACKNOWLEDGE: ApiStructs = define_api(
    "ShareAcknowledge",
    api_key=79,
    versions=range(1, 3),
    flexible_from=0,
    request_fields=(
        Field("group_id", _STR),
        Field("member_id", _STR),
        Field("share_session_epoch", _I32),
        Field("is_renew_ack", _BOOL, "2+"),
        Field(
            "topics",
            fields=(
                Field("topic_id", _UUID),
                Field(
                    "partitions",
                    fields=(
                        Field("partition_index", _I32),
                        Field("acknowledgement_batches", fields=_ACK_BATCH),
                    ),
                ),
            ),
        ),
    ),
    response_fields=(
        Field("throttle_time_ms", _I32),
        Field("error_code", _I16),
        Field("error_message", _STR),
        Field("acquisition_lock_timeout_ms", _I32, "2+"),
        Field(
            "responses",
            fields=(
                Field("topic_id", _UUID),
                Field(
                    "partitions",
                    fields=(
                        Field("partition_index", _I32),
                        Field("error_code", _I16),
                        Field("error_message", _STR),
                        _LEADER,
                    ),
                ),
            ),
        ),
        _NODE_ENDPOINTS,
    ),
)

#: The first ShareFetch / ShareAcknowledge version with strict acquisition and RENEW.
_V2 = 2


#: Per topic id, per partition: the acknowledgement batches (possibly none).
ShareTopics = Mapping[uuid.UUID, Mapping[int, Sequence[AckBatch]]]


def _share_topics(name: str, value: object) -> dict[uuid.UUID, dict[int, tuple[AckBatch, ...]]]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must map topic id (uuid.UUID) to {{partition: batches}}")
    out: dict[uuid.UUID, dict[int, tuple[AckBatch, ...]]] = {}
    for tid, parts in value.items():
        if not isinstance(tid, uuid.UUID):
            raise TypeError(f"{name} keys must be uuid.UUID, got {tid!r}")
        if not isinstance(parts, Mapping):
            raise TypeError(f"{name}[{tid}] must map partition to acknowledgement batches")
        row: dict[int, tuple[AckBatch, ...]] = {}
        for p, batches in parts.items():
            _require_int("partition", p, minimum=0)
            if not all(isinstance(b, AckBatch) for b in batches):
                raise TypeError(f"{name}[{tid}][{p}] must hold AckBatch values")
            row[p] = tuple(batches)
        out[tid] = row
    return out


def _topics_values(topics: Mapping[uuid.UUID, Mapping[int, tuple[AckBatch, ...]]]) -> list[Any]:
    return [
        {
            "topic_id": tid,
            "partitions": [
                {
                    "partition_index": p,
                    "acknowledgement_batches": [
                        {
                            "first_offset": b.first_offset,
                            "last_offset": b.last_offset,
                            "acknowledge_types": list(b.types),
                        }
                        for b in batches
                    ],
                }
                for p, batches in parts.items()
            ],
        }
        for tid, parts in topics.items()
    ]


def _has_renew(topics: Mapping[uuid.UUID, Mapping[int, tuple[AckBatch, ...]]]) -> bool:
    return any(
        AcknowledgeType.RENEW in b.types
        for parts in topics.values()
        for batches in parts.values()
        for b in batches
    )


class ShareGroupHeartbeatRequest(GroupApiRequest):
    """One ShareGroupHeartbeat.  ``subscribed_topic_names=None`` means "unchanged"."""

    API = SHARE_GROUP_HEARTBEAT

    def __init__(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        *,
        rack_id: str | None = None,
        subscribed_topic_names: Sequence[str] | None = None,
    ) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)
        self.member_id = _require_str("member_id", member_id, empty_ok=False)
        self.member_epoch = _require_int("member_epoch", member_epoch, minimum=LEAVE_EPOCH)
        self.rack_id = _optional_str("rack_id", rack_id)
        if subscribed_topic_names is None:
            self.subscribed_topic_names: tuple[str, ...] | None = None
        elif isinstance(subscribed_topic_names, str | bytes):
            raise TypeError("subscribed_topic_names must be a sequence of str, not a str")
        else:
            self.subscribed_topic_names = tuple(
                sorted(_require_str("topic", t, empty_ok=False) for t in subscribed_topic_names)
            )

    def _values(self) -> dict[str, Any]:
        names = self.subscribed_topic_names
        return {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "member_epoch": self.member_epoch,
            "rack_id": self.rack_id,
            "subscribed_topic_names": None if names is None else list(names),
        }


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeatResult:
    error_code: int
    error_message: str | None
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    #: The assignment (topic id -> partitions), or None when unchanged.
    assignment: dict[uuid.UUID, tuple[int, ...]] | None
    throttle_time_ms: int = 0


def parse_share_group_heartbeat(resp: Any) -> ShareGroupHeartbeatResult:
    obj = _fields(resp)
    raw = obj["assignment"]
    assignment: dict[uuid.UUID, tuple[int, ...]] | None = None
    if raw is not None:
        assignment = {
            row["topic_id"]: tuple(sorted(row["partitions"] or ()))
            for row in raw["topic_partitions"] or ()
        }
    return ShareGroupHeartbeatResult(
        error_code=obj["error_code"],
        error_message=obj["error_message"],
        member_id=obj["member_id"],
        member_epoch=obj["member_epoch"],
        heartbeat_interval_ms=obj["heartbeat_interval_ms"],
        assignment=assignment,
        throttle_time_ms=obj["throttle_time_ms"],
    )


class ShareFetchRequest(GroupApiRequest):
    """One ShareFetch to one leader: the session's partitions to fetch from, with the
    acknowledgements that ride on it, and the partitions to drop from the session.

    ``max_records`` 0 with ``max_wait_ms`` 0 is an acknowledgement-only fetch.
    Strict record-limit acquisition and RENEW acknowledgements need v2; a broker
    without it is refused before sending.
    """

    API = SHARE_FETCH

    def __init__(
        self,
        group_id: str,
        member_id: str,
        session_epoch: int,
        topics: ShareTopics,
        *,
        forgotten: Mapping[uuid.UUID, Sequence[int]] | None = None,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 52_428_800,
        max_records: int = 500,
        batch_size: int = 500,
        acquire_mode: AcquireMode = AcquireMode.BATCH_OPTIMIZED,
        is_renew_ack: bool = False,
    ) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)
        self.member_id = _require_str("member_id", member_id, empty_ok=False)
        self.session_epoch = _require_int("session_epoch", session_epoch, minimum=-1)
        self.topics = _share_topics("topics", topics)
        self.forgotten = {
            tid: tuple(_require_int("partition", p, minimum=0) for p in ps)
            for tid, ps in (forgotten or {}).items()
        }
        self.max_wait_ms = _require_int("max_wait_ms", max_wait_ms, minimum=0)
        self.min_bytes = _require_int("min_bytes", min_bytes, minimum=0)
        self.max_bytes = _require_int("max_bytes", max_bytes, minimum=0)
        self.max_records = _require_int("max_records", max_records, minimum=0)
        self.batch_size = _require_int("batch_size", batch_size, minimum=0)
        self.acquire_mode = AcquireMode(acquire_mode)
        self.is_renew_ack = bool(is_renew_ack)

    def _check(self, version: int) -> None:
        if self.acquire_mode is AcquireMode.RECORD_LIMIT:
            self._needs(version, _V2, "strict record-limit acquisition (KIP-1206)")
        if self.is_renew_ack or _has_renew(self.topics):
            self._needs(version, _V2, "a RENEW acknowledgement (KIP-1222)")

    def _values(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "share_session_epoch": self.session_epoch,
            "max_wait_ms": self.max_wait_ms,
            "min_bytes": self.min_bytes,
            "max_bytes": self.max_bytes,
            "max_records": self.max_records,
            "batch_size": self.batch_size,
            "share_acquire_mode": int(self.acquire_mode),
            "is_renew_ack": self.is_renew_ack,
            "topics": _topics_values(self.topics),
            "forgotten_topics_data": [
                {"topic_id": tid, "partitions": list(ps)} for tid, ps in self.forgotten.items()
            ],
        }


class ShareAcknowledgeRequest(GroupApiRequest):
    """Acknowledgements alone, in an open share session (never epoch 0)."""

    API = SHARE_ACKNOWLEDGE

    def __init__(
        self,
        group_id: str,
        member_id: str,
        session_epoch: int,
        topics: ShareTopics,
        *,
        is_renew_ack: bool = False,
    ) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)
        self.member_id = _require_str("member_id", member_id, empty_ok=False)
        self.session_epoch = _require_int("session_epoch", session_epoch, minimum=-1)
        if self.session_epoch == OPEN_SESSION_EPOCH:
            raise ValueError("ShareAcknowledge cannot open a share session (epoch 0)")
        self.topics = _share_topics("topics", topics)
        self.is_renew_ack = bool(is_renew_ack)

    def _check(self, version: int) -> None:
        if self.is_renew_ack or _has_renew(self.topics):
            self._needs(version, _V2, "a RENEW acknowledgement (KIP-1222)")

    def _values(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "share_session_epoch": self.session_epoch,
            "is_renew_ack": self.is_renew_ack,
            "topics": _topics_values(self.topics),
        }


# -- answers ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AcquiredRange:
    """Offsets ``first..last`` (inclusive) acquired by this fetch, each delivered
    ``delivery_count`` times (this delivery included)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareFetchPartition:
    topic_id: uuid.UUID
    partition: int
    error_code: int
    error_message: str | None
    #: The answer to the acknowledgements this request carried for the partition.
    acknowledge_error_code: int
    acknowledge_error_message: str | None
    leader_id: int
    leader_epoch: int
    records: bytes | None
    acquired: tuple[AcquiredRange, ...]


@dataclass(frozen=True, slots=True)
class ShareFetchResult:
    error_code: int
    error_message: str | None
    #: How long an acquired record stays locked to us; -1 when the broker does not say.
    acquisition_lock_timeout_ms: int
    partitions: tuple[ShareFetchPartition, ...]
    #: node id -> (host, port) of leaders named by NOT_LEADER_OR_FOLLOWER partitions.
    node_endpoints: dict[int, tuple[str, int]]
    throttle_time_ms: int = 0


def _endpoints(obj: Mapping[str, Any]) -> dict[int, tuple[str, int]]:
    return {n["node_id"]: (n["host"], n["port"]) for n in obj["node_endpoints"] or ()}


def parse_share_fetch(resp: Any) -> ShareFetchResult:
    obj = _fields(resp)
    partitions = tuple(
        ShareFetchPartition(
            topic_id=t["topic_id"],
            partition=p["partition_index"],
            error_code=p["error_code"],
            error_message=p["error_message"],
            acknowledge_error_code=p["acknowledge_error_code"],
            acknowledge_error_message=p["acknowledge_error_message"],
            leader_id=p["current_leader"]["leader_id"],
            leader_epoch=p["current_leader"]["leader_epoch"],
            records=p["records"],
            acquired=tuple(
                AcquiredRange(a["first_offset"], a["last_offset"], a["delivery_count"])
                for a in p["acquired_records"] or ()
            ),
        )
        for t in obj["responses"] or ()
        for p in t["partitions"] or ()
    )
    return ShareFetchResult(
        error_code=obj["error_code"],
        error_message=obj["error_message"],
        acquisition_lock_timeout_ms=obj["acquisition_lock_timeout_ms"],
        partitions=partitions,
        node_endpoints=_endpoints(obj),
        throttle_time_ms=obj["throttle_time_ms"],
    )


@dataclass(frozen=True, slots=True)
class ShareAcknowledgePartition:
    topic_id: uuid.UUID
    partition: int
    error_code: int
    error_message: str | None
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class ShareAcknowledgeResult:
    error_code: int
    error_message: str | None
    #: v2+: the lock duration (a RENEW's new lock); -1 before v2.
    acquisition_lock_timeout_ms: int
    partitions: tuple[ShareAcknowledgePartition, ...]
    node_endpoints: dict[int, tuple[str, int]]
    throttle_time_ms: int = 0


def parse_share_acknowledge(resp: Any) -> ShareAcknowledgeResult:
    obj = _fields(resp)
    partitions = tuple(
        ShareAcknowledgePartition(
            topic_id=t["topic_id"],
            partition=p["partition_index"],
            error_code=p["error_code"],
            error_message=p["error_message"],
            leader_id=p["current_leader"]["leader_id"],
            leader_epoch=p["current_leader"]["leader_epoch"],
        )
        for t in obj["responses"] or ()
        for p in t["partitions"] or ()
    )
    return ShareAcknowledgeResult(
        error_code=obj["error_code"],
        error_message=obj["error_message"],
        acquisition_lock_timeout_ms=obj.get("acquisition_lock_timeout_ms", -1),
        partitions=partitions,
        node_endpoints=_endpoints(obj),
        throttle_time_ms=obj["throttle_time_ms"],
    )
