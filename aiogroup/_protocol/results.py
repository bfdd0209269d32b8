"""Version-independent views of group-API responses.

aiokafka's response structs differ field by field between versions; the
coordinator and the pure membership machine only ever see these dataclasses,
produced by the parsers in :mod:`aiogroup._protocol.group`.  Error codes stay
ints (Kafka's numbering) so the machine can tabulate reactions without
importing aiokafka.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "FindCoordinatorResult",
    "HeartbeatResult",
    "JoinGroupMember",
    "JoinGroupResult",
    "LeaveGroupResult",
    "OffsetCommitResult",
    "OffsetFetchResult",
    "SyncGroupResult",
]


@dataclass(frozen=True, slots=True)
class FindCoordinatorResult:
    error_code: int
    node_id: int
    host: str
    port: int
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    error_code: int
    generation_id: int
    #: None before JoinGroup v7 (the broker did not say).
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    member_id: str
    members: tuple[JoinGroupMember, ...] = ()
    throttle_time_ms: int = 0
    #: JoinGroup v9+ (KIP-814): the leader must not compute a new assignment.
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error_code: int
    assignment: bytes
    protocol_type: str | None = None
    protocol_name: str | None = None
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error_code: int
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class LeaveGroupResult:
    error_code: int
    #: v3+: per-member outcomes as (member_id, group_instance_id, error_code).
    members: tuple[tuple[str, str | None, int], ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetCommitResult:
    #: (topic, partition) -> error code
    errors: dict[tuple[str, int], int] = field(default_factory=dict)
    throttle_time_ms: int = 0


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    #: group-level error (v2+), 0 when none
    error_code: int
    #: (topic, partition) -> (offset, leader_epoch, metadata, error_code); offset -1 = none
    partitions: dict[tuple[str, int], tuple[int, int, str | None, int]] = field(
        default_factory=dict
    )
