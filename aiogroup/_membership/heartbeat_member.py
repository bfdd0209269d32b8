"""A member of a heartbeat-driven group (KIP-848 consumer groups, KIP-932 share groups).

Why one module: the consumer-protocol machine (:mod:`aiogroup._membership.consumer_group`)
and the share-group machine (:mod:`aiogroup._membership.share_group`) are two protocols
on one skeleton.  Both find a coordinator and heartbeat it at the interval it names,
learn the names of the topic ids an assignment speaks (Metadata) and the group's
session timeout (the delivery gate's bound), report errors to the application the
same way and are driven by the same table engine (:mod:`aiogroup._membership.table`).
That plumbing lives here, once; each machine keeps its transition table, its state
rules, what its heartbeat carries and what each of its error codes does.

How a machine uses it: it subclasses :class:`HeartbeatMember` (its state enum as the
type parameter) and answers the hooks - its tables (:meth:`HeartbeatMember._event_table`,
:meth:`HeartbeatMember._state_rules`), whether it wants to heartbeat now and what the
heartbeat is, and its own post-step rules and deadlines if it has any.  The handlers
below are the table entries both machines share; :func:`add_plumbing` puts them in a
machine's table.

Pure like the machines: no I/O, time comes in as ``now``.
"""

from __future__ import annotations

import enum
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from aiogroup._membership import table
from aiogroup._membership.actions import (
    Action,
    FindCoordinator,
    LookupSessionTimeout,
    RaiseToApplication,
    RequestMetadata,
    SetAssignment,
)
from aiogroup._membership.backoff import DEFAULT_BACKOFF_MAX, Retrying, RetryPolicy
from aiogroup._membership.codes import ErrorCode, code_name
from aiogroup._membership.events import (
    BrokerIncompatible,
    CoordinatorFound,
    CoordinatorLookupFailed,
    Event,
    SessionTimeoutLearned,
    SessionTimeoutLookupFailed,
    TimerFired,
    TopicNamesLookupFailed,
    TopicNamesResolved,
)

__all__ = [
    "COMMON_HEARTBEAT_REACTIONS",
    "SESSION_LOOKUP_ATTEMPTS",
    "HeartbeatMember",
    "HeartbeatReaction",
    "add_plumbing",
    "check_ids",
    "heartbeat_error_text",
]

StateT = TypeVar("StateT", bound=enum.Enum)
#: A machine, in the signatures of the table helpers.
MemberT = TypeVar("MemberT", bound="HeartbeatMember[Any]")

#: A partition by topic name: ``(topic, partition)``, equal to (and hashed like) the
#: TopicPartition named tuple the shell builds from it.
TopicPartition = tuple[str, int]
IdPartitions = frozenset[tuple[uuid.UUID, int]]

#: Tries at the group's session timeout before the delivery gate keeps the heartbeat
#: interval as its bound (no DESCRIBE_CONFIGS permission, an older broker).
SESSION_LOOKUP_ATTEMPTS = 3


class HeartbeatReaction(enum.Enum):
    """What an error code in a heartbeat's answer makes the member do: both RPCs'
    codes fall into these six (each machine says what "fenced" costs it)."""

    OK = "ok"
    #: The coordinator moved or is down: find it again (backoff), then heartbeat at once.
    FIND_COORDINATOR = "find coordinator"
    RETRY_BACKOFF = "retry after backoff"
    #: Member or epoch gone: what it held goes with it (a consumer's partitions are lost,
    #: a share member's acquired records forgotten); rejoin with epoch 0.
    FENCED = "fenced: rejoin with epoch 0"
    #: Tell the application (its next poll raises), keep heartbeating after a backoff.
    REPORT_RETRY = "report and retry"
    FATAL = "fatal"


