"""Hypothesis drives the consumer-protocol machine with a random broker and listener timing.

Whatever the interleaving, the listener contract and the protocol rules must hold:

* listeners never overlap (one running, the rest queued);
* revoked/lost only release partitions the application holds; assigned only gives
  partitions it does not hold; the fetcher's assignment (SetAssignment) never
  includes a partition the application was not given or is about to be given;
* after a fence, partitions are lost, never revoked; the fetcher no longer serves
  partitions whose on_partitions_lost runs;
* at most one heartbeat in flight; a heartbeat with epoch 0 is a join and carries
  an empty owned-partitions list and the subscription; a leave carries -1/-2;
* no heartbeat from a member that is not in the group (UNSUBSCRIBED, STALE,
  FENCED, FATAL);
* the machine never raises for inputs a broker and a well-behaved shell produce.
"""

from __future__ import annotations

import uuid

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from aiogroup._membership import actions as A
from aiogroup._membership import consumer_group as cg
from aiogroup._membership import events as E
from aiogroup._membership.codes import ErrorCode

S = cg.ConsumerMemberState
TOPICS = {uuid.UUID(int=1): "a", uuid.UUID(int=2): "b"}
PARTITIONS = [(tid, p) for tid in TOPICS for p in range(3)]
NOT_IN_GROUP = {S.UNSUBSCRIBED, S.STALE, S.FENCED, S.FATAL}

codes = st.sampled_from([int(c) for c in ErrorCode if c] + [9999])
assignments = st.one_of(
    st.none(),
    st.sets(st.sampled_from(PARTITIONS)).map(
        lambda ps: {tid: tuple(sorted(p for t, p in ps if t == tid)) for tid in {t for t, _ in ps}}
    ),
)


class ConsumerContract(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0
        self.m = cg.ConsumerMembership("g", "m", max_poll_interval=1000.0)
        self.held: set[tuple[str, int]] = set()
        self.running: list[A.Action] = []  # the listener the shell runs now (at most one)
        self.fetching: frozenset[tuple[str, int]] = frozenset()
        self.pending_assign: set[tuple[str, int]] = set()
        self.in_flight: A.SendConsumerGroupHeartbeat | None = None
        self.fenced_since_join = False
        self.epoch = 0
        self.feed(E.TopicNamesResolved(TOPICS))

    def feed(self, event: E.Event) -> None:
        for action in self.m.handle(event, self.now):
            self.perform(action)

    def perform(self, action: A.Action) -> None:
        if isinstance(action, A.SendConsumerGroupHeartbeat):
            assert self.in_flight is None, "two heartbeats in flight"
            assert self.m.state not in NOT_IN_GROUP, f"heartbeat in {self.m.state}"
            if action.member_epoch == 0:
                assert action.topic_partitions == {} and action.subscribed_topic_names
            if action.member_epoch < 0:
                assert self.m.state is S.LEAVING
            self.in_flight = action
        elif isinstance(action, (A.InvokeOnPartitionsRevoked, A.InvokeOnPartitionsLost)):
            assert not self.running, "listeners overlap"
            assert set(action.partitions) <= self.held, "released what was never given"
            if isinstance(action, A.InvokeOnPartitionsRevoked):
                assert self.m.member_epoch > 0, "revoked after the membership was lost"
            self.running.append(action)
        elif isinstance(action, A.InvokeOnPartitionsAssigned):
            assert not self.running, "listeners overlap"
            assert not (set(action.partitions) & self.held), "assigned twice"
            self.running.append(action)
        elif isinstance(action, A.SetAssignment):
            self.fetching = action.partitions
        elif isinstance(action, A.RequestMetadata):
            pass
        elif isinstance(action, A.FindCoordinator):
            self.feed(E.CoordinatorFound(1))
        elif isinstance(action, A.RaiseToApplication):
            pass

    @rule(topics=st.sets(st.sampled_from(["a", "b"]), min_size=1))
    def subscribe(self, topics: set[str]) -> None:
        self.feed(E.Subscribed(frozenset(topics)))

    @precondition(lambda self: self.in_flight is not None)
    @rule(assignment=assignments, bump=st.integers(0, 2))
    def heartbeat_ok(self, assignment: dict[uuid.UUID, tuple[int, ...]] | None, bump: int) -> None:
        sent = self.in_flight
        assert sent is not None
        self.in_flight = None
        self.epoch = max(self.epoch, sent.member_epoch, 0) + bump + (sent.member_epoch == 0)
        self.feed(
            E.ConsumerGroupHeartbeatResponseReceived(
                0, member_epoch=self.epoch, heartbeat_interval_ms=1000, assignment=assignment
            )
        )

    @precondition(lambda self: self.in_flight is not None)
    @rule(code=codes)
    def heartbeat_error(self, code: int) -> None:
        self.in_flight = None
        self.feed(E.ConsumerGroupHeartbeatResponseReceived(code))

    @precondition(lambda self: self.in_flight is not None)
    @rule()
    def heartbeat_lost(self) -> None:
        self.in_flight = None
        self.feed(E.ConsumerGroupHeartbeatFailed("connection", -1, "connection reset"))

    @precondition(lambda self: bool(self.running))
    @rule(fail=st.booleans())
    def listener_returns(self, fail: bool) -> None:
        action = self.running.pop()
        if isinstance(action, A.InvokeOnPartitionsAssigned):
            self.held |= set(action.partitions)
            kind = E.Listener.ASSIGNED
        else:
            assert isinstance(action, (A.InvokeOnPartitionsRevoked, A.InvokeOnPartitionsLost))
            self.held -= set(action.partitions)
            kind = (
                E.Listener.REVOKED
                if isinstance(action, A.InvokeOnPartitionsRevoked)
                else E.Listener.LOST
            )
        self.feed(E.ListenerCompleted(kind, RuntimeError("boom") if fail else None))

    @rule(dt=st.floats(0.0, 3.0))
    def time_passes(self, dt: float) -> None:
        self.now += dt
        self.feed(E.TimerFired())

    @rule()
    def poll(self) -> None:
        self.feed(E.ApplicationPolled(self.now))

    @rule()
    def unsubscribe(self) -> None:
        self.feed(E.UnsubscribeRequested())

    @rule()
    def close(self) -> None:
        self.feed(E.CloseRequested())

    @invariant()
    def fetcher_serves_only_what_is_or_is_being_given(self) -> None:
        coming: set[tuple[str, int]] = set()
        for action in self.running:
            if isinstance(action, A.InvokeOnPartitionsAssigned):
                coming |= set(action.partitions)
        assert set(self.fetching) <= self.held | coming

    @invariant()
    def lost_partitions_are_not_served(self) -> None:
        # The shell marks only revocations (their auto-commit reads the positions);
        # a loss has the fetcher stop serving its partitions before it starts.
        for action in self.running:
            if isinstance(action, A.InvokeOnPartitionsLost):
                assert not (self.fetching & action.partitions), "fetcher serves lost partitions"

    @invariant()
    def running_listener_is_the_machines(self) -> None:
        assert (self.m.listener is None) == (not self.running)


ConsumerContract.TestCase.settings = settings(stateful_step_count=60, deadline=None)
TestConsumerContract = ConsumerContract.TestCase
