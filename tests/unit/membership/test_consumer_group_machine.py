"""The consumer-protocol machine driven step by step: whole state and exact actions.

No event loop, no broker: events in, actions out (h11 style).
"""

from __future__ import annotations

import uuid

import pytest

from aiogroup._membership import actions as acts
from aiogroup._membership import consumer_group as cg
from aiogroup._membership import events as E
from aiogroup._membership.actions import (
    FindCoordinator,
    InvokeOnPartitionsAssigned,
    InvokeOnPartitionsLost,
    InvokeOnPartitionsRevoked,
    RaiseToApplication,
    RequestMetadata,
    SendConsumerGroupHeartbeat,
    SetAssignment,
)
from aiogroup._membership.consumer_group import (
    ConsumerMembership,
    ConsumerMembershipError,
    ConsumerMemberState,
)
from aiogroup._membership.events import (
    ApplicationPolled,
    CloseRequested,
    ConsumerGroupHeartbeatFailed,
    ConsumerGroupHeartbeatResponseReceived,
    CoordinatorFound,
    CoordinatorLookupFailed,
    Listener,
    ListenerCompleted,
    Subscribed,
    TimerFired,
    TopicNamesResolved,
    UnsubscribeRequested,
)
from aiogroup.structs import TopicPartition

S = ConsumerMemberState
A = uuid.UUID(int=0xA)
B = uuid.UUID(int=0xB)
NAMES = {A: "a", B: "b"}


def tps(*pairs: tuple[str, int]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t, p) for t, p in pairs)


def ok(
    epoch: int, assignment: dict[uuid.UUID, tuple[int, ...]] | None = None
) -> ConsumerGroupHeartbeatResponseReceived:
    return ConsumerGroupHeartbeatResponseReceived(
        0, member_epoch=epoch, heartbeat_interval_ms=3000, assignment=assignment
    )


def error(code: int, message: str | None = None) -> ConsumerGroupHeartbeatResponseReceived:
    return ConsumerGroupHeartbeatResponseReceived(code, error_message=message)


class Driver:
    """A member plus a clock; ``send`` feeds one event and returns its actions."""

    def __init__(self, **kwargs: object) -> None:
        self.now = 0.0
        self.m = ConsumerMembership("g", "m-1", **kwargs)  # type: ignore[arg-type]

    def send(self, event: E.Event) -> list[acts.Action]:
        return self.m.handle(event, self.now)

    @property
    def state(self) -> ConsumerMemberState:
        return self.m.state

    def join(self, assignment: dict[uuid.UUID, tuple[int, ...]] | None = None) -> None:
        """Subscribe, find the coordinator, and have the join answered with epoch 1."""
        self.send(TopicNamesResolved(NAMES))
        assert self.send(Subscribed(frozenset({"a", "b"}))) == [
            FindCoordinator("heartbeat in JOINING")
        ]
        out = self.send(CoordinatorFound(1))
        assert [type(a) for a in out] == [SendConsumerGroupHeartbeat]
        self.send(ok(1, assignment if assignment is not None else {}))

    def stable_with(self, assignment: dict[uuid.UUID, tuple[int, ...]]) -> None:
        self.join(assignment)
        assert self.state is S.RECONCILING
        self.send(ListenerCompleted(Listener.ASSIGNED))
        assert self.state is S.ACKNOWLEDGING
        self.send(ok(1))
        assert self.state is S.STABLE


def test_join_sends_full_state_with_empty_owned_partitions() -> None:
    d = Driver(server_assignor="uniform", instance_id="i-1", rebalance_timeout_ms=60000)
    d.send(Subscribed(frozenset({"b", "a"})))
    assert d.state is S.JOINING
    (hb,) = d.send(CoordinatorFound(1))
    assert hb == SendConsumerGroupHeartbeat(
        member_id="m-1",
        member_epoch=0,
        instance_id="i-1",
        rebalance_timeout_ms=60000,
        subscribed_topic_names=("a", "b"),
        subscribed_topic_regex=None,
        server_assignor="uniform",
        topic_partitions={},
    )
    # One heartbeat in flight at most.
    assert d.send(TimerFired()) == []