_H = HeartbeatReaction
_C = ErrorCode
#: The codes ConsumerGroupHeartbeatResponse.json and ShareGroupHeartbeatResponse.json
#: both document, with one meaning; each machine adds its RPC's own.
COMMON_HEARTBEAT_REACTIONS: Mapping[int, HeartbeatReaction] = {
    _C.NONE: _H.OK,
    _C.NOT_COORDINATOR: _H.FIND_COORDINATOR,
    _C.COORDINATOR_NOT_AVAILABLE: _H.FIND_COORDINATOR,
    _C.REQUEST_TIMED_OUT: _H.FIND_COORDINATOR,
    _C.COORDINATOR_LOAD_IN_PROGRESS: _H.RETRY_BACKOFF,
    _C.FENCED_MEMBER_EPOCH: _H.FENCED,
    _C.UNKNOWN_MEMBER_ID: _H.FENCED,
    _C.TOPIC_AUTHORIZATION_FAILED: _H.REPORT_RETRY,
    _C.GROUP_AUTHORIZATION_FAILED: _H.FATAL,
    _C.INVALID_REQUEST: _H.FATAL,
    _C.GROUP_MAX_SIZE_REACHED: _H.FATAL,
    _C.UNSUPPORTED_VERSION: _H.FATAL,
}


def check_ids(group_id: str, member_id: str) -> None:
    """Refuse an empty group id or member id, naming which."""
    if not group_id:
        raise ValueError("group_id must not be empty")
    if not member_id:
        raise ValueError("member_id must not be empty (the client generates it, KIP-1082)")


def heartbeat_error_text(rpc: str, code: int, message: str | None, hint: str | None = None) -> str:
    """``<rpc> failed with <CODE>[: <broker's message>][ (<hint>)]``."""
    text = f"{rpc} failed with {code_name(code)}"
    if message:
        text += f": {message}"
    if hint:
        text += f" ({hint})"
    return text


