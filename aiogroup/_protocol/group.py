"""Group-API request builders and version-independent response parsers.

A builder holds what the caller wants to say; ``prepare(versions)`` - the call
aiokafka's connection makes with the broker's ApiVersions table - picks the
highest version both sides speak and lays the values out for it.  So
``await client.send(node_id, builder)`` works exactly as with aiokafka's own
request classes, and ``builder.api_version`` tells afterwards which version went
out.

When a version cannot carry something the caller relies on (static membership
before the broker knew it, "all partitions" on OffsetFetch v0/v1, a non-group
coordinator type on FindCoordinator v0) ``prepare`` raises
``IncompatibleBrokerVersion`` instead of silently sending a different request.
Fields that are only informational (``reason``, the protocol echo on SyncGroup)
are dropped when the version has no room for them, as Kafka's clients do.

The parsers accept the response struct of any version of their API, ours or
aiokafka's (whose field names differ), and return the dataclasses of
:mod:`aiogroup._protocol.results`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from aiokafka.errors import IncompatibleBrokerVersion

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
from aiogroup._protocol.schema import ApiStructs, struct_to_dict
from aiogroup.structs import OffsetAndMetadata, TopicPartition

__all__ = [
    "COORDINATOR_TYPE_GROUP",
    "COORDINATOR_TYPE_TRANSACTION",
    "FindCoordinatorRequest",
    "GroupApiRequest",
    "HeartbeatRequest",
    "JoinGroupRequest",
    "LeaveGroupRequest",
    "OffsetCommitRequest",
    "OffsetFetchRequest",
    "SyncGroupRequest",
    "parse_find_coordinator",
    "parse_heartbeat",
    "parse_join_group",
    "parse_leave_group",
    "parse_offset_commit",
    "parse_offset_fetch",
    "parse_sync_group",
]

COORDINATOR_TYPE_GROUP = 0
COORDINATOR_TYPE_TRANSACTION = 1
_COORDINATOR_TYPES = (0, 1, 2)  # group, transaction, share group (KIP-932)

#: Kafka's sentinels for "not known": committed leader epoch, commit timestamp,
#: retention (broker default) and KIP-848 member epoch.
_NO_EPOCH = -1
_DEFAULT_TIMESTAMP = -1
_DEFAULT_RETENTION = -1
_NO_MEMBER_EPOCH = -1


# --- input validation ---------------------------------------------------------------


def _require_str(name: str, value: object, *, empty_ok: bool = True) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if not empty_ok and not value:
        raise ValueError(f"{name} must not be empty")
    return value


def _optional_str(name: str, value: object, *, empty_ok: bool = True) -> str | None:
    if value is None:
        return None
    return _require_str(name, value, empty_ok=empty_ok)


def _require_int(name: str, value: object, *, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _require_pairs(name: str, value: object, *, allow_empty: bool) -> list[tuple[str, bytes]]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list of (str, bytes) pairs")
    pairs: list[tuple[str, bytes]] = []
    for item in value:
        if (
            not isinstance(item, tuple | list)
            or len(item) != 2
            or not isinstance(item[0], str)
            or not isinstance(item[1], bytes | bytearray)
        ):
            raise TypeError(f"{name} must be a list of (str, bytes) pairs, got item {item!r}")
        pairs.append((item[0], bytes(item[1])))
    if not pairs and not allow_empty:
        raise ValueError(f"{name} must not be empty")
    return pairs


def _require_topic_partition(name: str, value: object) -> TopicPartition:
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not isinstance(value[0], str)
        or isinstance(value[1], bool)
        or not isinstance(value[1], int)
    ):
        raise TypeError(f"{name} must hold TopicPartition(topic, partition), got {value!r}")
    if not value[0] or value[1] < 0:
        raise ValueError(f"{name} holds an invalid partition {value!r}")
    return TopicPartition(value[0], value[1])


# --- builders ----------------------------------------------------------------------


class GroupApiRequest(abc.ABC):
    """What aiokafka's connection needs from a request: ``prepare(versions)``.

    Subclasses say which API they build (``API``) and supply the values of every
    field of every version (``_values``); ``_check`` refuses versions that cannot
    carry the request's meaning.
    """

    API: ClassVar[ApiStructs]
    API_KEY: ClassVar[int]
    ALLOW_UNKNOWN_API_VERSION: ClassVar[bool] = False

    #: The version the last ``prepare`` chose; None until then.
    api_version: int | None = None

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls.API_KEY = cls.API.api_key

    def select_version(self, versions: Mapping[int, tuple[int, int]]) -> int:
        """The highest version both we and the broker (its ApiVersions table) speak."""
        name = self.API.name
        if self.API_KEY not in versions:
            raise IncompatibleBrokerVersion(f"the broker does not support the {name} API")
        broker_min, broker_max = versions[self.API_KEY]
        version = min(broker_max, self.API.max_version)
        if version < broker_min or version < min(self.API.requests):
            raise IncompatibleBrokerVersion(
                f"no common {name} version: broker speaks v{broker_min}-v{broker_max}, "
                f"aiogroup v{min(self.API.requests)}-v{self.API.max_version}"
            )
        return version

    def prepare(self, versions: Mapping[int, tuple[int, int]]) -> Any:
        version = self.select_version(versions)
        struct = self.build(version)
        self.api_version = version
        return struct

    def build(self, version: int | type[Any]) -> Any:
        """The request struct of ``version`` (raises if that version cannot express it).

        Like aiokafka's ``Request.build``, a struct class is accepted in place of its version.
        """
        if isinstance(version, type):
            version = int(version.API_VERSION)
        if version not in self.API.requests:
            raise IncompatibleBrokerVersion(f"aiogroup does not speak {self.API.name} v{version}")
        self._check(version)
        return self.API.request(version, self._values())

    def _check(self, version: int) -> None:  # noqa: B027 - an optional hook, not abstract
        """Raise IncompatibleBrokerVersion if ``version`` cannot carry this request."""

    @abc.abstractmethod
    def _values(self) -> dict[str, Any]:
        """The struct's field values, by name, for the version being built."""

    def _needs(self, version: int, since: int, what: str) -> None:
        if version < since:
            raise IncompatibleBrokerVersion(
                f"{what} needs {self.API.name} v{since}+, but the broker only speaks up to "
                f"v{version}"
            )