def test_first_assignment_is_assigned_then_acknowledged() -> None:
    d = Driver()
    d.join({A: (0, 1)})
    # Fetcher first, then the listener; heartbeats not urgent while it runs.
    assert d.state is S.RECONCILING
    assert d.m.member_epoch == 1
    assert d.m.heartbeat_interval == 3.0
    d.now = 3.0
    (hb,) = d.send(TimerFired())
    assert (
        isinstance(hb, SendConsumerGroupHeartbeat) and hb.topic_partitions is None
    )  # still reconciling
    assert hb.subscribed_topic_names is None and hb.rebalance_timeout_ms == -1  # unchanged
    d.send(ok(1))
    out = d.send(ListenerCompleted(Listener.ASSIGNED))
    assert d.state is S.ACKNOWLEDGING
    (ack,) = out
    assert isinstance(ack, SendConsumerGroupHeartbeat) and ack.topic_partitions == {A: (0, 1)}
    d.send(ok(1))
    assert d.state is S.STABLE
    assert d.m.owned_partitions() == tps(("a", 0), ("a", 1))


def test_first_assignment_actions_in_order() -> None:
    d = Driver()
    d.send(TopicNamesResolved(NAMES))
    d.send(Subscribed(frozenset({"a"})))
    d.send(CoordinatorFound(1))
    out = d.send(ok(1, {A: (1, 0)}))
    assert out == [
        SetAssignment(tps(("a", 0), ("a", 1))),
        InvokeOnPartitionsAssigned(tps(("a", 0), ("a", 1)), 1),
    ]


def test_empty_assignment_still_calls_assigned_once() -> None:
    d = Driver()
    d.send(TopicNamesResolved(NAMES))
    d.send(Subscribed(frozenset({"a"})))
    d.send(CoordinatorFound(1))
    out = d.send(ok(1, {}))
    assert out == [SetAssignment(frozenset()), InvokeOnPartitionsAssigned(frozenset(), 1)]
    out = d.send(ListenerCompleted(Listener.ASSIGNED))
    assert d.state is S.ACKNOWLEDGING
    assert [a.topic_partitions for a in out if isinstance(a, SendConsumerGroupHeartbeat)] == [{}]
    d.send(ok(1))
    assert d.state is S.STABLE


def test_new_target_revokes_first_then_assigns_heartbeats_flowing() -> None:
    d = Driver()
    d.stable_with({A: (0, 1)})
    d.now = 3.0
    d.send(TimerFired())
    out = d.send(ok(2, {A: (1,), B: (0,)}))
    assert d.state is S.RECONCILING
    assert out == [InvokeOnPartitionsRevoked(tps(("a", 0)), commit_first=True)]
    # Revoke is slow: heartbeats keep going at the interval, reporting the old set.
    for t in (6.0, 9.0, 12.0):
        d.now = t
        (hb,) = d.send(TimerFired())
        assert isinstance(hb, SendConsumerGroupHeartbeat) and hb.member_epoch == 2
        assert hb.topic_partitions is None
        d.send(ok(2))
        assert d.state is S.RECONCILING
    out = d.send(ListenerCompleted(Listener.REVOKED))
    assert out == [
        SetAssignment(tps(("a", 1), ("b", 0))),
        InvokeOnPartitionsAssigned(tps(("b", 0)), 2),
    ]
    out = d.send(ListenerCompleted(Listener.ASSIGNED))
    assert d.state is S.ACKNOWLEDGING
    (ack,) = out
    assert isinstance(ack, SendConsumerGroupHeartbeat) and ack.topic_partitions == {
        A: (1,),
        B: (0,),
    }
    d.send(ok(2))
    assert d.state is S.STABLE


def test_target_changing_mid_reconciliation_is_reconciled_next() -> None:
    d = Driver(auto_commit=False)
    d.stable_with({A: (0, 1)})
    d.now = 3.0
    d.send(TimerFired())
    d.send(ok(2, {A: (1,)}))
    d.now = 6.0
    d.send(TimerFired())
    d.send(ok(3, {A: (1,), B: (0,)}))  # new target while revoking
    assert d.send(ListenerCompleted(Listener.REVOKED)) == [
        SetAssignment(tps(("a", 1))),
        InvokeOnPartitionsAssigned(frozenset(), 3),
    ]
    out = d.send(ListenerCompleted(Listener.ASSIGNED))
    # The first reconciliation is done; the next starts at once from ACKNOWLEDGING.
    assert d.state is S.RECONCILING
    assert out == [
        SetAssignment(tps(("a", 1), ("b", 0))),
        InvokeOnPartitionsAssigned(tps(("b", 0)), 3),
    ]