class HeartbeatMember(Generic[StateT]):
    """The plumbing of a heartbeat-driven member; a machine subclasses it.

    ``handle(event, now) -> actions`` runs one step: the event table's handler, then the
    state rules until none fires, then what is due now (a heartbeat or a coordinator
    lookup, a topic-names lookup, a session-timeout lookup, then the machine's own).
    """

    #: The error an event missing from the table raises (the machine's own type).
    _ERROR: ClassVar[type[RuntimeError]] = RuntimeError
    #: Why the coordinator is looked up, in FindCoordinator's reason (``<this> in STATE``).
    _LOOKUP_FOR: ClassVar[str] = "heartbeat"
    #: How many state rules may fire in one step before the machine is a bug.
    _RULE_ROUNDS: ClassVar[int] = 16

    def __init__(
        self,
        group_id: str,
        member_id: str,
        *,
        initial: StateT,
        fatal: StateT,
        in_group: Iterable[StateT],
        retry_backoff: float,
        coordinator_policy: RetryPolicy,
        learn_session_timeout: bool,
        now: float,
    ) -> None:
        self.state = initial
        #: The terminal state an unrecoverable error (or an illegal event) ends in.
        self._fatal = fatal
        #: States in which the member is in the group (its session timeout is wanted).
        self._in_group_states = frozenset(in_group)
        self.member_id = member_id
        self.member_epoch = 0
        self.topics: frozenset[str] = frozenset()
        #: The coordinator's latest assignment (None: none received since joining).
        self.target: IdPartitions | None = None
        self.names: dict[uuid.UUID, str] = {}
        #: What the last SetAssignment gave the fetcher.
        self.fetching: frozenset[TopicPartition] = frozenset()
        self.coordinator_known = False
        #: Finding the coordinator: due now, then by the machine's policy per failure in a
        #: row; a heartbeat answered without error resets the count.
        self.coordinator_lookup = Retrying(coordinator_policy, due_at=now)
        self.heartbeat_in_flight = False
        self.heartbeat_interval = 0.0
        self.next_heartbeat_at = now
        #: When the heartbeat in flight (or the last one) was sent.
        self.heartbeat_sent_at = now
        #: Send time of the last heartbeat answered without error (None: none yet).
        self.proven_at: float | None = None
        #: The broker's session timeout in seconds (None: not learned; see the gate).
        self.session_timeout: float | None = None
        #: The leave heartbeat is out: its answer, whatever it is, ends LEAVING.
        self.leave_sent = False
        #: The application subscribed again while the member was leaving: rejoin after.
        self.resubscribed = False
        #: Asking Metadata for the names of assigned topic ids: until every id of the
        #: target has a name (the assignment speaks ids, the application names), without limit.
        self.names_lookup = Retrying(RetryPolicy.from_backoff(retry_backoff))
        self.learn_session_timeout = learn_session_timeout
        self._retry_backoff = retry_backoff
        self.session_lookup = self._new_session_lookup()
        self.error: RaiseToApplication | None = None
        self.now = now
        #: The latest state changes as (from, to, why): an event's name or a rule's reason.
        self.trace: deque[tuple[StateT, StateT, str]] = deque(maxlen=256)
        self._out: list[Action] = []

    # -- hooks: what each machine says ---------------------------------------------------

    def _event_table(
        self,
    ) -> Mapping[tuple[StateT, type], table.Transition[StateT, Callable[[Any, Event], None]]]:
        """(state, event type) -> Transition: the machine's event table."""
        raise NotImplementedError

    def _state_rules(self) -> Sequence[table.StateRule[StateT, Any, Callable[[Any], None]]]:
        """The machine's ordered state rules."""
        raise NotImplementedError

    def _wants_heartbeat(self) -> bool:
        """Does the member keep a heartbeat going in its state now?"""
        raise NotImplementedError

    def _urgent(self) -> bool:
        """Must the next heartbeat go out now rather than at the broker's interval?"""
        raise NotImplementedError

    def _heartbeat(self) -> Action:
        """The heartbeat to send now (and the bookkeeping of sending it)."""
        raise NotImplementedError

    def _after_step(self) -> None:
        """What else is due at the end of a step (the machine's own timers)."""

    def _own_deadlines(self) -> list[float]:
        """The deadlines of the machine's own timers."""
        return []

    def _may_deliver(self) -> bool:
        """May records be handed out in this state at all (the delivery gate)?"""
        return True

    # -- public API ----------------------------------------------------------------------

    def handle(self, event: Event, now: float) -> list[Action]:
        tr = table.transition_for(self._event_table(), self.state, event, self._illegal)
        self.now = max(self.now, now)
        before = self.state
        tr.handler(self, event)
        if self.state is not before:
            if self.state not in tr.targets:
                raise AssertionError(f"{tr.handler.__name__} moved {before} -> {self.state}")
            self.trace.append((before, self.state, type(event).__name__))
        self._advance()
        self._schedule()
        self._lookup_names()
        self._lookup_session_timeout()
        self._after_step()
        out, self._out = self._out, []
        return out

    def _illegal(self, text: str) -> RuntimeError:
        """An event the table does not take here: a shell bug, and the member's end."""
        self.state = self._fatal
        return self._ERROR(text)

    def next_deadline(self) -> float | None:
        """When to feed TimerFired next (None: only an event can move the machine)."""
        deadlines: list[float] = []
        if self._wants_heartbeat() and not self.heartbeat_in_flight:
            if self.coordinator_known:
                deadlines.append(self.next_heartbeat_at)
            else:
                deadlines.extend(self.coordinator_lookup.deadline())
        if self.state is not self._fatal:
            if self._unnamed_ids():
                deadlines.extend(self.names_lookup.deadline())
            if self._wants_session_timeout():
                deadlines.extend(self.session_lookup.deadline())
        deadlines.extend(self._own_deadlines())
        return min(deadlines) if deadlines else None

    def membership_valid_until(self) -> float | None:
        """Until when the member is surely in the group (the shell's delivery gate).

        (send time of the last acknowledged heartbeat) + the session timeout: the
        coordinator cannot have fenced it for a lapsed session before then.  Until the
        session is learned, the heartbeat interval bounds it instead (shorter than the
        session).  None while the member holds no membership (epoch 0: joining, fenced,
        left): then it has nothing to hand out.
        """
        if self.member_epoch <= 0 or self.proven_at is None or not self._may_deliver():
            return None
        bound = (
            self.session_timeout if self.session_timeout is not None else self.heartbeat_interval
        )
        return self.proven_at + bound

    @property
    def failed(self) -> bool:
        """Stopped for good on an unrecoverable error (FATAL)."""
        return self.state is self._fatal

    @property
    def state_name(self) -> str:
        return str(self.state.value)

    # -- helpers -------------------------------------------------------------------------

    def _new_session_lookup(self) -> Retrying:
        """Asking for the group's session timeout: a few tries (without an answer the
        heartbeat interval, which is shorter, bounds the gate)."""
        backoff = self._retry_backoff
        return Retrying(
            RetryPolicy(
                backoff, max(backoff, DEFAULT_BACKOFF_MAX), attempts=SESSION_LOOKUP_ATTEMPTS
            ),
            done=not self.learn_session_timeout,
        )

    def _emit(self, action: Action) -> None:
        if isinstance(action, SetAssignment):
            self.fetching = action.partitions or frozenset()
        self._out.append(action)

    def _report(
        self, code: int | None, message: str, *, fatal: bool, exception: BaseException | None = None
    ) -> None:
        action = RaiseToApplication(message, code, exception, fatal)
        if fatal:
            self.error = action
        self._emit(action)

    def _coordinator_lost(self) -> None:
        """Find the coordinator again after the policy's backoff, then heartbeat at once."""
        self.coordinator_known = False
        self.coordinator_lookup.failed(self.now)
        self.next_heartbeat_at = self.now

    def _heartbeat_accepted(
        self, member_id: str | None, member_epoch: int, interval_ms: int
    ) -> None:
        """A heartbeat answered without error: the coordinator's id, epoch and interval
        hold, the session is proven from the heartbeat's send time, and the coordinator
        lookup's backoff starts over."""
        if member_id:
            self.member_id = member_id
        self.member_epoch = member_epoch
        if interval_ms > 0:
            self.heartbeat_interval = interval_ms / 1000
        self.proven_at = self.heartbeat_sent_at
        self.next_heartbeat_at = self.now + self.heartbeat_interval
        self.coordinator_lookup.failures = 0

    def _retry_later(self, rpc: str, code: int, message: str | None, *, report: bool) -> None:
        """Heartbeat again after the backoff; tell the application first when ``report``."""
        if report:
            self._report(code, heartbeat_error_text(rpc, code, message), fatal=False)
        self.next_heartbeat_at = self.now + self._retry_backoff

    @property
    def in_group(self) -> bool:
        return self.member_epoch > 0 and self.state in self._in_group_states

    def _unnamed_ids(self) -> frozenset[uuid.UUID]:
        if self.target is None:
            return frozenset()
        return frozenset(tid for tid, _ in self.target if tid not in self.names)

    def _wants_session_timeout(self) -> bool:
        return self.state in self._in_group_states and not self.session_lookup.done

    # -- scheduler: what goes out now ----------------------------------------------------

    def _lookup_names(self) -> None:
        """Ask for the names of the target's unnamed topic ids, when the policy says."""
        missing = self._unnamed_ids()
        if missing and self.state is not self._fatal and self.names_lookup.due(self.now):
            self.names_lookup.sent()
            self._emit(RequestMetadata(missing))

    def _lookup_session_timeout(self) -> None:
        """Ask for the group's session timeout once in the group, a few times at most."""
        if self._wants_session_timeout() and self.session_lookup.due(self.now):
            self.session_lookup.sent()
            self._emit(LookupSessionTimeout())

    def _schedule(self) -> None:
        if not self._wants_heartbeat() or self.heartbeat_in_flight:
            return
        if not self.coordinator_known:
            if self.coordinator_lookup.due(self.now):
                self.coordinator_lookup.sent()
                self._emit(FindCoordinator(f"{self._LOOKUP_FOR} in {self.state.value}"))
            return
        if self._urgent() or self.now >= self.next_heartbeat_at:
            self._emit(self._heartbeat())

    def _advance(self) -> None:
        """Apply the state rules until none fires."""
        for _ in range(self._RULE_ROUNDS):
            rule = table.first_rule(self._state_rules(), self, self.state)
            if rule is None:
                return
            self.trace.append((self.state, rule.target, rule.reason))
            self.state = rule.target
            if rule.step is not None:
                rule.step(self)
        raise AssertionError("state rules did not settle")  # pragma: no cover


