"""GroupCoordinator pieces that need no broker: the leader's assignment, the commit gate."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from aiogroup._coordination.classic_routine import GroupCoordinator
from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._protocol.classic_embedded import ConsumerSubscription, encode_subscription
from aiogroup._protocol.results import JoinGroupMember
from aiogroup._state.subscription import SubscriptionState
from aiogroup.assignors import resolve_assignors
from aiogroup.config import ConsumerConfig
from aiogroup.errors import (
    CommitFailedError,
    KafkaError,
    MalformedProtocolDataError,
    RebalanceListenerError,
)
from aiogroup.listeners import (
    AsyncConsumerRebalanceListener,
    ConsumerRebalanceListener,
    as_async_listener,
)
from aiogroup.structs import OffsetAndMetadata, TopicPartition


class FakeCluster:
    def __init__(self, partitions: dict[str, int]) -> None:
        self._partitions = partitions

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self._partitions.get(topic)
        return None if n is None else set(range(n))

    def topics(self, exclude_internal_topics: bool = True) -> set[str]:
        return set(self._partitions)

    def add_listener(self, listener: Any) -> None:
        pass

    def remove_listener(self, listener: Any) -> None:
        pass


class FakeClient:
    """Only what the leader's assignment touches; any request fails loudly."""

    def __init__(self, partitions: dict[str, int]) -> None:
        self.cluster = FakeCluster(partitions)

    def set_topics(self, topics: Any) -> asyncio.Future[bool]:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        fut.set_result(True)
        return fut

    def get_random_node(self) -> None:
        return None  # no broker: coordinator lookups fail and are retried after a backoff

    async def send(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("no request expected")


def make_coordinator(partitions: dict[str, int]) -> tuple[GroupCoordinator, SubscriptionState]:
    config = ConsumerConfig(group_id="g", session_timeout_ms=6000, heartbeat_interval_ms=1000)
    sub = SubscriptionState()
    coordinator = GroupCoordinator(
        FakeClient(partitions),  # type: ignore[arg-type]
        sub,
        config,
        resolve_assignors(["range"]),
    )
    return coordinator, sub


def member(member_id: str, topics: tuple[str, ...]) -> JoinGroupMember:
    return JoinGroupMember(member_id, None, encode_subscription(ConsumerSubscription(topics)))


async def test_leader_gives_a_member_with_undecodable_metadata_nothing() -> None:
    coordinator, sub = make_coordinator({"t": 4})
    action = A.ComputeAssignment(
        3, "range", (member("a", ("t",)), JoinGroupMember("bad", None, b"\x00\x07garbage"))
    )
    peer_errors: list[tuple[str, BaseException]] = []
    result = await coordinator._requests._assign(action, peer_errors)
    assert result["bad"].partitions == ()
    assert sorted(result["a"].partitions) == [TopicPartition("t", p) for p in range(4)]
    # Said to the machine (it raises it to the application), not reported from here.
    assert [member_id for member_id, _ in peer_errors] == ["bad"]
    assert isinstance(peer_errors[0][1], MalformedProtocolDataError)
    assert sub.pending_error is None


async def test_leader_refuses_an_assignor_it_does_not_have() -> None:
    coordinator, _ = make_coordinator({"t": 1})
    with pytest.raises(KafkaError, match="roundrobin"):
        await coordinator._requests._assign(
            A.ComputeAssignment(1, "roundrobin", (member("a", ("t",)),)), []
        )


async def test_commit_outside_a_generation_is_refused_without_a_request() -> None:
    coordinator, sub = make_coordinator({"t": 1})
    sub.subscribe(["t"])
    await coordinator.start()
    try:
        with pytest.raises(CommitFailedError, match="not part of an active generation"):
            await coordinator.commit_offsets(
                {TopicPartition("t", 0): OffsetAndMetadata(1, "")}, timeout=1
            )
        routine = coordinator._routine
        assert routine is not None and not routine.done()  # lookups fail, nothing crashed
    finally:
        await coordinator.abort()
    assert routine.cancelled()


TP = TopicPartition("t", 0)
HANDSHAKE = 10.0  # generous bound for a handshake that should take microseconds


class BlockingRevoke(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.entered.set()
        assert self.release.wait(HANDSHAKE)


async def test_coordinator_waits_for_an_overrunning_sync_callback_and_reports_it() -> None:
    """CancelListener while the callback runs in the thread: no cancel, no early
    ListenerCompleted (callbacks never overlap); a RebalanceListenerError when it returns."""
    coordinator, _ = make_coordinator({"t": 1})
    listener = BlockingRevoke()
    coordinator._listener = as_async_listener(listener, thread=coordinator._listener_thread)
    coordinator._listeners.start(
        E.Listener.REVOKED, lambda: coordinator._listener.on_partitions_revoked({TP})
    )
    assert await asyncio.to_thread(listener.entered.wait, HANDSHAKE)
    coordinator._perform(A.CancelListener(E.Listener.REVOKED, "on_partitions_revoked overran (1s)"))
    await asyncio.sleep(0.05)
    assert coordinator._inbox.empty()  # still waiting for the thread
    listener.release.set()
    done = await asyncio.wait_for(coordinator._inbox.get(), HANDSHAKE)
    assert isinstance(done, E.ListenerCompleted) and done.kind is E.Listener.REVOKED
    assert isinstance(done.error, RebalanceListenerError)
    assert "overran" in str(done.error) and "listener thread" in str(done.error)
    await coordinator.abort()


async def test_coordinator_still_cancels_an_overrunning_async_callback() -> None:
    coordinator, _ = make_coordinator({"t": 1})
    forever = asyncio.Event()

    class Slow(AsyncConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            await forever.wait()

    coordinator._listener = Slow()
    coordinator._listeners.start(
        E.Listener.REVOKED, lambda: coordinator._listener.on_partitions_revoked({TP})
    )
    await asyncio.sleep(0)
    coordinator._perform(A.CancelListener(E.Listener.REVOKED, "on_partitions_revoked overran (1s)"))
    done = await asyncio.wait_for(coordinator._inbox.get(), HANDSHAKE)
    assert isinstance(done, E.ListenerCompleted)
    assert isinstance(done.error, RebalanceListenerError) and "overran" in str(done.error)
    await coordinator.abort()


@pytest.mark.parametrize("ending", ["returns", "raises"])
async def test_new_partitions_are_held_until_the_assigned_callback_ends(ending: str) -> None:
    """Nothing of a new partition is fetched while on_partitions_assigned runs, so the
    offsets it returns are where delivery starts (Java runs the callback inside poll)."""
    coordinator, sub = make_coordinator({"t": 1})
    sub.subscribe(["t"])
    assignment = sub.set_assignment({TP})
    assert assignment is not None
    state = assignment.state(TP)
    state.seek(0)  # say the committed offset was already known
    release = asyncio.Event()

    class StartAt3(AsyncConsumerRebalanceListener):
        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
            await release.wait()
            if ending == "raises":
                raise RuntimeError("listener bug")
            return {TP: 3}

    coordinator._listener = StartAt3()
    coordinator._perform(A.InvokeOnPartitionsAssigned(frozenset({TP}), 1))
    assert not state.is_fetchable  # held from the moment the callback is started
    await asyncio.sleep(0)
    assert not state.is_fetchable
    release.set()
    done = await asyncio.wait_for(coordinator._inbox.get(), HANDSHAKE)
    assert isinstance(done, E.ListenerCompleted) and done.kind is E.Listener.ASSIGNED
    assert state.is_fetchable
    assert state.position == (3 if ending == "returns" else 0)
    assert (done.error is None) == (ending == "returns")
    await coordinator.abort()


async def test_a_subscribed_topic_missing_from_metadata_is_reported_and_asked_for_again() -> None:
    """A group formed before the topic reached the broker's metadata must not wait
    for the periodic refresh (minutes) to pick up its partitions: the shell tells the
    machine which topics are missing and performs the lookups it asks for (when, is
    the machine's: tests/unit/membership/test_retry_policy.py)."""
    coordinator, sub = make_coordinator({})
    client = coordinator._client
    calls = 0

    async def force_metadata_update() -> bool:
        nonlocal calls
        calls += 1
        if calls == 2:  # the topic becomes visible on the second refresh
            client.cluster._partitions["late"] = 2  # type: ignore[attr-defined]
        return True

    client.force_metadata_update = force_metadata_update  # type: ignore[attr-defined]
    sub.subscribe(["late"])
    assert coordinator._topics.snapshot() == frozenset({"late"})
    assert coordinator._topics.counts == {"late": None}
    for still_missing in (frozenset({"late"}), frozenset()):
        coordinator._perform(A.LookupMissingTopics(frozenset({"late"})))
        reported = await asyncio.wait_for(coordinator._inbox.get(), HANDSHAKE)
        assert reported == E.SubscribedTopicsMissing(still_missing)
    assert calls == 2
    fed: list[object] = []
    coordinator._feed = fed.append  # type: ignore[method-assign]
    # A follower's own metadata lagging the leader's is no reason to rejoin: the leader
    # decides whether the assignment missed the topic.
    coordinator._membership.member_id = "me"
    coordinator._membership.leader_id = "other"
    coordinator._on_metadata_poke()  # what the cluster listener triggers on the refresh
    assert fed == []
    # As leader, the assignment was made without the topic: rejoin.
    coordinator._topics.counts = {"late": None}
    coordinator._membership.leader_id = "me"
    coordinator._on_metadata_poke()
    assert [type(e).__name__ for e in fed] == ["MetadataChanged"]


async def test_leader_snapshot_keeps_what_the_assignor_saw() -> None:
    """A metadata answer for an older topic list can drop a topic for a moment; the
    counts the assignment was made on stand, so its return is not a 'change'."""
    coordinator, sub = make_coordinator({"t": 2})
    await coordinator._requests._assign(A.ComputeAssignment(1, "range", (member("a", ("t",)),)), [])
    coordinator._client.cluster._partitions.clear()  # type: ignore[attr-defined]
    sub.subscribe(["t"])
    missing = coordinator._topics.snapshot()
    assert coordinator._topics.counts == {"t": 2}
    assert missing == frozenset()  # nothing to ask for again


def test_every_action_has_a_performer_in_the_shell_of_each_machine_that_returns_it() -> None:
    from aiogroup._coordination import consumer_protocol_routine, share_routine
    from aiogroup._coordination.classic_routine import _PERFORMERS
    from aiogroup._membership import consumer_group, machine, share_group

    # From the module, not Action.__subclasses__(): dataclass(slots=True) replaces each class.
    declared = {v for v in vars(A).values() if isinstance(v, type) and issubclass(v, A.Action)} - {
        A.Action
    }
    assert set(_PERFORMERS) == machine.ACTION_TYPES
    assert set(consumer_protocol_routine._PERFORMERS) == consumer_group.ACTION_TYPES
    assert set(share_routine._PERFORMERS) == share_group.ACTION_TYPES
    # One vocabulary: no action is left that no machine returns.
    assert machine.ACTION_TYPES | consumer_group.ACTION_TYPES | share_group.ACTION_TYPES == declared