def test_unresolved_topic_ids_ask_for_metadata_and_wait() -> None:
    d = Driver()
    d.send(TopicNamesResolved({A: "a"}))
    d.send(Subscribed(frozenset({"a", "b"})))
    d.send(CoordinatorFound(1))
    out = d.send(ok(1, {A: (0,), B: (0,)}))
    assert out[0] == RequestMetadata(frozenset({B}))
    assert out[1:] == [SetAssignment(tps(("a", 0))), InvokeOnPartitionsAssigned(tps(("a", 0)), 1)]
    d.send(ListenerCompleted(Listener.ASSIGNED))
    d.send(ok(1))
    assert d.state is S.STABLE
    out = d.send(TopicNamesResolved({B: "b"}))
    assert d.state is S.RECONCILING
    assert out == [
        SetAssignment(tps(("a", 0), ("b", 0))),
        InvokeOnPartitionsAssigned(tps(("b", 0)), 1),
    ]


@pytest.mark.parametrize("code", [110, 25])
def test_fenced_loses_partitions_and_rejoins_with_epoch_zero(code: int) -> None:
    d = Driver()
    d.stable_with({A: (0,)})
    d.now = 3.0
    d.send(TimerFired())
    out = d.send(error(code))
    assert d.state is S.FENCED
    assert out == [InvokeOnPartitionsLost(tps(("a", 0))), SetAssignment(frozenset())]
    assert d.m.member_epoch == 0
    assert not d.m.commit_gate().allowed
    out = d.send(ListenerCompleted(Listener.LOST))
    assert d.state is S.JOINING
    (hb,) = out
    assert (
        isinstance(hb, SendConsumerGroupHeartbeat)
        and hb.member_epoch == 0
        and hb.member_id == "m-1"
    )
    assert hb.topic_partitions == {} and hb.subscribed_topic_names == ("a", "b")


def test_fenced_with_nothing_owned_rejoins_at_once() -> None:
    d = Driver()
    d.send(Subscribed(frozenset({"a"})))
    d.send(CoordinatorFound(1))
    d.send(ok(1))  # joined, no assignment yet: heartbeats now wait for the interval
    assert d.state is S.JOINING and d.m.next_deadline() == 3.0
    d.now = 3.0
    d.send(TimerFired())
    out = d.send(error(110))
    assert d.state is S.JOINING
    assert [type(a) for a in out] == [SendConsumerGroupHeartbeat]


def test_fenced_mid_revoke_waits_for_the_listener_then_loses_the_rest() -> None:
    d = Driver(auto_commit=False)
    d.stable_with({A: (0, 1)})
    d.now = 3.0
    d.send(TimerFired())
    d.send(ok(2, {A: (1,)}))
    d.now = 6.0
    d.send(TimerFired())
    assert d.send(error(110)) == [SetAssignment(frozenset())]
    assert d.state is S.FENCED
    out = d.send(ListenerCompleted(Listener.REVOKED))
    assert out == [InvokeOnPartitionsLost(tps(("a", 1)))]
    d.send(ListenerCompleted(Listener.LOST))
    assert d.state is S.JOINING


def test_fenced_mid_assign_loses_the_goal() -> None:
    d = Driver()
    d.join({A: (0,)})
    d.now = 3.0
    d.send(TimerFired())
    d.send(error(25))
    assert d.state is S.FENCED
    out = d.send(ListenerCompleted(Listener.ASSIGNED))
    assert out == [InvokeOnPartitionsLost(tps(("a", 0)))]


