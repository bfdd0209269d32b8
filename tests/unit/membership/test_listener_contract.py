"""Hypothesis drives the machine with a random broker and random listener timing.

Whatever the interleaving, the listener contract must hold:

* revoked/lost only release partitions the application was given, assigned only
  gives partitions it does not hold (so a partition is revoked before it can be
  assigned again);
* on_partitions_assigned at most once per generation, and exactly once for every
  generation whose sync succeeded while the membership survived;
* after the membership was lost (fenced, unknown member, session expiry) the
  partitions are *lost*, never revoked;
* listeners never overlap; no heartbeat while not in a synced generation;
* generations handed to the application never go backwards;
* the machine never raises for inputs a broker could produce.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership.machine import Membership, MemberState
from aiogroup._protocol.results import (
    HeartbeatResult,
    JoinGroupResult,
    LeaveGroupResult,
    OffsetCommitResult,
    SyncGroupResult,
)
from aiogroup.structs import TopicPartition

from .driver import COOPERATIVE, EAGER, make

S = MemberState
ALL = [TopicPartition("t", p) for p in range(4)]
LOSE_CODES = (22, 25, 82)


class ListenerContract(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.m: Membership | None = None
        self.now = 0.0
        self.pending: dict[str, A.Action] = {}
        self.listener: str | None = None
        self.view: set[TopicPartition] = set()  # what the application was told it owns
        self.assigned_generations: list[int] = []
        self.broker_generation = 0
        self.synced: int | None = None  # generation whose sync succeeded, awaiting assigned
        self.must_lose = False
        self.closing = False

    # -- plumbing -----------------------------------------------------------------------

    @rule(cooperative=st.booleans(), auto_commit=st.booleans(), static=st.booleans())
    @precondition(lambda self: self.m is None)
    def create(self, cooperative: bool, auto_commit: bool, static: bool) -> None:
        self.m = make(COOPERATIVE if cooperative else EAGER, auto_commit=auto_commit, static=static)
        self.feed(E.SubscriptionChanged(True, "subscribed"))

    def feed(self, event: E.Event) -> None:
        assert self.m is not None
        was_in_generation = self.m.in_generation
        out = self.m.handle(event, self.now)
        if was_in_generation and not self.m.in_generation and self.view and not self.closing:
            if self.listener is None or self.listener is E.Listener.ASSIGNED:
                self.must_lose = True
        for action in out:
            self.check(action)

    def check(self, action: A.Action) -> None:
        m = self.m
        assert m is not None
        name = type(action).__name__
        if isinstance(
            action,
            A.InvokeOnPartitionsAssigned | A.InvokeOnPartitionsRevoked | A.InvokeOnPartitionsLost,
        ):
            assert self.listener is None, f"{name} while {self.listener} runs"
        if isinstance(action, A.InvokeOnPartitionsAssigned):
            assert not (action.partitions & self.view), "assigned a partition already held"
            assert action.generation_id not in self.assigned_generations, "assigned twice"
            if self.assigned_generations:
                assert action.generation_id > self.assigned_generations[-1]
            assert action.generation_id == self.synced
            self.synced = None
            self.assigned_generations.append(action.generation_id)
            self.view |= action.partitions
            self.listener = E.Listener.ASSIGNED
        elif isinstance(action, A.InvokeOnPartitionsRevoked):
            assert not self.must_lose, "revoked after the membership was lost"
            assert action.partitions <= self.view
            if m.protocol is COOPERATIVE:
                assert action.partitions, "cooperative revoke with nothing to revoke"
            self.view -= action.partitions
            self.listener = E.Listener.REVOKED
        elif isinstance(action, A.InvokeOnPartitionsLost):
            assert action.partitions, "lost with nothing to lose"
            assert action.partitions <= self.view
            self.view -= action.partitions
            self.must_lose = False
            self.listener = E.Listener.LOST
        elif isinstance(action, A.SendHeartbeat):
            assert m.member_id and action.generation_id >= 0
            assert m.state in (S.STABLE, S.ASSIGNING, S.REVOKING), m.state
        elif isinstance(
            action,
            A.SendJoinGroup
            | A.FindCoordinator
            | A.SendLeaveGroup
            | A.SendSyncGroup
            | A.ComputeAssignment,
        ):
            key = {A.SendSyncGroup: "SendSyncGroup"}.get(type(action), name)
            if isinstance(action, A.SendJoinGroup):
                assert self.synced is None or not m.in_generation or True
            assert key not in self.pending, f"second {key} while one is in flight"
            self.pending[key] = action
        elif isinstance(action, A.CancelListener):
            assert self.listener == action.kind
        elif isinstance(action, A.AbandonJoin):
            # The shell cancels the JoinGroup: no answer comes back.
            assert self.closing and "SendJoinGroup" in self.pending
            del self.pending["SendJoinGroup"]

    # -- the broker -----------------------------------------------------------------------

    @rule(code=st.sampled_from([0] * 6 + [15]))
    @precondition(lambda self: "FindCoordinator" in self.pending)
    def answer_find_coordinator(self, code: int) -> None:
        del self.pending["FindCoordinator"]
        self.feed(E.CoordinatorFound(1) if code == 0 else E.CoordinatorLookupFailed(code))

    @rule(code=st.sampled_from([0] * 16 + [14, 16, 22, 25, 27, 30, 79, 82]), leader=st.booleans())
    @precondition(lambda self: "SendJoinGroup" in self.pending)
    def answer_join(self, code: int, leader: bool) -> None:
        join = self.pending.pop("SendJoinGroup")
        assert isinstance(join, A.SendJoinGroup)
        member = join.member_id or "m-new"
        if code == 0:
            self.broker_generation += 1
            result = JoinGroupResult(
                0,
                self.broker_generation,
                "consumer",
                "range",
                member if leader else "other",
                member,
            )
        else:
            result = JoinGroupResult(code, -1, None, None, "", "m-given" if code == 79 else "")
        self.feed(E.JoinGroupResponseReceived(result))

    @rule()
    @precondition(lambda self: "ComputeAssignment" in self.pending)
    def compute(self) -> None:
        del self.pending["ComputeAssignment"]
        self.feed(E.AssignmentComputed((("m", b""),)))

    @rule(code=st.sampled_from([0] * 12 + [16, 22, 25, 27]), parts=st.sets(st.sampled_from(ALL)))
    @precondition(lambda self: "SendSyncGroup" in self.pending)
    def answer_sync(self, code: int, parts: set[TopicPartition]) -> None:
        sync = self.pending.pop("SendSyncGroup")
        assert isinstance(sync, A.SendSyncGroup)
        m = self.m
        assert m is not None
        if code == 0:
            if m.subscribed and not m.closing:
                self.synced = sync.generation_id
            self.feed(
                E.SyncGroupResponseReceived(
                    SyncGroupResult(0, b""), sync.generation_id, frozenset(parts)
                )
            )
        else:
            self.feed(E.SyncGroupResponseReceived(SyncGroupResult(code, b""), sync.generation_id))

    @rule(code=st.sampled_from([0] * 12 + [16, 22, 25, 27, 82]))
    @precondition(lambda self: self.m is not None and self.m.timers.in_flight)
    def answer_heartbeat(self, code: int) -> None:
        assert self.m is not None
        self.feed(E.HeartbeatResponseReceived(HeartbeatResult(code), self.m.generation_id))

    @rule(code=st.sampled_from([0, 25]))
    @precondition(lambda self: "SendLeaveGroup" in self.pending)
    def answer_leave(self, code: int) -> None:
        del self.pending["SendLeaveGroup"]
        self.feed(E.LeaveGroupResponseReceived(LeaveGroupResult(code)))

    @rule(
        api=st.sampled_from(["SendJoinGroup", "SendSyncGroup", "SendLeaveGroup"]),
        die=st.integers(0, 3),
    )
    def transport_failure(self, api: str, die: int) -> None:
        if die != 0 or api not in self.pending:
            return
        del self.pending[api]
        name = {
            "SendJoinGroup": "JoinGroup",
            "SendSyncGroup": "SyncGroup",
            "SendLeaveGroup": "LeaveGroup",
        }[api]
        assert self.m is not None
        self.feed(E.request_failed(name, "connection", self.m.generation_id))

    @rule(code=st.sampled_from([0] * 6 + [25, 27, 16]))
    @precondition(lambda self: self.m is not None and self.m.in_generation)
    def commit_answered(self, code: int) -> None:
        assert self.m is not None
        self.feed(
            E.OffsetCommitResponseReceived(
                OffsetCommitResult({("t", 0): code}), self.m.generation_id
            )
        )

    # -- the application ----------------------------------------------------------------------

    @rule(error=st.booleans())
    @precondition(lambda self: self.listener is not None)
    def listener_done(self, error: bool) -> None:
        kind, self.listener = self.listener, None
        assert kind is not None
        self.feed(E.ListenerCompleted(kind, RuntimeError("x") if error else None))

    @rule(dt=st.sampled_from([0.1, 0.5, 1.0, 1.0, 1.0, 3.0, 7.0, 40.0]))
    @precondition(lambda self: self.m is not None)
    def time_passes(self, dt: float) -> None:
        self.now += dt
        self.feed(E.TimerFired())

    @rule()
    @precondition(lambda self: self.m is not None)
    def poll(self) -> None:
        self.feed(E.ApplicationPolled(self.now))

    # Rare events are drawn with a die so that most runs get far into the protocol.

    @rule(subscribed=st.booleans(), die=st.integers(0, 5))
    @precondition(lambda self: self.m is not None)
    def subscription_changes(self, subscribed: bool, die: int) -> None:
        if die == 0:
            self.feed(E.SubscriptionChanged(subscribed, "changed"))

    @rule(die=st.integers(0, 3))
    @precondition(lambda self: self.m is not None)
    def metadata_changes(self, die: int) -> None:
        if die == 0:
            self.feed(E.MetadataChanged("more partitions"))

    @rule(die=st.integers(0, 9))
    @precondition(lambda self: self.m is not None and not self.closing)
    def close(self, die: int) -> None:
        if die == 0:
            self.closing = True
            self.feed(E.CloseRequested())

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def owned_matches_what_the_application_holds(self) -> None:
        m = self.m
        if m is None or m.state in (S.FATAL,):
            return
        if self.listener is None and m.state not in (S.COMPLETING_REBALANCE,):
            assert m.owned == frozenset(self.view)

    @invariant()
    def not_joined_means_no_commits(self) -> None:
        m = self.m
        if m is not None and not m.in_generation:
            assert not m.commit_gate([]).allowed


# max_examples comes from the Hypothesis profile (tests/conftest.py).
ListenerContract.TestCase.settings = settings(stateful_step_count=60, deadline=None)
TestListenerContract = ListenerContract.TestCase


def test_membership_lost_while_a_join_is_in_flight_means_lost_not_revoked() -> None:
    """Found by the state machine above in a CI run (thorough profile), replayed here.

    A cooperative member owns t-0 and rejoins (its subscription changed); while the
    JoinGroup is in flight a commit answers UNKNOWN_MEMBER_ID, and the application
    unsubscribes.  The join's answer then arrived: the machine took the new generation
    and *revoked* t-0, although its membership had been lost - on_partitions_lost is
    the callback owed.
    """
    run = ListenerContract()

    def invariants() -> None:
        run.not_joined_means_no_commits()
        run.owned_matches_what_the_application_holds()

    run.create(auto_commit=False, cooperative=True, static=False)
    run.answer_find_coordinator(code=0)
    run.answer_join(code=0, leader=False)
    run.subscription_changes(die=0, subscribed=True)
    run.answer_sync(code=0, parts={TopicPartition("t", 0)})
    run.listener_done(error=False)  # on_partitions_assigned returned: the rejoin starts
    invariants()
    assert "SendJoinGroup" in run.pending
    run.commit_answered(code=25)
    assert run.must_lose
    run.subscription_changes(die=0, subscribed=False)
    run.answer_join(code=0, leader=False)  # the checker raises on a revoke here
    assert run.listener is E.Listener.LOST and not run.must_lose
    invariants()