class FindCoordinatorRequest(GroupApiRequest):
    API = FIND_COORDINATOR

    def __init__(self, key: str, key_type: int = COORDINATOR_TYPE_GROUP) -> None:
        self.key = _require_str("key", key, empty_ok=False)
        self.key_type = _require_int("key_type", key_type)
        if key_type not in _COORDINATOR_TYPES:
            raise ValueError(f"key_type must be one of {_COORDINATOR_TYPES}, got {key_type}")

    def _check(self, version: int) -> None:
        if self.key_type != COORDINATOR_TYPE_GROUP:
            self._needs(version, 1, f"coordinator type {self.key_type}")

    def _values(self) -> dict[str, Any]:
        return {"key": self.key, "key_type": self.key_type, "coordinator_keys": [self.key]}


class JoinGroupRequest(GroupApiRequest):
    API = JOIN_GROUP

    def __init__(
        self,
        group_id: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        reason: str | None = None,
    ) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)
        self.session_timeout_ms = _require_int("session_timeout_ms", session_timeout_ms, minimum=1)
        self.rebalance_timeout_ms = _require_int(
            "rebalance_timeout_ms", rebalance_timeout_ms, minimum=1
        )
        self.member_id = _require_str("member_id", member_id)
        self.group_instance_id = _optional_str(
            "group_instance_id", group_instance_id, empty_ok=False
        )
        self.protocol_type = _require_str("protocol_type", protocol_type, empty_ok=False)
        self.protocols = _require_pairs("protocols", protocols, allow_empty=False)
        self.reason = _optional_str("reason", reason)

    def _check(self, version: int) -> None:
        if self.group_instance_id is not None:
            self._needs(version, 5, "static membership (group_instance_id)")

    def _values(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "protocol_type": self.protocol_type,
            "protocols": [{"name": name, "metadata": meta} for name, meta in self.protocols],
            "reason": self.reason,
        }


class SyncGroupRequest(GroupApiRequest):
    API = SYNC_GROUP

    def __init__(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: list[tuple[str, bytes]],
    ) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)
        self.generation_id = _require_int("generation_id", generation_id)
        self.member_id = _require_str("member_id", member_id, empty_ok=False)
        self.group_instance_id = _optional_str(
            "group_instance_id", group_instance_id, empty_ok=False
        )
        self.protocol_type = _optional_str("protocol_type", protocol_type)
        self.protocol_name = _optional_str("protocol_name", protocol_name)
        # Followers send an empty list; only the leader assigns.
        self.assignments = _require_pairs("assignments", assignments, allow_empty=True)

    def _check(self, version: int) -> None:
        if self.group_instance_id is not None:
            self._needs(version, 3, "static membership (group_instance_id)")

    def _values(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "generation_id": self.generation_id,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "protocol_type": self.protocol_type,
            "protocol_name": self.protocol_name,
            "assignments": [
                {"member_id": member, "assignment": data} for member, data in self.assignments
            ],
        }