@pytest.mark.parametrize(("instance_id", "epoch"), [(None, -1), ("i-1", -2)])
@pytest.mark.parametrize("leave", [UnsubscribeRequested(), CloseRequested()])
def test_leave_revokes_then_sends_leave_epoch(
    instance_id: str | None, epoch: int, leave: E.Event
) -> None:
    d = Driver(instance_id=instance_id)
    d.stable_with({A: (0,)})
    out = d.send(leave)
    assert d.state is S.PREPARE_LEAVING
    # The fetcher keeps its assignment until the revoke (and its auto-commit) returned.
    assert out == [InvokeOnPartitionsRevoked(tps(("a", 0)), True)]
    clear, hb = d.send(ListenerCompleted(Listener.REVOKED))
    assert clear == SetAssignment(frozenset())
    assert d.state is S.LEAVING
    assert hb == SendConsumerGroupHeartbeat("m-1", epoch, instance_id)
    d.send(error(25))  # whatever the answer
    assert d.state is S.UNSUBSCRIBED
    assert d.m.finished == isinstance(leave, CloseRequested)


def test_leave_while_a_heartbeat_is_in_flight_waits_for_it() -> None:
    d = Driver()
    d.stable_with({})
    d.now = 3.0
    d.send(TimerFired())
    assert d.send(CloseRequested()) == []
    assert d.state is S.LEAVING
    (hb,) = d.send(ok(1))
    assert isinstance(hb, SendConsumerGroupHeartbeat) and hb.member_epoch == -1
    d.send(ConsumerGroupHeartbeatFailed("connection", 1, "connection lost"))
    assert d.state is S.UNSUBSCRIBED and d.m.finished


def test_fenced_while_leaving_skips_the_leave_heartbeat() -> None:
    d = Driver()
    d.stable_with({A: (0,)})
    d.now = 3.0
    d.send(TimerFired())
    d.send(UnsubscribeRequested())
    assert d.send(error(110)) == []  # no epoch-0 heartbeat: that would be a join
    assert d.send(ListenerCompleted(Listener.REVOKED)) == [SetAssignment(frozenset())]
    assert d.state is S.UNSUBSCRIBED


def test_close_before_the_join_is_answered() -> None:
    d = Driver()
    d.send(Subscribed(frozenset({"a"})))
    d.send(CoordinatorFound(1))
    assert d.send(CloseRequested()) == []
    assert d.state is S.PREPARE_LEAVING
    # The join is answered: now a member, so it leaves properly.
    (hb,) = d.send(ok(1, {A: (0,)}))
    assert (
        d.state is S.LEAVING
        and isinstance(hb, SendConsumerGroupHeartbeat)
        and hb.member_epoch == -1
    )


def test_close_before_any_heartbeat_needs_no_leave() -> None:
    d = Driver()
    d.send(Subscribed(frozenset({"a"})))
    assert d.send(CloseRequested()) == []
    assert d.state is S.UNSUBSCRIBED and d.m.finished


def test_leave_mid_assign_revokes_the_goal() -> None:
    d = Driver()
    d.join({A: (0,)})
    d.send(UnsubscribeRequested())
    out = d.send(ListenerCompleted(Listener.ASSIGNED))
    assert out == [InvokeOnPartitionsRevoked(tps(("a", 0)), True)]


def test_resubscribe_after_unsubscribe_rejoins() -> None:
    d = Driver()
    d.stable_with({})
    d.send(UnsubscribeRequested())
    d.send(error(0))
    assert d.state is S.UNSUBSCRIBED
    (hb,) = d.send(Subscribed(frozenset({"b"})))
    assert d.state is S.JOINING
    assert isinstance(hb, SendConsumerGroupHeartbeat) and hb.member_epoch == 0
    assert hb.subscribed_topic_names == ("b",)


def test_subscription_change_goes_out_with_the_next_heartbeat() -> None:
    d = Driver()
    d.stable_with({})
    assert d.send(Subscribed(frozenset({"a"}))) == []
    d.now = 3.0
    (hb,) = d.send(TimerFired())
    assert isinstance(hb, SendConsumerGroupHeartbeat) and hb.subscribed_topic_names == ("a",)


def test_regex_subscription_is_sent_instead_of_names() -> None:
    d = Driver()
    d.send(Subscribed(regex="t-.*"))
    (hb,) = d.send(CoordinatorFound(1))
    assert isinstance(hb, SendConsumerGroupHeartbeat)
    assert hb.subscribed_topic_regex == "t-.*" and hb.subscribed_topic_names is None


def test_subscription_validation() -> None:
    with pytest.raises(ValueError, match="not both"):
        Subscribed(frozenset({"a"}), regex="a")
    with pytest.raises(ValueError, match="at least one"):
        Subscribed()