# --- the event handlers both machines share ---------------------------------------------

Member = HeartbeatMember[Any]


def on_coordinator_found(m: Member, ev: Event) -> None:
    assert isinstance(ev, CoordinatorFound)
    m.coordinator_known = True
    # Not a success for the backoff: only a heartbeat answered resets it, so a
    # coordinator that is found and then refuses is asked at longer and longer waits.
    m.coordinator_lookup.in_flight = False


def on_coordinator_lookup_failed(m: Member, ev: Event) -> None:
    """Look again after the policy's backoff; a missing ACL is also told to the
    application (its start() and next poll raise it, naming the group) while the
    lookup keeps trying, as in the classic machine."""
    assert isinstance(ev, CoordinatorLookupFailed)
    m.coordinator_known = False
    m.coordinator_lookup.failed(m.now)
    if ev.error_code == _C.GROUP_AUTHORIZATION_FAILED:
        m._report(ev.error_code, "FindCoordinator: GROUP_AUTHORIZATION_FAILED", fatal=False)


def on_topic_names(m: Member, ev: Event) -> None:
    """Names arrived; an id still without one (the broker answering Metadata has not
    learnt the topic yet) is asked for again after the policy's backoff."""
    assert isinstance(ev, TopicNamesResolved)
    m.names.update(ev.names)
    if m._unnamed_ids():
        m.names_lookup.failed(m.now)
    else:
        m.names_lookup.succeeded()