class HeartbeatRequest(GroupApiRequest):
    API = HEARTBEAT

    def __init__(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)
        self.generation_id = _require_int("generation_id", generation_id)
        self.member_id = _require_str("member_id", member_id, empty_ok=False)
        self.group_instance_id = _optional_str(
            "group_instance_id", group_instance_id, empty_ok=False
        )

    def _check(self, version: int) -> None:
        if self.group_instance_id is not None:
            self._needs(version, 3, "static membership (group_instance_id)")

    def _values(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "generation_id": self.generation_id,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
        }


class LeaveGroupRequest(GroupApiRequest):
    API = LEAVE_GROUP

    def __init__(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        reason: str | None = None,
    ) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)
        self.member_id = _require_str("member_id", member_id, empty_ok=False)
        self.group_instance_id = _optional_str(
            "group_instance_id", group_instance_id, empty_ok=False
        )
        self.reason = _optional_str("reason", reason)

    def _check(self, version: int) -> None:
        if self.group_instance_id is not None:
            self._needs(version, 3, "static membership (group_instance_id)")

    def _values(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "member_id": self.member_id,
            "members": [
                {
                    "member_id": self.member_id,
                    "group_instance_id": self.group_instance_id,
                    "reason": self.reason,
                }
            ],
        }


def _checked_offset(key: TopicPartition, oam: object) -> OffsetAndMetadata:
    """``oam`` as a well-formed OffsetAndMetadata.

    The argument names in the messages embed a TopicPartition repr, so they are
    formatted only when a check fails: for a commit of many partitions, building
    them up front cost more than the rest of the request.
    """
    if not isinstance(oam, tuple) or len(oam) != 2:
        raise TypeError(f"offsets[{key}] must be OffsetAndMetadata, got {oam!r}")
    offset, metadata = oam
    if type(offset) is not int or offset < 0:
        offset = _require_int(f"offsets[{key}].offset", offset, minimum=0)
    if metadata is not None and type(metadata) is not str:
        metadata = _require_str(f"offsets[{key}].metadata", metadata)
    return OffsetAndMetadata(offset, "" if metadata is None else metadata)


def _by_topic(partitions: Sequence[TopicPartition]) -> dict[str, list[int]]:
    """Partitions grouped by topic, both sorted, so equal requests encode equally."""
    grouped: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return grouped


class OffsetCommitRequest(GroupApiRequest):
    API = OFFSET_COMMIT

    def __init__(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
    ) -> None:
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
        checked: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, oam in offsets.items():
            key = _require_topic_partition("offsets", tp)
            checked[key] = _checked_offset(key, oam)
        self.offsets = checked

    def _check(self, version: int) -> None:
        if self.group_instance_id is not None:
            self._needs(version, 7, "static membership (group_instance_id)")

    def _values(self) -> dict[str, Any]:
        topics = []
        for topic, partitions in _by_topic(list(self.offsets)).items():
            rows = []
            for partition in partitions:
                oam = self.offsets[TopicPartition(topic, partition)]
                rows.append(
                    {
                        "partition_index": partition,
                        "committed_offset": oam.offset,
                        "committed_leader_epoch": _NO_EPOCH,
                        "commit_timestamp": _DEFAULT_TIMESTAMP,
                        "committed_metadata": oam.metadata,
                    }
                )
            topics.append({"name": topic, "partitions": rows})
        return {
            "group_id": self.group_id,
            "generation_id": self.generation_id,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "retention_time_ms": _DEFAULT_RETENTION,
            "topics": topics,
        }


class OffsetFetchRequest(GroupApiRequest):
    API = OFFSET_FETCH

    def __init__(
        self,
        group_id: str,
        partitions: Sequence[TopicPartition] | None,
        *,
        require_stable: bool = False,
    ) -> None:
        self.group_id = _require_str("group_id", group_id, empty_ok=False)
        if partitions is None:
            self.partitions: tuple[TopicPartition, ...] | None = None
        elif isinstance(partitions, str | bytes) or not isinstance(partitions, Sequence):
            raise TypeError("partitions must be a sequence of TopicPartition or None (all)")
        else:
            self.partitions = tuple(_require_topic_partition("partitions", tp) for tp in partitions)
        if not isinstance(require_stable, bool):
            raise TypeError("require_stable must be a bool")
        self.require_stable = require_stable

    def _check(self, version: int) -> None:
        if self.partitions is None:
            self._needs(version, 2, "fetching the offsets of all partitions (partitions=None)")

    def _values(self) -> dict[str, Any]:
        topics: list[dict[str, Any]] | None = None
        if self.partitions is not None:
            topics = [
                {"name": topic, "partition_indexes": indexes}
                for topic, indexes in _by_topic(self.partitions).items()
            ]
        return {
            "group_id": self.group_id,
            "topics": topics,
            "groups": [
                {
                    "group_id": self.group_id,
                    "member_id": None,
                    "member_epoch": _NO_MEMBER_EPOCH,
                    "topics": topics,
                }
            ],
            "require_stable": self.require_stable,
        }