def test_poll_timeout_leaves_and_the_next_poll_rejoins() -> None:
    d = Driver(max_poll_interval=10.0)
    d.stable_with({A: (0,)})
    assert d.m.next_deadline() == 3.0
    d.now = 3.0
    d.send(TimerFired())
    d.send(ok(1))
    d.now = 10.0
    out = d.send(TimerFired())
    assert d.state is S.PREPARE_LEAVING
    assert out[:2] == [
        acts.LogWarning(
            "the application has not polled (getone/getmany/getmany_arrow/async for) for "
            "10.0s, longer than max_poll_interval_ms (10s): leaving the group so its "
            "partitions go to live members; the next poll rejoins"
        ),
        InvokeOnPartitionsRevoked(tps(("a", 0)), True),
    ]
    # The heartbeat due at 6.0 went out with the revocation; the leave waits for its answer.
    assert d.send(ListenerCompleted(Listener.REVOKED)) == [SetAssignment(frozenset())]
    assert d.state is S.LEAVING
    (hb,) = d.send(ok(1))
    assert isinstance(hb, SendConsumerGroupHeartbeat) and hb.member_epoch == -1
    d.send(ok(1))
    assert d.state is S.STALE and not d.m.finished and d.m.awaiting_poll
    d.now = 12.0
    warning, hb = d.send(ApplicationPolled(d.now))
    assert warning == acts.LogWarning(
        "the application polled again 2.0s after this member left its group because "
        "max_poll_interval_ms (10s) passed without a poll: rejoining"
    )
    assert d.state is S.JOINING and not d.m.awaiting_poll
    assert isinstance(hb, SendConsumerGroupHeartbeat) and hb.member_epoch == 0


def test_coordinator_errors() -> None:
    d = Driver()
    d.stable_with({})
    d.now = 3.0
    d.send(TimerFired())
    assert d.send(error(16)) == []  # NOT_COORDINATOR: look it up again after a backoff
    d.now = 3.1
    assert d.send(TimerFired()) == [FindCoordinator("heartbeat in STABLE")]
    (hb,) = d.send(CoordinatorFound(1))
    # An error resets what was "sent": the next heartbeat repeats the full state.
    assert isinstance(hb, SendConsumerGroupHeartbeat) and hb.subscribed_topic_names == ("a", "b")
    assert hb.topic_partitions == {}
    d.send(error(14))  # COORDINATOR_LOAD_IN_PROGRESS: back off
    assert d.m.next_deadline() == pytest.approx(3.2)
    d.now = 3.25
    (hb,) = d.send(TimerFired())
    assert d.send(ConsumerGroupHeartbeatFailed("connection", 1, "connection reset")) == []
    assert d.m.coordinator_known is False
    assert d.m.next_deadline() == pytest.approx(3.35)
    d.now = 3.4
    (find,) = d.send(TimerFired())
    assert isinstance(find, FindCoordinator)
    out = d.send(CoordinatorLookupFailed(15))
    assert out == [] and d.m.next_deadline() == pytest.approx(3.5)
    d.now = 3.5
    assert [type(a) for a in d.send(TimerFired())] == [FindCoordinator]


def test_fatal_codes_name_the_gap_and_lose_partitions() -> None:
    d = Driver()
    d.stable_with({A: (0,)})
    d.now = 3.0
    d.send(TimerFired())
    out = d.send(error(35))
    assert d.state is S.FATAL and d.m.finished
    raise_, lost, clear = out
    assert clear == SetAssignment(frozenset())
    assert isinstance(raise_, RaiseToApplication) and raise_.fatal
    assert "UNSUPPORTED_VERSION" in raise_.message and "group_protocol='classic'" in raise_.message
    assert lost == InvokeOnPartitionsLost(tps(("a", 0)))
    assert d.send(ListenerCompleted(Listener.LOST)) == []
    assert d.send(Subscribed(frozenset({"a"}))) == []


def test_topic_authorization_is_reported_and_heartbeats_continue() -> None:
    d = Driver()
    d.stable_with({})
    d.now = 3.0
    d.send(TimerFired())
    (rep,) = d.send(error(29, "no access to t"))
    assert rep == RaiseToApplication(
        "ConsumerGroupHeartbeat failed with TOPIC_AUTHORIZATION_FAILED: no access to t", 29
    )
    assert d.state is S.STABLE


