"""The share-group (KIP-932) membership machine, step by step: events in, actions out.

No event loop and no broker; time is a number.  The cartesian test at the end feeds
every event of the vocabulary in every state and checks that each is either a declared
move or the machine's protocol error.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from aiogroup._membership import events as E
from aiogroup._membership import share_group as sg
from aiogroup._membership.actions import (
    Action,
    DropAcquiredRecords,
    FindCoordinator,
    LookupSessionTimeout,
    RaiseToApplication,
    RequestMetadata,
    SendShareGroupHeartbeat,
    SetAssignment,
)
from aiogroup._membership.codes import ErrorCode
from aiogroup._membership.share_group import (
    ShareHeartbeatReaction,
    ShareMembership,
    ShareMembershipError,
    ShareMemberState,
)
from tests.unit.membership.test_purity import PACKAGE_DIR, SCRIPT

S = ShareMemberState
A = uuid.UUID(int=0xA)
B = uuid.UUID(int=0xB)


def ok(
    epoch: int, assignment: dict[uuid.UUID, tuple[int, ...]] | None = None, interval: int = 1000
) -> E.ShareGroupHeartbeatResponseReceived:
    return E.ShareGroupHeartbeatResponseReceived(
        0, member_epoch=epoch, heartbeat_interval_ms=interval, assignment=assignment
    )


def error(code: int, message: str | None = None) -> E.ShareGroupHeartbeatResponseReceived:
    return E.ShareGroupHeartbeatResponseReceived(code, member_epoch=-1, error_message=message)


class Driver:
    def __init__(self, **kwargs: object) -> None:
        self.now = 0.0
        self.m = ShareMembership("g", "m-1", **kwargs)  # type: ignore[arg-type]

    def send(self, event: E.Event) -> list[Action]:
        return self.m.handle(event, self.now)

    def at(self, t: float, event: E.Event | None = None) -> list[Action]:
        self.now = t
        return self.send(event or E.TimerFired())

    @property
    def state(self) -> ShareMemberState:
        return self.m.state


def of(actions: list[Action], kind: type[Action]) -> list[Action]:
    return [a for a in actions if isinstance(a, kind)]


def joined(assignment: dict[uuid.UUID, tuple[int, ...]] | None = None, **kwargs: object) -> Driver:
    """A member STABLE at epoch 1 with ``assignment`` (default: a0, a1) installed."""
    d = Driver(**kwargs)
    d.send(E.TopicNamesResolved({A: "a", B: "b"}))
    assert of(d.send(E.Subscribed(frozenset({"a"}))), FindCoordinator)
    d.send(E.CoordinatorFound(1))
    d.send(ok(1, {A: (0, 1)} if assignment is None else assignment))
    assert d.state is S.STABLE
    return d


# -- joining -------------------------------------------------------------------------------


def test_join_finds_the_coordinator_then_heartbeats_epoch_0_with_its_own_member_id() -> None:
    d = Driver()
    assert d.state is S.UNSUBSCRIBED
    out = d.send(E.Subscribed(frozenset({"b", "a"})))
    assert d.state is S.JOINING
    assert out == [FindCoordinator("share heartbeat in JOINING")]
    out = d.send(E.CoordinatorFound(3))
    assert out == [SendShareGroupHeartbeat("m-1", 0, ("a", "b"))]
    # One heartbeat in flight at most.
    assert d.send(E.TimerFired()) == []


def test_the_assignment_is_named_then_installed_and_the_member_is_stable() -> None:
    d = Driver()
    d.send(E.Subscribed(frozenset({"a"})))
    d.send(E.CoordinatorFound(1))
    out = d.send(ok(1, {A: (0, 1)}, interval=2000))
    assert d.state is S.RECONCILING
    assert out == [RequestMetadata(frozenset({A}))]
    out = d.send(E.TopicNamesResolved({A: "a"}))
    assert d.state is S.STABLE
    assert out == [SetAssignment(frozenset({("a", 0), ("a", 1)}))]
    assert d.m.joined and d.m.in_group and d.m.member_epoch == 1
    # Heartbeats follow at the broker's interval, without the subscription (unchanged).
    assert d.at(1.9) == []
    assert d.at(2.0) == [SendShareGroupHeartbeat("m-1", 1, None)]


def test_partly_named_assignment_installs_what_is_named() -> None:
    d = Driver()
    d.send(E.TopicNamesResolved({A: "a"}))
    d.send(E.Subscribed(frozenset({"a", "b"})))
    d.send(E.CoordinatorFound(1))
    out = d.send(ok(1, {A: (0,), B: (2,)}))
    assert d.state is S.RECONCILING
    assert SetAssignment(frozenset({("a", 0)})) in out
    assert RequestMetadata(frozenset({B})) in out
    # The names lookup fails: asked again after the backoff, not before.
    assert d.send(E.TopicNamesLookupFailed(OSError("x"))) == []
    assert d.m.next_deadline() == pytest.approx(0.1)
    assert of(d.at(0.1), RequestMetadata)
    assert d.send(E.TopicNamesResolved({B: "b"})) == [
        SetAssignment(frozenset({("a", 0), ("b", 2)}))
    ]
    assert d.state is S.STABLE


def test_an_empty_first_assignment_makes_the_member_stable() -> None:
    d = Driver()
    d.send(E.Subscribed(frozenset({"a"})))
    d.send(E.CoordinatorFound(1))
    assert d.send(ok(1, {})) == [SetAssignment(frozenset())]
    assert d.state is S.STABLE


def test_a_new_assignment_replaces_the_old_one_and_none_means_unchanged() -> None:
    d = joined()
    d.at(1.0)
    assert d.send(ok(2, None)) == []
    assert d.m.assignment() == {("a", 0), ("a", 1)}
    d.at(2.0)
    assert d.send(ok(3, {A: (1,), B: (0,)})) == [SetAssignment(frozenset({("a", 1), ("b", 0)}))]
    assert d.m.member_epoch == 3


def test_subscription_change_is_sent_on_the_next_step() -> None:
    d = joined()
    out = d.send(E.Subscribed(frozenset({"a", "b"})))
    assert out == [SendShareGroupHeartbeat("m-1", 1, ("a", "b"))]
    d.send(ok(1))
    assert d.at(0.5) == []  # unchanged since: nothing until the interval


def test_a_regex_subscription_is_refused_with_a_clear_error() -> None:
    d = Driver()
    (raised,) = d.send(E.Subscribed(regex="a.*"))
    assert isinstance(raised, RaiseToApplication) and "regex" in raised.message
    assert d.state is S.UNSUBSCRIBED


# -- the delivery gate -------------------------------------------------------------------


def test_the_gate_is_the_last_proving_send_plus_the_interval_until_the_session_is_known() -> None:
    d = Driver(learn_session_timeout=True)
    assert d.m.membership_valid_until() is None
    d.send(E.TopicNamesResolved({A: "a"}))
    # The session timeout is asked for as soon as the member joins.
    assert LookupSessionTimeout() in d.send(E.Subscribed(frozenset({"a"})))
    d.now = 0.2
    d.send(E.CoordinatorFound(1))  # the join leaves at 0.2
    d.now = 0.3
    d.send(ok(1, {A: (0,)}, interval=1000))
    assert d.m.membership_valid_until() == pytest.approx(1.2)
    d.send(E.SessionTimeoutLearned(5000))
    assert d.m.membership_valid_until() == pytest.approx(5.2)
    # A heartbeat sent at 1.3 but never answered proves nothing: the gate stays.
    assert of(d.at(1.3), SendShareGroupHeartbeat)
    d.send(E.ShareGroupHeartbeatFailed("timeout"))
    assert d.m.membership_valid_until() == pytest.approx(5.2)


def test_the_session_is_learned_again_after_a_fence() -> None:
    d = joined(learn_session_timeout=True)
    d.send(E.SessionTimeoutLearned(45000))
    d.at(1.0)
    out = d.send(error(ErrorCode.UNKNOWN_MEMBER_ID))
    assert LookupSessionTimeout() in out  # the group's config may have changed meanwhile
    d.send(E.SessionTimeoutLearned(3000))
    assert d.m.session_timeout == 3.0


def test_the_session_lookup_gives_up_after_a_few_tries() -> None:
    d = joined(learn_session_timeout=True)
    for _ in range(sg.SESSION_LOOKUP_ATTEMPTS):
        d.send(E.SessionTimeoutLookupFailed(OSError("no")))
        deadline = d.m.session_lookup.deadline()
        if deadline:
            assert of(d.at(deadline[0]), LookupSessionTimeout)
    assert d.m.session_lookup.done
    assert d.m.session_timeout is None


# -- fences and failures -------------------------------------------------------------------


@pytest.mark.parametrize("code", [ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH])
def test_a_fence_drops_the_acquired_records_and_rejoins_at_epoch_0(code: int) -> None:
    d = joined()
    d.at(1.0)
    out = d.send(error(code))
    assert out[0] == DropAcquiredRecords(f"fenced by the coordinator ({ErrorCode(code).name})")
    assert SetAssignment(frozenset()) in out
    # The rejoin goes out in the same step, with the same member id (KIP-1082).
    assert out[-1] == SendShareGroupHeartbeat("m-1", 0, ("a",))
    assert d.state is S.JOINING
    assert d.m.membership_valid_until() is None
    assert (S.STABLE, S.FENCED, "ShareGroupHeartbeatResponseReceived") in d.m.trace


def test_coordinator_errors_look_it_up_again_with_a_doubling_backoff() -> None:
    d = joined(retry_backoff=0.1, retry_backoff_max=1.0)
    d.at(1.0)
    assert d.send(error(ErrorCode.NOT_COORDINATOR)) == []
    assert not d.m.coordinator_known
    waits = []
    for _ in range(6):
        due = d.m.next_deadline()
        assert due is not None
        waits.append(round(due - d.now, 3))
        assert of(d.at(due), FindCoordinator)
        d.send(E.CoordinatorLookupFailed(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    assert waits == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]


def test_a_heartbeat_answered_resets_the_backoff() -> None:
    d = joined(retry_backoff=0.1, retry_backoff_max=1.0)
    for t in (1.0, 2.0):
        d.at(t)
        d.send(error(ErrorCode.COORDINATOR_NOT_AVAILABLE))
        due = d.m.next_deadline()
        assert due is not None
        d.at(due)
        # Found again, the heartbeat goes out at once - but refused again: longer wait.
        assert of(d.send(E.CoordinatorFound(2)), SendShareGroupHeartbeat)
    assert d.m.coordinator_lookup.failures == 2
    d.send(ok(1))
    assert d.m.coordinator_lookup.failures == 0


def test_a_lost_connection_looks_the_coordinator_up_again() -> None:
    d = joined()
    d.at(1.0)
    d.send(E.ShareGroupHeartbeatFailed("connection"))
    assert not d.m.coordinator_known and d.state is S.STABLE
    assert of(d.at(1.1), FindCoordinator)


def test_load_in_progress_retries_the_heartbeat_after_the_backoff() -> None:
    d = joined()
    d.at(1.0)
    assert d.send(error(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)) == []
    assert d.m.coordinator_known
    assert of(d.at(1.1), SendShareGroupHeartbeat)


def test_topic_authorization_is_reported_and_the_member_keeps_going() -> None:
    d = joined()
    d.at(1.0)
    (raised,) = d.send(error(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "t"))
    assert isinstance(raised, RaiseToApplication) and not raised.fatal
    assert raised.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert d.state is S.STABLE


@pytest.mark.parametrize(
    "code", [ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.INCONSISTENT_GROUP_PROTOCOL]
)
def test_a_group_id_of_another_group_type_is_fatal_and_named(code: int) -> None:
    d = Driver()
    d.send(E.Subscribed(frozenset({"a"})))
    d.send(E.CoordinatorFound(1))
    out = d.send(error(code, "Group g is not a share group."))
    raised = of(out, RaiseToApplication)[0]
    assert isinstance(raised, RaiseToApplication) and raised.fatal
    assert "'g' is in use by a classic or consumer group" in raised.message
    assert "Group g is not a share group." in raised.message
    assert DropAcquiredRecords("the member failed") in out
    assert d.state is S.FATAL and d.m.finished and d.m.failed


def test_unsupported_version_names_share_groups() -> None:
    d = Driver()
    d.send(E.Subscribed(frozenset({"a"})))
    d.send(E.CoordinatorFound(1))
    out = d.send(error(ErrorCode.UNSUPPORTED_VERSION))
    assert "does not serve share groups" in of(out, RaiseToApplication)[0].message  # type: ignore[attr-defined]


def test_an_undocumented_code_is_fatal() -> None:
    assert sg.share_heartbeat_reaction(9999) is ShareHeartbeatReaction.FATAL
    d = joined()
    d.at(1.0)
    out = d.send(error(9999))
    assert d.state is S.FATAL
    assert SetAssignment(frozenset()) in out


def test_the_routine_failing_ends_the_member() -> None:
    d = joined()
    out = d.send(E.RoutineFailed("boom", ValueError("boom")))
    assert d.state is S.FATAL
    assert of(out, DropAcquiredRecords)
    # FATAL swallows what may still come.
    assert d.send(E.CloseRequested()) == []
    assert d.send(E.ShareGroupHeartbeatFailed("connection")) == []


def test_broker_incompatible_is_reported_not_fatal() -> None:
    d = joined()
    (raised,) = d.send(E.BrokerIncompatible("Metadata", ValueError("old")))
    assert isinstance(raised, RaiseToApplication) and not raised.fatal


# -- leaving -------------------------------------------------------------------------------


def test_close_drops_everything_sends_epoch_minus_1_and_finishes_on_any_answer() -> None:
    d = joined()
    out = d.send(E.CloseRequested())
    assert out == [
        DropAcquiredRecords("leaving the group"),
        SetAssignment(frozenset()),
        SendShareGroupHeartbeat("m-1", -1, None),
    ]
    assert d.state is S.LEAVING and not d.m.finished
    d.send(error(ErrorCode.UNKNOWN_MEMBER_ID))
    assert d.state is S.UNSUBSCRIBED and d.m.finished


def test_close_while_the_leave_gets_no_answer_still_finishes() -> None:
    d = joined()
    d.send(E.CloseRequested())
    d.send(E.ShareGroupHeartbeatFailed("connection"))
    assert d.m.finished


def test_close_before_joining_sends_nothing() -> None:
    d = Driver()
    d.send(E.Subscribed(frozenset({"a"})))
    out = d.send(E.CloseRequested())
    assert out == [DropAcquiredRecords("leaving the group")]
    assert d.m.finished


def test_close_while_the_join_is_in_flight_waits_for_it_then_leaves() -> None:
    d = Driver()
    d.send(E.Subscribed(frozenset({"a"})))
    d.send(E.CoordinatorFound(1))  # join in flight
    d.send(E.CloseRequested())
    assert d.state is S.LEAVING
    out = d.send(ok(1, {A: (0,)}))
    assert out == [SendShareGroupHeartbeat("m-1", -1, None)]
    d.send(ok(-1))
    assert d.m.finished


def test_unsubscribe_then_subscribe_while_leaving_rejoins() -> None:
    d = joined()
    d.send(E.UnsubscribeRequested())
    d.send(E.Subscribed(frozenset({"b"})))
    out = d.send(ok(-1))
    assert d.state is S.JOINING
    assert out == [SendShareGroupHeartbeat("m-1", 0, ("b",))]


def test_unsubscribed_member_is_not_finished_and_can_subscribe_again() -> None:
    d = joined()
    d.send(E.UnsubscribeRequested())
    d.send(ok(-1))
    assert d.state is S.UNSUBSCRIBED and not d.m.finished
    assert of(d.send(E.Subscribed(frozenset({"a"}))), SendShareGroupHeartbeat)


def test_constructor_checks() -> None:
    with pytest.raises(ValueError, match="group_id"):
        ShareMembership("", "m")
    with pytest.raises(ValueError, match="KIP-1082"):
        ShareMembership("g", "")
    with pytest.raises(ValueError, match="backoff"):
        ShareMembership("g", "m", retry_backoff=2.0, retry_backoff_max=1.0)


# -- every pair --------------------------------------------------------------------------


def _in(state: ShareMemberState) -> Driver:
    if state is S.UNSUBSCRIBED:
        return Driver()
    if state is S.JOINING:
        d = Driver()
        d.send(E.Subscribed(frozenset({"a"})))
        return d
    if state is S.RECONCILING:
        d = Driver()
        d.send(E.Subscribed(frozenset({"a"})))
        d.send(E.CoordinatorFound(1))
        d.send(ok(1, {A: (0,)}))
        return d
    if state is S.STABLE:
        return joined()
    if state is S.LEAVING:
        d = joined()
        d.send(E.CloseRequested())
        return d
    if state is S.FATAL:
        d = joined()
        d.send(error(9999))
        return d
    # FENCED is never a resting state: entered and left in one step.
    d = joined()
    d.m.state = S.FENCED
    return d


SAMPLES: list[E.Event] = [
    E.Subscribed(frozenset({"a"})),
    E.UnsubscribeRequested(),
    E.CloseRequested(),
    E.CoordinatorFound(1),
    E.CoordinatorLookupFailed(15),
    ok(2, {A: (0,)}),
    error(ErrorCode.FENCED_MEMBER_EPOCH),
    error(ErrorCode.NOT_COORDINATOR),
    error(9999),
    E.ShareGroupHeartbeatFailed("connection"),
    E.TopicNamesResolved({A: "a"}),
    E.TopicNamesLookupFailed(OSError("x")),
    E.SessionTimeoutLearned(3000),
    E.SessionTimeoutLookupFailed(OSError("x")),
    E.TimerFired(),
    E.BrokerIncompatible("Metadata", ValueError("x")),
    E.RoutineFailed("boom", ValueError("boom")),
    # Other protocols' events: refused here.
    E.ConsumerGroupHeartbeatResponseReceived(0),
    E.HeartbeatFailed("connection"),
    E.ApplicationPolled(0.0),
]


@pytest.mark.parametrize("state", list(S), ids=lambda s: s.value)
@pytest.mark.parametrize("event", SAMPLES, ids=lambda e: type(e).__name__)
def test_every_pair_is_a_declared_move_or_the_protocol_error(
    state: ShareMemberState, event: E.Event
) -> None:
    d = _in(state)
    assert d.state is state
    if (state, type(event)) not in sg.EVENT_TRANSITIONS:
        with pytest.raises(ShareMembershipError, match="is not valid in state"):
            d.send(event)
        assert d.state is S.FATAL
        return
    out = d.send(event)
    assert all(type(a) in sg.ACTION_TYPES for a in out)
    # A heartbeat or lookup at most once in flight; deadlines are in the future or now.
    assert len(of(out, SendShareGroupHeartbeat)) <= 1
    due = d.m.next_deadline()
    assert due is None or due >= 0
    assert d.state is not S.FENCED  # transient


def test_every_event_type_of_the_machine_is_sampled() -> None:
    assert set(sg.EVENT_TYPES) <= {type(e) for e in SAMPLES}


def test_the_diagram_is_drawn_from_the_tables() -> None:
    diagram = sg.mermaid_diagram()
    assert diagram.startswith("stateDiagram-v2")
    assert "FENCED --> JOINING: [acquired records dropped]" in diagram
    assert "STABLE --> LEAVING: CloseRequested, UnsubscribeRequested" in diagram


def test_the_share_machine_imports_no_io_modules() -> None:
    script = SCRIPT.replace(
        "import aiogroup._membership.machine as machine",
        "import aiogroup._membership.share_group as machine",
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(PACKAGE_DIR)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "stateDiagram-v2"
