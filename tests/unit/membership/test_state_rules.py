"""The state-triggered rules (``STATE_RULES``): the moves no other test reaches.

Each scenario drives a member to a resting state where exactly one rule applies and
asserts the whole outcome, so that every declared (source, rule) edge occurs in the
unit suite (``tests/unit/test_state_rule_edges.py`` checks that).
"""

from __future__ import annotations

from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership.machine import Membership, MemberState

from .driver import BACKOFF, COOPERATIVE, heartbeat, join_error, make, to_stable, tps

S = MemberState


def _heartbeat_answer(m: Membership, code: int, now: float = 1.0) -> list[A.Action]:
    m.handle(E.TimerFired(), now)  # the heartbeat goes out
    return m.handle(heartbeat(code, 1), now + 0.1)


def _cooperative_rejoin_backing_off() -> Membership:
    """UNJOINED in generation 1 still owning t-0: the rejoin's JoinGroup was refused."""
    m = make(COOPERATIVE)
    to_stable(m, tps(0))
    _heartbeat_answer(m, 27)  # REBALANCE_IN_PROGRESS: rejoin, keeping t-0
    assert m.state is S.PREPARING_REBALANCE
    out = m.handle(join_error(14), 1.2)  # COORDINATOR_LOAD_IN_PROGRESS
    assert out == [A.Backoff(BACKOFF, "JoinGroup: COORDINATOR_LOAD_IN_PROGRESS")]
    assert m.state is S.UNJOINED and m.in_generation and m.owned == tps(0)
    return m


def test_static_member_owning_nothing_closes_from_stable() -> None:
    m = make(static=True)
    to_stable(m, frozenset())
    assert m.handle(E.CloseRequested(), 1.0) == []
    assert m.state is S.CLOSED and m.generation_id == -1


def test_fenced_static_member_owning_nothing_goes_fatal_from_stable() -> None:
    m = make(static=True)
    to_stable(m, frozenset())
    out = _heartbeat_answer(m, 82)
    assert out == [A.RaiseToApplication("Heartbeat: FENCED_INSTANCE_ID", error_code=82, fatal=True)]
    assert m.state is S.FATAL and m.next_deadline() is None


def test_static_member_owning_nothing_rests_when_unsubscribed() -> None:
    m = make(static=True)
    to_stable(m, frozenset())
    assert m.handle(E.SubscriptionChanged(False, "unsubscribed"), 1.0) == []
    assert m.state is S.UNJOINED and m.generation_id == -1  # no LeaveGroup: static


def test_close_while_backing_off_a_rejoin_revokes_from_unjoined() -> None:
    m = _cooperative_rejoin_backing_off()
    out = m.handle(E.CloseRequested(), 1.3)
    assert out == [A.MarkRevoking(tps(0)), A.InvokeOnPartitionsRevoked(tps(0), commit_first=False)]
    assert m.state is S.REVOKING


def test_unknown_member_on_a_rejoin_loses_from_unjoined() -> None:
    m = make(COOPERATIVE)
    to_stable(m, tps(0))
    _heartbeat_answer(m, 27)
    out = m.handle(join_error(25), 1.2)  # UNKNOWN_MEMBER_ID: the generation is gone
    assert out == [A.MarkRevoking(tps(0)), A.InvokeOnPartitionsLost(tps(0))]
    assert m.state is S.LOSING and m.generation_id == -1


def test_closing_during_a_cooperative_rejoin_revokes_what_it_still_owns() -> None:
    """The JoinGroup is given up on close; the member still holds its generation and
    its partitions, so they are revoked (not lost) before it closes."""
    m = make(COOPERATIVE)
    to_stable(m, tps(0))
    _heartbeat_answer(m, 27)
    assert m.state is S.PREPARING_REBALANCE
    out = m.handle(E.CloseRequested(), 1.15)
    assert out == [
        A.AbandonJoin((1, "m1")),
        A.MarkRevoking(tps(0)),
        A.InvokeOnPartitionsRevoked(tps(0), commit_first=False),
    ]
    assert m.state is S.REVOKING and m.closing
    # The abandoned join's answer is void while the revoke runs.
    assert m.handle(join_error(25), 1.2) == []
    assert m.handle(E.ListenerCompleted(E.Listener.REVOKED), 1.3) == [A.SetAssignment(None)]
    assert m.state is S.CLOSED