def test_listener_error_is_reported_and_reconciliation_goes_on() -> None:
    d = Driver()
    d.join({A: (0,)})
    boom = RuntimeError("boom")
    out = d.send(ListenerCompleted(Listener.ASSIGNED, boom))
    assert out[0] == RaiseToApplication(
        "on_partitions_assigned raised: RuntimeError('boom')", None, boom, False
    )
    assert d.state is S.ACKNOWLEDGING


def test_unexpected_listener_completion_is_a_protocol_error() -> None:
    d = Driver()
    d.stable_with({})
    with pytest.raises(ConsumerMembershipError, match="on_partitions_revoked completed"):
        d.send(ListenerCompleted(Listener.REVOKED))
    assert d.state is S.FATAL


def test_commit_gate_follows_membership() -> None:
    d = Driver()
    assert not d.m.commit_gate().allowed
    d.stable_with({A: (0,)})
    gate = d.m.commit_gate()
    assert gate.allowed and gate.generation_id == 1 and gate.member_id == "m-1"
    assert d.m.in_group


def test_member_id_from_the_coordinator_wins() -> None:
    d = Driver()
    d.send(Subscribed(frozenset({"a"})))
    d.send(CoordinatorFound(1))
    d.send(
        ConsumerGroupHeartbeatResponseReceived(
            0, member_epoch=1, heartbeat_interval_ms=5000, member_id="srv"
        )
    )
    assert d.m.member_id == "srv"


def test_constructor_validation() -> None:
    with pytest.raises(ValueError, match="group_id"):
        ConsumerMembership("", "m")
    with pytest.raises(ValueError, match="member_id"):
        ConsumerMembership("g", "")
    with pytest.raises(ValueError, match="positive"):
        ConsumerMembership("g", "m", retry_backoff=0)


def test_mermaid_diagram_draws_both_tables() -> None:
    text = cg.mermaid_diagram()
    assert text.startswith("stateDiagram-v2\n    [*] --> UNSUBSCRIBED")
    assert "RECONCILING --> ACKNOWLEDGING: [reconciled]" in text
    assert "UNSUBSCRIBED --> JOINING: Subscribed" in text


def test_subscribe_again_while_leaving_rejoins_after_the_leave() -> None:
    d = Driver()
    d.stable_with({A: (0,)})
    d.send(UnsubscribeRequested())
    assert d.send(Subscribed(frozenset({"b"}))) == []
    assert d.state is S.PREPARE_LEAVING
    d.send(ListenerCompleted(Listener.REVOKED))
    (hb,) = d.send(ok(1))  # the leave's answer
    assert d.state is S.JOINING
    assert isinstance(hb, SendConsumerGroupHeartbeat) and hb.member_epoch == 0
    assert hb.subscribed_topic_names == ("b",)


def test_close_overtaking_a_revoke_still_takes_the_revoked_out_of_the_fetcher() -> None:
    """Hypothesis found it: the reconciliation's revoke returns after close dropped it.

    No assign step follows, so without its own SetAssignment the fetcher kept
    serving a-1 after on_partitions_revoked({a-1}) had returned.
    """
    d = Driver()
    d.stable_with({A: (0, 1)})
    assert d.m.fetching == tps(("a", 0), ("a", 1))
    d.now = 3.0
    d.send(TimerFired())
    out = d.send(ok(2, {A: (0,)}))
    assert out == [InvokeOnPartitionsRevoked(tps(("a", 1)), commit_first=True)]
    # Close while that revoke runs: the rest (a-0) is revoked after it.
    assert d.send(CloseRequested()) == []
    assert d.state is S.PREPARE_LEAVING
    out = d.send(ListenerCompleted(Listener.REVOKED))
    assert out == [
        SetAssignment(tps(("a", 0))),
        InvokeOnPartitionsRevoked(tps(("a", 0)), commit_first=True),
    ]
    clear, hb = d.send(ListenerCompleted(Listener.REVOKED))
    assert clear == SetAssignment(frozenset())
    assert isinstance(hb, SendConsumerGroupHeartbeat) and hb.member_epoch == -1
    assert d.state is S.LEAVING


