"""KIP-848 request builders and parsers: ConsumerGroupHeartbeat and the member-epoch commits.

A consumer-protocol member talks to its coordinator through one RPC,
ConsumerGroupHeartbeat, and commits/fetches offsets with its member id and
*member epoch* in place of a generation (OffsetCommit v9+, OffsetFetch v9+).
The builders here follow :mod:`aiogroup._protocol.group`: ``prepare(versions)``
picks the highest common version, and a version that cannot carry the request's
meaning raises ``IncompatibleBrokerVersion`` naming the gap - a broker without
the consumer protocol (no API key 68 in its ApiVersions) fails the first
heartbeat with "the broker does not support the ConsumerGroupHeartbeat API".

Partitions are named by topic id (KIP-516) on this RPC; the mapping to names is
the caller's (the metadata it already has).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiogroup._protocol.group import (
    GroupApiRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    _fields,
    _optional_str,
    _require_int,
    _require_str,
)
from aiogroup._protocol.messages import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    TOPIC_METADATA,
)
from aiogroup.structs import OffsetAndMetadata, TopicPartition

__all__ = [
    "LEAVE_EPOCH",
    "LEAVE_STATIC_EPOCH",
    "ConsumerGroupDescribeRequest",
    "ConsumerGroupHeartbeatRequest",
    "ConsumerGroupHeartbeatResult",
    "ConsumerOffsetCommitRequest",
    "ConsumerOffsetFetchRequest",
    "DescribedConsumerGroup",
    "DescribedMember",
    "TopicIdPartitions",
    "TopicIdsRequest",
    "parse_consumer_group_describe",
    "parse_consumer_group_heartbeat",
    "parse_topic_ids",
]

#: member_epoch values with a meaning of their own (ConsumerGroupHeartbeatRequest.json).
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
LEAVE_STATIC_EPOCH = -2

#: Owned or assigned partitions on the wire: topic id -> sorted partition numbers.
TopicIdPartitions = Mapping[uuid.UUID, tuple[int, ...]]

#: OffsetCommit/OffsetFetch v9 are the first a consumer-protocol member may use.
_MEMBER_EPOCH_VERSION = 9


def _topic_partitions(value: object) -> dict[uuid.UUID, tuple[int, ...]]:
    if not isinstance(value, Mapping):
        raise TypeError("topic_partitions must map topic id (uuid.UUID) to partitions")
    out: dict[uuid.UUID, tuple[int, ...]] = {}
    for topic_id, partitions in value.items():
        if not isinstance(topic_id, uuid.UUID):
            raise TypeError(f"topic_partitions keys must be uuid.UUID, got {topic_id!r}")
        if isinstance(partitions, str | bytes) or not isinstance(partitions, Sequence | frozenset):
            raise TypeError(f"topic_partitions[{topic_id}] must be a collection of ints")
        out[topic_id] = tuple(sorted(_require_int("partition", p, minimum=0) for p in partitions))
    return out


class ConsumerGroupHeartbeatRequest(GroupApiRequest):
    """One ConsumerGroupHeartbeat.  ``None`` in an optional field means "unchanged".

    The member sends its full state (rebalance timeout, subscription, assignor,
    owned partitions) when it joins and whenever something changed; otherwise
    those fields are null and the coordinator keeps what it had.
    """

    API = CONSUMER_GROUP_HEARTBEAT

    def __init__(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        *,
        instance_id: str | None = None,
        rack_id: str | None = None,
        rebalance_timeout_ms: int = -1,
        subscribed_topic_names: Sequence[str] | None = None,
        subscribed_topic_regex: str | None = None,
        server_assignor: str | None = None,
        topic_partitions: TopicIdPartitions | None = None,
    ) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)
        self.member_id = _require_str("member_id", member_id)
        self.member_epoch = _require_int("member_epoch", member_epoch, minimum=LEAVE_STATIC_EPOCH)
        self.instance_id = _optional_str("instance_id", instance_id, empty_ok=False)
        self.rack_id = _optional_str("rack_id", rack_id)
        self.rebalance_timeout_ms = _require_int(
            "rebalance_timeout_ms", rebalance_timeout_ms, minimum=-1
        )
        if subscribed_topic_names is None:
            self.subscribed_topic_names: tuple[str, ...] | None = None
        elif isinstance(subscribed_topic_names, str | bytes):
            raise TypeError("subscribed_topic_names must be a sequence of str, not a str")
        else:
            self.subscribed_topic_names = tuple(
                sorted(_require_str("topic", t, empty_ok=False) for t in subscribed_topic_names)
            )
        self.subscribed_topic_regex = _optional_str(
            "subscribed_topic_regex", subscribed_topic_regex
        )
        self.server_assignor = _optional_str("server_assignor", server_assignor, empty_ok=False)
        self.topic_partitions = (
            None if topic_partitions is None else _topic_partitions(topic_partitions)
        )

    def _check(self, version: int) -> None:
        if self.subscribed_topic_regex is not None:
            self._needs(version, 1, "a broker-side regex subscription (subscribed_topic_regex)")

    def _values(self) -> dict[str, Any]:
        tps = self.topic_partitions
        return {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "member_epoch": self.member_epoch,
            "instance_id": self.instance_id,
            "rack_id": self.rack_id,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "subscribed_topic_names": (
                None if self.subscribed_topic_names is None else list(self.subscribed_topic_names)
            ),
            "subscribed_topic_regex": self.subscribed_topic_regex,
            "server_assignor": self.server_assignor,
            "topic_partitions": (
                None
                if tps is None
                else [
                    {"topic_id": tid, "partitions": list(parts)}
                    for tid, parts in sorted(tps.items(), key=lambda kv: kv[0].bytes)
                ]
            ),
        }


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatResult:
    error_code: int
    error_message: str | None
    #: Set by the coordinator when the member joins with epoch 0 (and on some versions always).
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    #: The target assignment, or None when unchanged since the last response.
    assignment: dict[uuid.UUID, tuple[int, ...]] | None
    throttle_time_ms: int = 0


def parse_consumer_group_heartbeat(resp: Any) -> ConsumerGroupHeartbeatResult:
    obj = _fields(resp)
    raw = obj["assignment"]
    assignment: dict[uuid.UUID, tuple[int, ...]] | None = None
    if raw is not None:
        assignment = {}
        for row in raw["topic_partitions"] or ():
            assignment[row["topic_id"]] = tuple(sorted(row["partitions"] or ()))
    return ConsumerGroupHeartbeatResult(
        error_code=obj["error_code"],
        error_message=obj["error_message"],
        member_id=obj["member_id"],
        member_epoch=obj["member_epoch"],
        heartbeat_interval_ms=obj["heartbeat_interval_ms"],
        assignment=assignment,
        throttle_time_ms=obj["throttle_time_ms"],
    )


class ConsumerOffsetCommitRequest(OffsetCommitRequest):
    """OffsetCommit from a consumer-protocol member: ``generation_id`` carries the member epoch.

    v9 is v8 on the wire, but a broker only accepts a member epoch on v9+
    (earlier versions are answered as if from a classic member), so older
    versions are refused rather than sent.
    """

    def __init__(
        self,
        group_id: str,
        member_epoch: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> None:
        super().__init__(group_id, member_epoch, member_id, group_instance_id, offsets)

    def _check(self, version: int) -> None:
        self._needs(version, _MEMBER_EPOCH_VERSION, "a commit with a member epoch (KIP-848)")
        super()._check(version)


class ConsumerOffsetFetchRequest(OffsetFetchRequest):
    """OffsetFetch v9+ naming the member, so the coordinator can fence a stale one."""

    def __init__(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        partitions: Sequence[TopicPartition] | None,
        *,
        require_stable: bool = True,
    ) -> None:
        super().__init__(group_id, partitions, require_stable=require_stable)
        self.member_id = _require_str("member_id", member_id)
        self.member_epoch = _require_int("member_epoch", member_epoch, minimum=LEAVE_EPOCH)

    def _check(self, version: int) -> None:
        self._needs(version, _MEMBER_EPOCH_VERSION, "an offset fetch with a member epoch (KIP-848)")
        super()._check(version)

    def _values(self) -> dict[str, Any]:
        values = super()._values()
        for group in values["groups"]:
            group["member_id"] = self.member_id
            group["member_epoch"] = self.member_epoch
        return values


_NO_TOPIC_ID = uuid.UUID(int=0)


class TopicIdsRequest(GroupApiRequest):
    """Metadata v10+ for ``topics`` (None: every topic), read for its topic ids.

    The consumer protocol assigns partitions by topic id; listeners, the fetcher
    and commits speak names.  Never creates topics.
    """

    API = TOPIC_METADATA

    def __init__(self, topics: Sequence[str] | None) -> None:
        if topics is None:
            self.topics: tuple[str, ...] | None = None
        elif isinstance(topics, str | bytes):
            raise TypeError("topics must be a sequence of str, not a str")
        else:
            self.topics = tuple(sorted(_require_str("topic", t, empty_ok=False) for t in topics))

    def _values(self) -> dict[str, Any]:
        return {
            "topics": (
                None
                if self.topics is None
                else [{"topic_id": _NO_TOPIC_ID, "name": t} for t in self.topics]
            ),
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }


def parse_topic_ids(resp: Any) -> dict[uuid.UUID, str]:
    """topic id -> name for every topic the response names without error."""
    obj = _fields(resp)
    out: dict[uuid.UUID, str] = {}
    for topic in obj["topics"] or ():
        tid = topic.get("topic_id")
        if topic["error_code"] == 0 and topic["name"] and tid is not None and tid != _NO_TOPIC_ID:
            out[tid] = topic["name"]
    return out


class ConsumerGroupDescribeRequest(GroupApiRequest):
    """ConsumerGroupDescribe (API 69) for one group: the coordinator's view of it."""

    API = CONSUMER_GROUP_DESCRIBE

    def __init__(self, group_id: str) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)

    def _values(self) -> dict[str, Any]:
        return {"group_ids": [self.group_id], "include_authorized_operations": False}


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    client_id: str
    member_epoch: int
    #: What the member owns now / what the coordinator wants it to own, by name.
    assignment: frozenset[tuple[str, int]]
    target_assignment: frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    error_code: int
    group_state: str
    group_epoch: int
    assignment_epoch: int
    members: tuple[DescribedMember, ...]
    #: The server-side assignor the group uses (``group_remote_assignor`` or the default).
    assignor_name: str = ""


def _described(assignment: Any) -> frozenset[tuple[str, int]]:
    return frozenset(
        (row["topic_name"], p)
        for row in assignment["topic_partitions"] or ()
        for p in row["partitions"] or ()
    )


def parse_consumer_group_describe(resp: Any) -> DescribedConsumerGroup:
    obj = _fields(resp)
    groups = obj["groups"] or ()
    if not groups:
        raise ValueError("ConsumerGroupDescribe response names no group")
    g = groups[0]
    members = tuple(
        DescribedMember(
            m["member_id"],
            m["instance_id"],
            m["client_id"],
            m["member_epoch"],
            _described(m["assignment"]),
            _described(m["target_assignment"]),
        )
        for m in g["members"] or ()
    )
    return DescribedConsumerGroup(
        g["error_code"],
        g["group_state"],
        g["group_epoch"],
        g["assignment_epoch"],
        members,
        g.get("assignor_name") or "",
    )