# --- parsers -----------------------------------------------------------------------

_MISSING: Any = object()


def _fields(resp: Any) -> dict[str, Any]:
    """The response as nested dicts keyed by field name, whatever its class."""
    return struct_to_dict(resp)


def _pick(obj: Mapping[str, Any], *names: str, default: Any = _MISSING) -> Any:
    """The first of ``names`` present: ours first, then aiokafka's name for it."""
    for name in names:
        if name in obj:
            return obj[name]
    if default is _MISSING:
        raise KeyError(f"none of {names} in response fields {sorted(obj)}")
    return default


def parse_find_coordinator(resp: Any) -> FindCoordinatorResult:
    obj = _fields(resp)
    coordinators = obj.get("coordinators")
    if coordinators is not None:
        # v4+: one entry per requested key; we ask for one.
        if not coordinators:
            raise ValueError("FindCoordinator response names no coordinator")
        obj = coordinators[0]
    return FindCoordinatorResult(
        error_code=obj["error_code"],
        node_id=_pick(obj, "node_id", "coordinator_id"),
        host=obj["host"],
        port=obj["port"],
        error_message=obj.get("error_message"),
    )


def parse_join_group(resp: Any) -> JoinGroupResult:
    obj = _fields(resp)
    members = tuple(
        JoinGroupMember(
            member_id=m["member_id"],
            group_instance_id=m.get("group_instance_id"),
            metadata=_pick(m, "metadata", "member_metadata") or b"",
        )
        for m in obj["members"] or ()
    )
    return JoinGroupResult(
        error_code=obj["error_code"],
        generation_id=obj["generation_id"],
        protocol_type=obj.get("protocol_type"),
        protocol_name=_pick(obj, "protocol_name", "group_protocol"),
        leader=_pick(obj, "leader", "leader_id"),
        member_id=obj["member_id"],
        members=members,
        throttle_time_ms=obj.get("throttle_time_ms", 0),
        skip_assignment=bool(obj.get("skip_assignment", False)),
    )


def parse_sync_group(resp: Any) -> SyncGroupResult:
    obj = _fields(resp)
    return SyncGroupResult(
        error_code=obj["error_code"],
        assignment=_pick(obj, "assignment", "member_assignment") or b"",
        protocol_type=obj.get("protocol_type"),
        protocol_name=obj.get("protocol_name"),
        throttle_time_ms=obj.get("throttle_time_ms", 0),
    )


def parse_heartbeat(resp: Any) -> HeartbeatResult:
    obj = _fields(resp)
    return HeartbeatResult(
        error_code=obj["error_code"], throttle_time_ms=obj.get("throttle_time_ms", 0)
    )


def parse_leave_group(resp: Any) -> LeaveGroupResult:
    obj = _fields(resp)
    members = tuple(
        (m["member_id"], m["group_instance_id"], m["error_code"]) for m in obj.get("members") or ()
    )
    return LeaveGroupResult(error_code=obj["error_code"], members=members)


def parse_offset_commit(resp: Any) -> OffsetCommitResult:
    obj = _fields(resp)
    errors: dict[tuple[str, int], int] = {}
    for topic in obj["topics"] or ():
        name = _pick(topic, "name", "topic")
        for partition in topic["partitions"] or ():
            errors[(name, _pick(partition, "partition_index", "partition"))] = partition[
                "error_code"
            ]
    return OffsetCommitResult(errors=errors, throttle_time_ms=obj.get("throttle_time_ms", 0))


def parse_offset_fetch(resp: Any) -> OffsetFetchResult:
    obj = _fields(resp)
    groups = obj.get("groups")
    if groups is not None:
        # v8+: one entry per requested group; we ask for one.
        if not groups:
            raise ValueError("OffsetFetch response names no group")
        obj = groups[0]
    partitions: dict[tuple[str, int], tuple[int, int, str | None, int]] = {}
    for topic in obj["topics"] or ():
        name = _pick(topic, "name", "topic")
        for p in topic["partitions"] or ():
            partitions[(name, _pick(p, "partition_index", "partition"))] = (
                _pick(p, "committed_offset", "offset"),
                p.get("committed_leader_epoch", _NO_EPOCH),
                p["metadata"],
                p["error_code"],
            )
    return OffsetFetchResult(error_code=obj.get("error_code", 0), partitions=partitions)
