"""Every known error code, for every group API: the table's reaction, and its effect."""

from __future__ import annotations

import pytest

from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership.codes import ErrorCode
from aiogroup._membership.commit_outcomes import (
    COMMIT_OUTCOMES,
    OFFSET_FETCH_OUTCOMES,
    CommitKind,
    CommitOutcome,
    CommitProtocol,
    commit_outcome,
    offset_fetch_outcome,
)
from aiogroup._membership.machine import (
    MemberState,
    Reaction,
    reaction,
)
from aiogroup._protocol.results import LeaveGroupResult, OffsetCommitResult

from .driver import heartbeat, join_error, join_ok, make, sync_error, to_stable, tps

S = MemberState
R = Reaction
CODES = [*ErrorCode, 9999]  # 9999: a code no table knows
APIS = ["JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "FindCoordinator"]


def _kinds(actions: list[A.Action]) -> list[type[A.Action]]:
    return [type(a) for a in actions]


def _raised(actions: list[A.Action]) -> list[A.RaiseToApplication]:
    return [a for a in actions if isinstance(a, A.RaiseToApplication)]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("code", CODES, ids=str)
def test_every_code_has_a_reaction(api: str, code: int) -> None:
    assert isinstance(reaction(api, code), Reaction)


def test_documented_reactions() -> None:
    assert reaction("Heartbeat", ErrorCode.REBALANCE_IN_PROGRESS) is R.REJOIN
    assert reaction("Heartbeat", ErrorCode.UNKNOWN_MEMBER_ID) is R.LOSE
    assert reaction("Heartbeat", ErrorCode.ILLEGAL_GENERATION) is R.LOSE
    assert reaction("Heartbeat", ErrorCode.FENCED_INSTANCE_ID) is R.FENCED
    assert reaction("SyncGroup", ErrorCode.NOT_COORDINATOR) is R.FIND_COORDINATOR
    assert reaction("JoinGroup", ErrorCode.MEMBER_ID_REQUIRED) is R.REJOIN_WITH_MEMBER_ID
    assert reaction("JoinGroup", ErrorCode.INCONSISTENT_GROUP_PROTOCOL) is R.FATAL
    assert reaction("JoinGroup", ErrorCode.GROUP_AUTHORIZATION_FAILED) is R.REPORT_RETRY
    assert reaction("LeaveGroup", ErrorCode.UNKNOWN_MEMBER_ID) is R.IGNORE


@pytest.mark.parametrize("code", CODES, ids=str)
def test_heartbeat_code(code: int) -> None:
    m = make()
    to_stable(m, tps(0))
    m.handle(E.TimerFired(), 1.0)
    out = m.handle(heartbeat(code, 1), 1.1)
    react = reaction("Heartbeat", code)
    expected_state = {
        R.IGNORE: S.STABLE,
        R.RETRY_BACKOFF: S.STABLE,
        R.FIND_COORDINATOR: S.STABLE,
        R.REJOIN: S.REVOKING,  # eager: revoke before rejoining
        R.LOSE: S.LOSING,
        R.FENCED: S.LOSING,
        R.REPORT_RETRY: S.STABLE,
        R.FATAL: S.LOSING,  # partitions are lost first, then FATAL
    }[react]
    assert m.state is expected_state
    if react is R.FIND_COORDINATOR:
        assert m.coordinator_id is None and A.FindCoordinator in _kinds(out)
    if react in (R.LOSE, R.FENCED, R.FATAL):
        assert m.generation_id == -1
        assert out[-1] == A.InvokeOnPartitionsLost(tps(0))
    if react in (R.FENCED, R.FATAL):
        assert [r.fatal for r in _raised(out)] == [True]
        m.handle(E.ListenerCompleted(E.Listener.LOST), 1.2)
        assert m.state is S.FATAL
    elif react is R.REPORT_RETRY:
        assert [(r.error_code, r.fatal) for r in _raised(out)] == [(code, False)]
    else:
        assert _raised(out) == []


@pytest.mark.parametrize("code", CODES, ids=str)
def test_join_group_code(code: int) -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    out = m.handle(join_ok(1) if code == 0 else join_error(code, member="given"), 1.0)
    react = reaction("JoinGroup", code)
    expected_state = {
        R.IGNORE: S.COMPLETING_REBALANCE,
        R.RETRY_BACKOFF: S.UNJOINED,
        R.FIND_COORDINATOR: S.UNJOINED,
        R.LOSE: S.PREPARING_REBALANCE,  # nothing owned: rejoin at once as a new member
        R.FENCED: S.FATAL,
        R.REPORT_RETRY: S.UNJOINED,
        R.FATAL: S.FATAL,
        R.REJOIN_WITH_MEMBER_ID: S.PREPARING_REBALANCE,
    }[react]
    assert m.state is expected_state
    if react is R.REJOIN_WITH_MEMBER_ID:
        assert isinstance(out[0], A.SendJoinGroup) and out[0].member_id == "given"
    if react is R.LOSE:
        assert isinstance(out[0], A.SendJoinGroup) and out[0].member_id == ""
    if react in (R.RETRY_BACKOFF, R.REPORT_RETRY):
        assert A.Backoff in _kinds(out)
    if react in (R.FENCED, R.FATAL):
        assert [r.fatal for r in _raised(out)] == [True]


@pytest.mark.parametrize("code", CODES, ids=str)
def test_sync_group_code(code: int) -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    m.handle(E.CoordinatorFound(1), 0.0)
    m.handle(join_ok(1), 0.0)
    if code == 0:
        from .driver import sync_ok

        out = m.handle(sync_ok(1, tps(0)), 1.0)
    else:
        out = m.handle(sync_error(code, 1), 1.0)
    react = reaction("SyncGroup", code)
    expected_state = {
        R.IGNORE: S.ASSIGNING,
        R.RETRY_BACKOFF: S.UNJOINED,
        R.FIND_COORDINATOR: S.UNJOINED,
        R.REJOIN: S.PREPARING_REBALANCE,  # prepared once per rebalance: no second revoke
        R.LOSE: S.PREPARING_REBALANCE,
        R.FENCED: S.FATAL,
        R.REPORT_RETRY: S.UNJOINED,
        R.FATAL: S.FATAL,
    }[react]
    assert m.state is expected_state
    if react is R.IGNORE:
        assert out[-1] == A.InvokeOnPartitionsAssigned(tps(0), 1)
    else:
        assert A.InvokeOnPartitionsAssigned not in _kinds(out)


@pytest.mark.parametrize("code", CODES, ids=str)
def test_offset_commit_code_effect_on_membership(code: int) -> None:
    m = make()
    to_stable(m, tps(0))
    out = m.handle(E.OffsetCommitResponseReceived(OffsetCommitResult({("t", 0): code}), 1), 0.5)
    react = reaction("OffsetCommit", code)
    expected_state = {
        R.IGNORE: S.STABLE,
        R.RETRY_BACKOFF: S.STABLE,
        R.FIND_COORDINATOR: S.STABLE,
        R.REJOIN: S.REVOKING,
        R.LOSE: S.LOSING,
        R.FENCED: S.LOSING,
        R.REPORT_RETRY: S.STABLE,
    }[react]
    assert m.state is expected_state
    if react is R.IGNORE:
        assert out == []


@pytest.mark.parametrize("code", CODES, ids=str)
def test_leave_group_code_always_leaves(code: int) -> None:
    m = make()
    to_stable(m, frozenset())
    out = m.handle(E.CloseRequested(), 0.5)
    assert out == [A.SendLeaveGroup("m1", "the consumer is closing")]
    m.handle(E.LeaveGroupResponseReceived(LeaveGroupResult(code)), 0.6)
    assert m.state is S.CLOSED


@pytest.mark.parametrize("code", [c for c in CODES if c != 0], ids=str)
def test_find_coordinator_code(code: int) -> None:
    m = make()
    m.handle(E.SubscriptionChanged(True), 0.0)
    out = m.handle(E.CoordinatorLookupFailed(code), 0.5)
    react = reaction("FindCoordinator", code)
    if react is R.FATAL:
        assert m.state is S.FATAL
        return
    assert m.state is S.UNJOINED and A.Backoff in _kinds(out)
    assert bool(_raised(out)) is (react is R.REPORT_RETRY)
    out = m.handle(E.TimerFired(), 1.0)
    assert _kinds(out) == [A.FindCoordinator]


CLASSIC = CommitProtocol.CLASSIC


@pytest.mark.parametrize("kind", list(CommitKind))
@pytest.mark.parametrize("code", CODES, ids=str)
def test_caller_outcomes(code: int, kind: CommitKind) -> None:
    out = commit_outcome(CLASSIC, kind, code)
    assert out is COMMIT_OUTCOMES.get((CLASSIC, kind, code), CommitOutcome.RAISE)
    assert out is not CommitOutcome.RETRY_WITH_LATEST_EPOCH  # classic commits carry no epoch
    fetched = offset_fetch_outcome(CLASSIC, code)
    assert fetched is OFFSET_FETCH_OUTCOMES.get((CLASSIC, code), CommitOutcome.RAISE)


def test_commit_outcomes_follow_the_java_contract() -> None:
    for code in (
        ErrorCode.UNKNOWN_MEMBER_ID,
        ErrorCode.ILLEGAL_GENERATION,
        ErrorCode.REBALANCE_IN_PROGRESS,
    ):
        assert commit_outcome(CLASSIC, CommitKind.USER, code) is CommitOutcome.COMMIT_FAILED
    assert (
        commit_outcome(CLASSIC, CommitKind.USER, ErrorCode.NOT_COORDINATOR)
        is CommitOutcome.FIND_COORDINATOR_AND_RETRY
    )
    assert (
        commit_outcome(CLASSIC, CommitKind.USER, ErrorCode.OFFSET_METADATA_TOO_LARGE)
        is CommitOutcome.RAISE
    )
    assert (
        commit_outcome(CLASSIC, CommitKind.USER, ErrorCode.FENCED_INSTANCE_ID)
        is CommitOutcome.RAISE
    )
    assert offset_fetch_outcome(CLASSIC, ErrorCode.UNSTABLE_OFFSET_COMMIT) is CommitOutcome.RETRY
