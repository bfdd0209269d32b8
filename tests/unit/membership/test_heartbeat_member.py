"""The plumbing both heartbeat machines (KIP-848, KIP-932) are built on, on its own.

A toy machine with two states and no rules of its own drives :class:`HeartbeatMember`
through its scheduler (coordinator lookup and its backoff, the heartbeat schedule),
the illegal-event rule and the delivery gate, on virtual time.  The two real machines
are then checked to take their plumbing from here, so a fix made here reaches both.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import pytest

from aiogroup._membership import actions as acts
from aiogroup._membership import consumer_group as cg
from aiogroup._membership import events as E
from aiogroup._membership import heartbeat_member as hm
from aiogroup._membership import share_group as sg
from aiogroup._membership import table
from aiogroup._membership.backoff import RetryPolicy
from aiogroup._membership.codes import ErrorCode


class Toy(enum.Enum):
    IDLE = "IDLE"
    BEATING = "BEATING"
    FATAL = "FATAL"


class ToyError(RuntimeError):
    pass


ToyHandler = Callable[["ToyMember", E.Event], None]
TOY_TABLE: dict[tuple[Toy, type[E.Event]], table.Transition[Toy, ToyHandler]] = {}


class ToyMember(hm.HeartbeatMember[Toy]):
    _ERROR = ToyError
    _LOOKUP_FOR = "toy heartbeat"

    def __init__(self, now: float = 0.0) -> None:
        super().__init__(
            "g",
            "m-1",
            initial=Toy.IDLE,
            fatal=Toy.FATAL,
            in_group=(Toy.BEATING,),
            retry_backoff=0.1,
            coordinator_policy=RetryPolicy(0.1, 0.4),
            learn_session_timeout=False,
            now=now,
        )

    def _event_table(self) -> dict[tuple[Toy, type[E.Event]], table.Transition[Toy, ToyHandler]]:
        return TOY_TABLE

    def _state_rules(self) -> tuple[()]:
        return ()

    def _wants_heartbeat(self) -> bool:
        return self.state is Toy.BEATING

    def _urgent(self) -> bool:
        return False

    def _heartbeat(self) -> acts.Action:
        self.heartbeat_in_flight = True
        self.heartbeat_sent_at = self.now
        return acts.SendShareGroupHeartbeat(self.member_id, self.member_epoch)


def _start(m: ToyMember, ev: E.Event) -> None:
    m.state = Toy.BEATING


def _answered(m: ToyMember, ev: E.Event) -> None:
    assert isinstance(ev, E.ShareGroupHeartbeatResponseReceived)
    m.heartbeat_in_flight = False
    if ev.error_code == ErrorCode.NONE:
        m._heartbeat_accepted(ev.member_id, ev.member_epoch, ev.heartbeat_interval_ms)
    else:
        m._coordinator_lost()


hm.add_plumbing(TOY_TABLE, Toy, Toy.FATAL)
TOY_TABLE[(Toy.IDLE, E.Subscribed)] = table.transition(_start, Toy.BEATING)
TOY_TABLE[(Toy.BEATING, E.ShareGroupHeartbeatResponseReceived)] = table.transition(_answered)


def _ok(epoch: int = 1, interval_ms: int = 3000) -> E.ShareGroupHeartbeatResponseReceived:
    return E.ShareGroupHeartbeatResponseReceived(
        0, member_epoch=epoch, heartbeat_interval_ms=interval_ms
    )


def _beating() -> ToyMember:
    m = ToyMember()
    out = m.handle(E.Subscribed(frozenset({"a"})), 0.0)
    assert out == [acts.FindCoordinator("toy heartbeat in BEATING")]
    return m


def test_empty_ids_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="group_id must not be empty"):
        hm.check_ids("", "m")
    with pytest.raises(ValueError, match="member_id must not be empty"):
        hm.check_ids("g", "")
    hm.check_ids("g", "m")


def test_the_error_text_names_the_rpc_the_code_the_message_and_the_hint() -> None:
    code = ErrorCode.GROUP_MAX_SIZE_REACHED
    assert hm.heartbeat_error_text("X", code, None) == "X failed with GROUP_MAX_SIZE_REACHED"
    assert hm.heartbeat_error_text("X", code, "full", "too many") == (
        "X failed with GROUP_MAX_SIZE_REACHED: full (too many)"
    )


def test_the_coordinator_lookup_backs_off_by_the_policy_then_the_heartbeat_follows() -> None:
    m = _beating()
    assert m.next_deadline() is None  # the lookup is in flight: only its answer moves on
    assert m.handle(E.CoordinatorLookupFailed(ErrorCode.COORDINATOR_NOT_AVAILABLE), 1.0) == []
    assert m.next_deadline() == pytest.approx(1.1)
    assert m.handle(E.TimerFired(), 1.05) == []
    assert m.handle(E.TimerFired(), 1.1) == [acts.FindCoordinator("toy heartbeat in BEATING")]
    m.handle(E.CoordinatorLookupFailed(ErrorCode.COORDINATOR_NOT_AVAILABLE), 1.2)
    assert m.next_deadline() == pytest.approx(1.4)  # the second failure in a row doubles
    m.handle(E.TimerFired(), 1.4)
    out = m.handle(E.CoordinatorFound(1), 1.5)
    assert out == [acts.SendShareGroupHeartbeat("m-1", 0)]
    assert m.coordinator_lookup.failures == 2  # found is not a success for the backoff
    m.handle(_ok(), 1.6)
    assert m.coordinator_lookup.failures == 0
    assert m.member_epoch == 1 and m.heartbeat_interval == 3.0
    assert m.next_deadline() == pytest.approx(4.6)


def test_a_lost_coordinator_is_looked_up_again_after_the_backoff() -> None:
    m = _beating()
    m.handle(E.CoordinatorFound(1), 0.0)
    out = m.handle(
        E.ShareGroupHeartbeatResponseReceived(ErrorCode.NOT_COORDINATOR, member_epoch=0), 2.0
    )
    assert out == [] and not m.coordinator_known
    assert m.next_deadline() == pytest.approx(2.1)
    assert m.handle(E.TimerFired(), 2.1) == [acts.FindCoordinator("toy heartbeat in BEATING")]


def test_an_event_missing_from_the_table_ends_the_member_in_its_own_error() -> None:
    m = ToyMember()
    with pytest.raises(ToyError, match="ApplicationPolled is not valid in state IDLE"):
        m.handle(E.ApplicationPolled(0.0), 0.0)
    assert m.failed and m.state is Toy.FATAL
    # FATAL swallows the plumbing's late news.
    assert m.handle(E.CoordinatorFound(1), 1.0) == []
    assert m.handle(E.TopicNamesResolved({}), 1.0) == []
    assert m.next_deadline() is None


def test_the_delivery_gate_is_the_proven_heartbeat_plus_the_session() -> None:
    m = _beating()
    m.handle(E.CoordinatorFound(1), 0.0)
    assert m.membership_valid_until() is None  # no membership yet
    m.handle(_ok(), 0.5)  # the heartbeat went out at 0.0
    assert m.membership_valid_until() == pytest.approx(3.0)  # the interval bounds it
    m.handle(E.SessionTimeoutLearned(45_000), 1.0)
    assert m.membership_valid_until() == pytest.approx(45.0)
    assert m.in_group and m.state_name == "BEATING"


def test_a_broker_without_an_api_is_reported_not_fatal() -> None:
    m = _beating()
    error = RuntimeError("no DescribeConfigs")
    out = m.handle(E.BrokerIncompatible("DescribeConfigs", error), 0.0)
    assert out == [
        acts.RaiseToApplication(
            "DescribeConfigs: the broker does not support it: no DescribeConfigs",
            None,
            error,
            False,
        )
    ]
    assert not m.failed and m.error is None


MACHINES: list[tuple[Any, Any]] = [(cg, cg.ConsumerMemberState), (sg, sg.ShareMemberState)]
SHARED: dict[type[E.Event], Callable[..., None]] = {
    E.CoordinatorLookupFailed: hm.on_coordinator_lookup_failed,
    E.TopicNamesResolved: hm.on_topic_names,
    E.TopicNamesLookupFailed: hm.on_topic_names_failed,
    E.SessionTimeoutLearned: hm.on_session_timeout,
    E.SessionTimeoutLookupFailed: hm.on_session_lookup_failed,
    E.TimerFired: hm.ignore,
    E.BrokerIncompatible: hm.on_broker_incompatible,
}


@pytest.mark.parametrize(("module", "states"), MACHINES)
def test_both_machines_take_their_plumbing_from_here(module: Any, states: Any) -> None:
    for state in states:
        for event_type, handler in SHARED.items():
            tr = module.EVENT_TRANSITIONS[(state, event_type)]
            assert tr.handler is (hm.ignore if state is states.FATAL else handler)
            assert tr.targets == frozenset()


@pytest.mark.parametrize("code", sorted(hm.COMMON_HEARTBEAT_REACTIONS))
def test_both_machines_react_alike_to_the_codes_both_rpcs_document(code: int) -> None:
    reaction = hm.COMMON_HEARTBEAT_REACTIONS[code]
    assert cg.heartbeat_reaction(code) is reaction
    assert sg.share_heartbeat_reaction(code) is reaction