def test_fenced_while_a_close_waits_to_revoke_loses_instead() -> None:
    """Hypothesis found it: the close queued a revoke behind the running assign;
    the fence that came before it started must turn it into a loss (epoch 0 owns nothing).
    """
    d = Driver()
    d.join({A: (0,)})
    assert d.state is S.RECONCILING and d.m.listener is Listener.ASSIGNED
    assert d.send(CloseRequested()) == []
    d.now = 3.0
    (hb,) = d.send(TimerFired())
    assert isinstance(hb, SendConsumerGroupHeartbeat) and hb.member_epoch == 1
    # Fenced: the queued revoke becomes a loss, so the fetcher stops before it starts.
    assert d.send(error(110)) == [SetAssignment(frozenset())]
    assert d.m.member_epoch == 0
    out = d.send(ListenerCompleted(Listener.ASSIGNED))
    assert out == [InvokeOnPartitionsLost(tps(("a", 0)))]
    assert d.send(ListenerCompleted(Listener.LOST)) == []
    assert d.state is S.UNSUBSCRIBED and d.m.finished


def test_fatal_while_a_close_waits_to_revoke_loses_instead() -> None:
    d = Driver()
    d.join({A: (0,)})
    d.send(CloseRequested())
    d.now = 3.0
    d.send(TimerFired())
    out = d.send(error(30))
    assert d.state is S.FATAL
    assert SetAssignment(frozenset()) in out
    out = d.send(ListenerCompleted(Listener.ASSIGNED))
    assert out == [InvokeOnPartitionsLost(tps(("a", 0)))]


def test_no_client_side_session_expiry_only_the_broker_fences() -> None:
    """Java's KIP-848 client has no client-side session rule: the coordinator's session
    timeout and its heartbeat answers decide.  A member whose heartbeats get no answer
    for a minute (ten 6 s sessions: a coordinator failover, brokers gone) keeps its
    epoch and partitions and goes on looking the coordinator up; it loses them only
    when an answer says FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID."""
    d = Driver()
    d.stable_with({A: (0, 1)})
    owned, epoch = d.m.owned, d.m.member_epoch
    assert owned
    while d.now < 60.0:
        d.now += 0.5
        for action in d.send(TimerFired()):
            if isinstance(action, SendConsumerGroupHeartbeat):
                assert (
                    d.send(ConsumerGroupHeartbeatFailed("connection", 1, "connection refused"))
                    == []
                )
            elif isinstance(action, FindCoordinator):
                assert d.send(CoordinatorLookupFailed(-1, "no broker")) == []
            else:
                pytest.fail(f"unexpected {action}")
    assert (d.state, d.m.owned, d.m.member_epoch) == (S.STABLE, owned, epoch)
    d.now += 1.0
    out = d.send(TimerFired())
    if any(isinstance(a, FindCoordinator) for a in out):
        out = d.send(CoordinatorFound(1))
    assert [type(a) for a in out] == [SendConsumerGroupHeartbeat]
    out = d.send(error(110))  # FENCED_MEMBER_EPOCH: now the partitions are lost
    assert InvokeOnPartitionsLost(tps(("a", 0), ("a", 1))) in out, out


# -- the delivery gate: membership_valid_until -------------------------------------------


def test_no_gate_before_the_join_is_answered() -> None:
    d = Driver()
    assert d.m.membership_valid_until() is None
    d.send(TopicNamesResolved(NAMES))
    d.send(Subscribed(frozenset({"a"})))
    d.send(CoordinatorFound(1))
    assert d.m.membership_valid_until() is None  # epoch 0, owns nothing


def test_gate_is_the_acknowledged_send_time_plus_the_interval_until_the_session_is_known() -> None:
    d = Driver()
    d.stable_with({A: (0,)})  # every heartbeat sent and answered at t=0
    assert d.m.membership_valid_until() == 3.0  # interval 3 s: shorter than any session
    d.send(E.SessionTimeoutLearned(45_000))
    assert d.m.membership_valid_until() == 45.0


def test_gate_moves_with_the_send_time_not_the_arrival_of_the_answer() -> None:
    d = Driver()
    d.stable_with({A: (0,)})
    d.send(E.SessionTimeoutLearned(6000))
    d.now = 3.0
    (hb,) = d.send(TimerFired())
    assert isinstance(hb, SendConsumerGroupHeartbeat)
    d.now = 5.5  # a slow answer: the broker's session restarted no earlier than t=3
    d.send(ok(1))
    assert d.m.membership_valid_until() == 9.0


