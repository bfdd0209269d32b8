"""``ShareConsumer.health()``: readiness and liveness of a share-group member, for probes.

Why a module of its own: the judgement is a pure function of plain values
(:class:`ShareMemberView`, read by the facade at one moment), unit-tested alone, as
``GroupConsumer.health()`` is (:func:`aiogroup.metrics.assess_health`).  The shape
follows :class:`aiogroup.metrics.Health` where the concepts match (live, ready,
joined, member state, heartbeat and broker ages, the error, the reasons); what a share
member adds is the delivery gate (its session proven by a heartbeat answer), the share
sessions with each partition leader, and the records it holds under acquisition locks.
A share member has no poll-interval rule (the broker has none for share groups), so
an application that stops polling is not "not live" - its records' locks run out and
go to other members.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["LeaderSession", "ShareHealth", "ShareMemberView", "assess_share_health"]


@dataclass(frozen=True)
class LeaderSession:
    """The share session with one partition leader (ShareFetch / ShareAcknowledge)."""

    node_id: int
    #: A session exists on the broker (epoch >= 1 answered, not closed).
    open: bool
    epoch: int
    #: Partitions the broker holds in the session (as of the last answer).
    partitions: int
    #: A request to this leader is awaiting its answer.
    request_in_flight: bool


@dataclass(frozen=True)
class ShareMemberView:
    """What ``ShareConsumer`` reads of itself for ``health()``, in plain values."""

    #: "new", "started" or "stopped".
    lifecycle: str
    #: The share membership machine's state ("stable", "joining", ..., "fatal").
    member_state: str
    member_id: str | None
    member_epoch: int | None
    #: In the group with an assignment (the machine is STABLE).
    joined: bool
    #: Seconds the delivery gate stays open (a heartbeat answer proved the session);
    #: None: closed (never proven, lapsed, or not a member).
    session_valid_for_s: float | None
    seconds_since_last_heartbeat: float | None
    seconds_since_broker_response: float | None
    broker_reachable: bool
    leaders: tuple[LeaderSession, ...] = ()
    #: Records acquired and not settled yet (buffered, handed out, or being acknowledged).
    records_acquired: int = 0
    #: Of those, acquired but not handed to the application yet.
    records_buffered: int = 0
    #: Acknowledgements sent and not answered yet.
    acknowledgements_in_flight: int = 0
    #: The error every poll raises from now on (the member stopped for good).
    fatal_error: BaseException | None = None
    #: The last broker error the metrics saw (None: none since the last success).
    last_broker_error: str | None = None


@dataclass(frozen=True)
class ShareHealth:
    """Readiness and liveness of a share consumer.

    ``live`` is False when the consumer cannot recover by itself (not started or
    stopped, or a fatal error: the group id belongs to another group type, the
    membership failed); ``ready`` additionally needs the member joined with its
    session alive (past ``session_valid_for_s`` it hands out no records) and the
    broker reachable.
    """

    live: bool
    ready: bool
    started: bool
    joined: bool
    session_alive: bool
    broker_reachable: bool
    member_state: str
    member_id: str | None
    member_epoch: int | None
    session_valid_for_s: float | None
    seconds_since_last_heartbeat: float | None
    seconds_since_broker_response: float | None
    leader_sessions: tuple[LeaderSession, ...]
    #: Acquired and not settled: buffered, with the application, or being acknowledged.
    records_acquired: int
    #: Acquired, not handed to the application yet.
    records_buffered: int
    #: Handed out and not settled: no acknowledgement answered yet (pending, or sent).
    records_unacknowledged: int
    acknowledgements_in_flight: int
    last_error: str | None
    reasons: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["leader_sessions"] = [asdict(s) for s in self.leader_sessions]
        out["reasons"] = list(self.reasons)
        return out


def assess_share_health(view: ShareMemberView) -> ShareHealth:
    """Live, ready, and the reasons when not (see :class:`ShareHealth`)."""
    started = view.lifecycle == "started"
    reasons: list[str] = []
    live = started
    if not started:
        reasons.append(f"consumer is {view.lifecycle}")
    if view.fatal_error is not None:
        live = False
        reasons.append(f"fatal error: {view.fatal_error!r}")
    session_alive = view.session_valid_for_s is not None and view.session_valid_for_s > 0
    if started and not view.joined:
        reasons.append(f"not joined (member state {view.member_state})")
    if started and not session_alive:
        reasons.append("session not proven by a heartbeat answer: no records handed out")
    if not view.broker_reachable:
        reasons.append("no broker request succeeded within the session timeout")
    ready = live and view.joined and session_alive and view.broker_reachable
    error = view.fatal_error
    return ShareHealth(
        live=live,
        ready=ready,
        started=started,
        joined=view.joined,
        session_alive=session_alive,
        broker_reachable=view.broker_reachable,
        member_state=view.member_state,
        member_id=view.member_id,
        member_epoch=view.member_epoch,
        session_valid_for_s=view.session_valid_for_s,
        seconds_since_last_heartbeat=view.seconds_since_last_heartbeat,
        seconds_since_broker_response=view.seconds_since_broker_response,
        leader_sessions=view.leaders,
        records_acquired=view.records_acquired,
        records_buffered=view.records_buffered,
        records_unacknowledged=max(0, view.records_acquired - view.records_buffered),
        acknowledgements_in_flight=view.acknowledgements_in_flight,
        last_error=repr(error) if error is not None else view.last_broker_error,
        reasons=tuple(reasons),
    )