def on_topic_names_failed(m: Member, ev: Event) -> None:
    assert isinstance(ev, TopicNamesLookupFailed)
    m.names_lookup.failed(m.now)


def on_session_timeout(m: Member, ev: Event) -> None:
    assert isinstance(ev, SessionTimeoutLearned)
    m.session_lookup.succeeded()
    m.session_lookup.done = True
    if ev.session_timeout_ms > 0:
        m.session_timeout = ev.session_timeout_ms / 1000


def on_session_lookup_failed(m: Member, ev: Event) -> None:
    assert isinstance(ev, SessionTimeoutLookupFailed)
    m.session_lookup.failed(m.now)


def on_broker_incompatible(m: Member, ev: Event) -> None:
    assert isinstance(ev, BrokerIncompatible)
    why = f"{ev.api}: the broker does not support it: {ev.error}"
    m._report(None, why, fatal=False, exception=ev.error)


def ignore(m: Member, ev: Event) -> None:
    """Nothing to do (a timer only makes the step run; FATAL swallows late news)."""


def add_plumbing(
    transitions: dict[
        tuple[StateT, type[Event]], table.Transition[StateT, Callable[[MemberT, Event], None]]
    ],
    states: Iterable[StateT],
    fatal: StateT,
) -> None:
    """Enter the shared plumbing handlers in every state but ``fatal``, which swallows
    those events; none of them moves the machine.  A machine may override an entry."""
    shared: dict[type[Event], Callable[[MemberT, Event], None]] = {
        CoordinatorFound: on_coordinator_found,
        CoordinatorLookupFailed: on_coordinator_lookup_failed,
        TopicNamesResolved: on_topic_names,
        TopicNamesLookupFailed: on_topic_names_failed,
        SessionTimeoutLearned: on_session_timeout,
        SessionTimeoutLookupFailed: on_session_lookup_failed,
        TimerFired: ignore,
        BrokerIncompatible: on_broker_incompatible,
    }
    for state in states:
        for event_type, handler in shared.items():
            transitions[(state, event_type)] = table.Transition(
                ignore if state is fatal else handler, frozenset()
            )