def test_gate_does_not_move_on_an_error_or_a_lost_request() -> None:
    d = Driver()
    d.stable_with({A: (0,)})
    d.send(E.SessionTimeoutLearned(6000))
    d.now = 3.0
    d.send(TimerFired())
    d.now = 3.1
    d.send(ConsumerGroupHeartbeatFailed("connection", 1, "connection lost"))
    assert d.m.membership_valid_until() == 6.0
    d.now = 3.2
    d.send(CoordinatorFound(1))
    d.now = 3.3
    d.send(error(15))  # COORDINATOR_NOT_AVAILABLE: an answer, but no proof of membership
    assert d.state is S.STABLE
    assert d.m.membership_valid_until() == 6.0


def test_a_fence_clears_the_gate_and_the_rejoin_sets_it_anew() -> None:
    d = Driver()
    d.stable_with({A: (0,)})
    d.send(E.SessionTimeoutLearned(6000))
    d.now = 20.0  # woke after a freeze: the gate (t=6) has long passed
    assert d.m.membership_valid_until() == 6.0
    d.send(TimerFired())
    d.send(error(110))  # FENCED_MEMBER_EPOCH
    assert d.m.membership_valid_until() is None
    (hb,) = d.send(ListenerCompleted(Listener.LOST))
    assert isinstance(hb, SendConsumerGroupHeartbeat) and hb.member_epoch == 0
    d.now = 20.2
    d.send(ok(2, {A: (0,)}))
    assert d.m.membership_valid_until() == 26.0


def test_an_unusable_session_timeout_is_ignored() -> None:
    d = Driver()
    d.stable_with({A: (0,)})
    d.send(E.SessionTimeoutLearned(0))
    assert d.m.membership_valid_until() == 3.0


def test_interval_auto_commit_is_the_machines_decision() -> None:
    """Java's auto-commit timer, on virtual time: one AutoCommit per interval while in
    the group; out of it the turn passes without a commit; off, never and no deadline."""
    d = Driver(auto_commit_interval=5.0)
    d.stable_with({A: (0,)})
    assert d.m.next_deadline() is not None and d.m.next_deadline() <= 5.0  # type: ignore[operator]
    d.now = 4.9
    assert not any(isinstance(a, acts.AutoCommit) for a in d.send(TimerFired()))
    d.now = 5.0
    out = d.send(TimerFired())
    assert [a for a in out if isinstance(a, acts.AutoCommit)] == [
        acts.AutoCommit("auto_commit_interval_ms elapsed")
    ]
    d.now = 6.0
    assert not any(isinstance(a, acts.AutoCommit) for a in d.send(TimerFired()))
    # Fenced: out of the group, so the next turn commits nothing (its epoch is gone).
    d.send(error(110))
    assert not d.m.in_group
    d.now = 10.0
    assert not any(isinstance(a, acts.AutoCommit) for a in d.send(TimerFired()))
    assert d.m.next_auto_commit == 15.0

    off = Driver(auto_commit=False, auto_commit_interval=5.0)
    off.stable_with({A: (0,)})
    for t in (5.0, 10.0, 15.0):
        off.now = t
        assert not any(isinstance(a, acts.AutoCommit) for a in off.send(TimerFired()))
    deadline = off.m.next_deadline()
    assert deadline is None or deadline != off.m.next_auto_commit
    with pytest.raises(ValueError, match="auto_commit_interval"):
        ConsumerMembership("g", "m", auto_commit_interval=0)


def test_a_coordinator_lookup_refused_by_acls_is_told_and_retried() -> None:
    d = Driver()
    d.send(Subscribed(frozenset({"a"})))
    out = d.send(CoordinatorLookupFailed(30))
    assert out == [
        RaiseToApplication("FindCoordinator: GROUP_AUTHORIZATION_FAILED", 30, None, False)
    ]
    assert d.state is S.JOINING and d.m.next_deadline() == pytest.approx(0.1)
    d.now = 0.1
    assert d.send(TimerFired()) == [FindCoordinator("heartbeat in JOINING")]
    # Other failures only back off.
    assert d.send(CoordinatorLookupFailed(15)) == []
