"""The generation a JoinGroup's subscription carries: that of the owned partitions.

Issue 24, from a request timeline on Tansu (two members, cooperative-sticky): B's
first JoinGroup carried generation -1; its SyncGroup for generation 1 was refused with
REBALANCE_IN_PROGRESS; its rejoin carried generation 1 - a generation it was never
given anything in.  The metadata had changed, so the Stable group started another
round for everyone instead of answering B with the current generation (~5 s more to
settle).  KIP-792 defines the field as the generation of the owned partitions: the
last generation whose SyncGroup succeeded, -1 when there is none.  These tests replay
that timeline through the pure machine, and through the request builder to the bytes
the broker compares.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiogroup._coordination.group_requests import ClassicRequests
from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership.machine import Membership, MemberState
from aiogroup._protocol.classic_embedded import decode_subscription
from aiogroup._state.subscription import SubscriptionState
from aiogroup.assignors.cooperative import CooperativeStickyAssignor
from aiogroup.config import ConsumerConfig
from aiogroup.metrics import ConsumerMetrics

from .driver import COOPERATIVE, heartbeat, join_ok, make, sync_error, sync_ok, to_stable, tps

S = MemberState
REBALANCE_IN_PROGRESS = 27
UNKNOWN_MEMBER_ID = 25


def _join(out: list[A.Action]) -> A.SendJoinGroup:
    joins = [a for a in out if isinstance(a, A.SendJoinGroup)]
    assert len(joins) == 1, out
    return joins[0]


def _heard(m: Membership, code: int, generation: int, now: float) -> list[A.Action]:
    """A heartbeat goes out on the timer and is answered with ``code``."""
    assert m.handle(E.TimerFired(), now) == [A.SendHeartbeat(generation, m.member_id)]
    return m.handle(heartbeat(code, generation), now)


def _first_join(m: Membership, member: str = "b") -> A.SendJoinGroup:
    m.handle(E.SubscriptionChanged(True, "subscribed"), 0.0)
    return _join(m.handle(E.CoordinatorFound(1), 0.0))


def test_joiner_whose_sync_is_refused_rejoins_with_the_generation_it_joined_with() -> None:
    m = make(COOPERATIVE)
    first = _first_join(m)
    assert (first.generation_id, first.owned_generation, first.owned_partitions) == (
        -1,
        -1,
        frozenset(),
    )
    assert m.handle(join_ok(1, "b"), 7.0) == [A.SendSyncGroup(1, "b", "range", ())]
    # Tansu's SyncGroup race: the answer comes ~4 s later, refused.
    rejoin = _join(m.handle(sync_error(REBALANCE_IN_PROGRESS, 1), 11.1))
    assert rejoin.reason == "SyncGroup: REBALANCE_IN_PROGRESS"
    # The member keeps its generation (a failure of this JoinGroup is matched to it) ...
    assert (rejoin.member_id, rejoin.generation_id) == ("b", 1)
    # ... but it was given nothing in generation 1: the subscription repeats -1.
    assert rejoin.owned_generation == -1 == first.owned_generation
    assert rejoin.owned_partitions == first.owned_partitions
    assert m.owned_generation == -1 and m.generation_id == 1


def test_the_current_generation_answered_without_a_new_round_is_then_owned() -> None:
    m = make(COOPERATIVE)
    _first_join(m)
    m.handle(join_ok(1, "b"), 7.0)
    m.handle(sync_error(REBALANCE_IN_PROGRESS, 1), 11.1)
    # The Stable group answers the unchanged metadata with its current generation 2.
    assert m.handle(join_ok(2, "b"), 11.1) == [A.SendSyncGroup(2, "b", "range", ())]
    out = m.handle(sync_ok(2, tps(2, 3)), 11.2)
    assert out == [A.SetAssignment(tps(2, 3)), A.InvokeOnPartitionsAssigned(tps(2, 3), 2)]
    assert m.owned_generation == 2
    m.handle(E.ListenerCompleted(E.Listener.ASSIGNED), 11.3)
    assert m.state is S.STABLE
    rejoin = _join(_heard(m, REBALANCE_IN_PROGRESS, 2, 12.2))
    assert (rejoin.generation_id, rejoin.owned_generation) == (2, 2)
    assert rejoin.owned_partitions == tps(2, 3)


def test_an_owner_whose_sync_is_refused_claims_its_partitions_under_their_generation() -> None:
    """The claim names the generation the partitions were given in, not a later one in
    which nothing was synced: the assignor trusts the newer of two conflicting claims."""
    m = make(COOPERATIVE)
    to_stable(m, tps(0, 1), member="a")
    join = _join(_heard(m, REBALANCE_IN_PROGRESS, 1, 1.0))
    assert (join.generation_id, join.owned_generation, join.owned_partitions) == (1, 1, tps(0, 1))
    m.handle(join_ok(2, "a"), 2.0)
    rejoin = _join(m.handle(sync_error(REBALANCE_IN_PROGRESS, 2), 3.0))
    assert (rejoin.generation_id, rejoin.owned_generation) == (2, 1)
    assert rejoin.owned_partitions == tps(0, 1)
    assert m.owned == tps(0, 1)  # nothing revoked or lost on the way


def test_eager_rejoin_still_names_the_last_synced_generation() -> None:
    m = make()
    to_stable(m, tps(0, 1), generation=4)
    out = _heard(m, REBALANCE_IN_PROGRESS, 4, 1.0)
    assert out == [A.MarkRevoking(tps(0, 1)), A.InvokeOnPartitionsRevoked(tps(0, 1), False)]
    join = _join(m.handle(E.ListenerCompleted(E.Listener.REVOKED), 1.1))
    assert (join.generation_id, join.owned_generation, join.owned_partitions) == (
        4,
        4,
        frozenset(),
    )


def test_a_lost_membership_forgets_the_owned_generation() -> None:
    m = make(COOPERATIVE)
    to_stable(m, tps(0, 1))
    assert m.owned_generation == 1
    out = _heard(m, UNKNOWN_MEMBER_ID, 1, 1.0)
    assert m.owned_generation == -1 and m.generation_id == -1
    assert out == [A.MarkRevoking(tps(0, 1)), A.InvokeOnPartitionsLost(tps(0, 1))]
    join = _join(m.handle(E.ListenerCompleted(E.Listener.LOST), 1.1))
    assert (join.member_id, join.generation_id, join.owned_generation) == ("", -1, -1)
    assert join.owned_partitions == frozenset()


def _garbage(generation: int) -> E.SyncGroupResponseReceived:
    err = ValueError("bad bytes")
    return E.SyncGroupResponseReceived(sync_ok(generation, tps()).result, generation, None, err)


def test_an_unreadable_assignment_rejoins_owning_nothing_as_of_its_generation() -> None:
    """The rejoin must not repeat the metadata the member joined with: a Stable group
    answers that with the current generation and the same unreadable bytes (Tansu does,
    test_malformed_peer).  Owning nothing as of generation 1 is both true and new."""
    m = make()
    first = _first_join(m)
    m.handle(join_ok(1, "b"), 0.0)
    out = m.handle(_garbage(1), 0.1)
    assert isinstance(out[0], A.RaiseToApplication)
    assert m.owned_generation == 1
    rejoin = _join(m.handle(E.TimerFired(), 1.0))
    assert (rejoin.generation_id, rejoin.owned_generation) == (1, 1)
    assert rejoin.owned_generation != first.owned_generation
    assert rejoin.owned_partitions == frozenset() == first.owned_partitions


def test_an_unreadable_assignment_releases_cooperative_partitions_before_the_rejoin() -> None:
    """Partitions kept from generation 1 are in doubt once generation 2's assignment
    cannot be read (it may have moved them): they are revoked, then the member rejoins
    claiming nothing as of generation 2 - never its old partitions under a newer
    generation than they were given in."""
    m = make(COOPERATIVE)
    to_stable(m, tps(0, 1), member="a")
    _join(_heard(m, REBALANCE_IN_PROGRESS, 1, 1.0))
    m.handle(join_ok(2, "a"), 2.0)
    out = m.handle(_garbage(2), 2.1)
    assert isinstance(out[0], A.RaiseToApplication)
    assert A.MarkRevoking(tps(0, 1)) in out
    assert A.InvokeOnPartitionsRevoked(tps(0, 1), False) in out
    assert not [a for a in out if isinstance(a, A.SendJoinGroup)]  # not before the revoke
    out = m.handle(E.ListenerCompleted(E.Listener.REVOKED), 2.2)
    assert A.SetAssignment(None) in out and m.owned == frozenset()
    rejoin = _join(out + m.handle(E.TimerFired(), 3.0))
    assert (rejoin.generation_id, rejoin.owned_generation) == (2, 2)
    assert rejoin.owned_partitions == frozenset()


# -- through the request builder: the bytes the broker compares -----------------------------


class _Captured:
    def __init__(self) -> None:
        self.requests: list[Any] = []

    async def send(self, node_id: int, request: Any, timeout: float | None = None) -> Any:
        self.requests.append(request)
        raise OSError("not sent: captured by the test")


def _requests() -> tuple[ClassicRequests, _Captured]:
    sub = SubscriptionState()
    sub.subscribe(["t"])
    config = ConsumerConfig(group_id="g", partition_assignment_strategy=("cooperative-sticky",))
    events: list[E.Event] = []
    requests = ClassicRequests(
        None,  # send() is replaced: no client is reached
        sub,
        config,
        [CooperativeStickyAssignor()],
        put=events.append,
        coordinator_id=lambda: 1,
        metrics=ConsumerMetrics,
    )
    captured = _Captured()
    requests.send = captured.send  # type: ignore[method-assign]
    return requests, captured


def test_the_refused_joiners_rejoin_sends_the_same_subscription_bytes() -> None:
    m = make(COOPERATIVE)
    first = _first_join(m)
    m.handle(join_ok(1, "b"), 7.0)
    rejoin = _join(m.handle(sync_error(REBALANCE_IN_PROGRESS, 1), 11.1))
    requests, captured = _requests()

    async def run() -> None:
        await requests.join_group(first)
        await requests.join_group(rejoin)

    asyncio.run(run())
    sent_first, sent_rejoin = captured.requests
    assert sent_first.protocols == sent_rejoin.protocols
    ((name, metadata),) = sent_rejoin.protocols
    assert name == "cooperative-sticky"
    assert decode_subscription(metadata).generation_id == -1


def test_the_subscription_carries_the_owned_generation_not_the_current_one() -> None:
    action = A.SendJoinGroup("r", "a", 2, tps(0, 1), owned_generation=1)
    requests, captured = _requests()
    asyncio.run(requests.join_group(action))
    ((_, metadata),) = captured.requests[0].protocols
    sub = decode_subscription(metadata)
    assert sub.generation_id == 1
    assert set(sub.owned_partitions) == set(tps(0, 1))
