"""Helpers that drive a Membership through the protocol without an event loop."""

from __future__ import annotations

from collections.abc import Iterable

from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership.machine import Membership, MemberState
from aiogroup._protocol.results import (
    HeartbeatResult,
    JoinGroupMember,
    JoinGroupResult,
    LeaveGroupResult,
    SyncGroupResult,
)
from aiogroup.structs import RebalanceProtocol, TopicPartition

EAGER = RebalanceProtocol.EAGER
COOPERATIVE = RebalanceProtocol.COOPERATIVE
SESSION = 6.0
HEARTBEAT = 1.0
MAX_POLL = 30.0
REBALANCE = 20.0
BACKOFF = 0.1
AUTO_COMMIT = 5.0


def tp(partition: int, topic: str = "t") -> TopicPartition:
    return TopicPartition(topic, partition)


def tps(*partitions: int) -> frozenset[TopicPartition]:
    return frozenset(tp(p) for p in partitions)


def make(
    protocol: RebalanceProtocol = EAGER,
    *,
    auto_commit: bool = False,
    static: bool = False,
) -> Membership:
    return Membership(
        protocol=protocol,
        session_timeout=SESSION,
        heartbeat_interval=HEARTBEAT,
        max_poll_interval=MAX_POLL,
        rebalance_timeout=REBALANCE,
        retry_backoff=BACKOFF,
        auto_commit_interval=AUTO_COMMIT if auto_commit else None,
        static_member=static,
    )


def join_ok(
    generation: int, member: str = "m1", leader: str = "other", members: Iterable[str] = ()
) -> E.JoinGroupResponseReceived:
    return E.JoinGroupResponseReceived(
        JoinGroupResult(
            error_code=0,
            generation_id=generation,
            protocol_type="consumer",
            protocol_name="range",
            leader=leader,
            member_id=member,
            members=tuple(JoinGroupMember(m, None, b"") for m in members),
        )
    )


def join_error(code: int, member: str = "") -> E.JoinGroupResponseReceived:
    return E.JoinGroupResponseReceived(JoinGroupResult(code, -1, None, None, "", member))


def sync_ok(generation: int, partitions: frozenset[TopicPartition]) -> E.SyncGroupResponseReceived:
    return E.SyncGroupResponseReceived(SyncGroupResult(0, b""), generation, partitions)


def sync_error(code: int, generation: int) -> E.SyncGroupResponseReceived:
    return E.SyncGroupResponseReceived(SyncGroupResult(code, b""), generation)


def heartbeat(code: int, generation: int) -> E.HeartbeatResponseReceived:
    return E.HeartbeatResponseReceived(HeartbeatResult(code), generation)


def leave_ok() -> E.LeaveGroupResponseReceived:
    return E.LeaveGroupResponseReceived(LeaveGroupResult(0))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0


def to_stable(
    m: Membership,
    partitions: frozenset[TopicPartition],
    *,
    generation: int = 1,
    now: float = 0.0,
    member: str = "m1",
) -> None:
    """Subscribe, find the coordinator, join and sync as a follower; assert every step."""
    assert m.handle(E.SubscriptionChanged(True, "subscribed"), now) == [
        A.FindCoordinator("needed to join the group")
    ]
    out = m.handle(E.CoordinatorFound(1), now)
    assert out == [A.SendJoinGroup("subscribed", "", -1, frozenset())]
    out = m.handle(join_ok(generation, member), now)
    assert out == [A.SendSyncGroup(generation, member, "range", ())]
    out = m.handle(sync_ok(generation, partitions), now)
    assert out == [
        A.SetAssignment(partitions),
        A.InvokeOnPartitionsAssigned(partitions, generation),
    ]
    assert m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), now) == []
    assert m.state is MemberState.STABLE
