"""The classic shell against a scripted broker on virtual time: what it performs, in order.

No sockets and no sleeps: a fake client answers each group request from a script
(the surface of aiokafka's client the shell uses), and the loop's clock jumps to the
next timer when nothing is ready, so heartbeats, backoffs and retries happen at once.
The test checks the requests the shell built from the machine's actions and what it
did to the SubscriptionState and the listener; the wire itself is the integration
tier's business.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.client import ConnectionGroup
from aiokafka.errors import IncompatibleBrokerVersion, KafkaConnectionError

from aiogroup import AsyncConsumerRebalanceListener
from aiogroup._coordination.classic_routine import GroupCoordinator
from aiogroup._membership.codes import ErrorCode
from aiogroup._membership.machine import MemberState
from aiogroup._protocol.classic_embedded import ConsumerAssignment, encode_assignment
from aiogroup._protocol.messages import (
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    SYNC_GROUP,
)
from aiogroup._protocol.schema import struct_to_dict
from aiogroup._state.subscription import FetchStatus, SubscriptionState
from aiogroup.assignors import resolve_assignors
from aiogroup.config import ConsumerConfig
from aiogroup.errors import CommitFailedError, KafkaError, MalformedProtocolDataError
from aiogroup.listeners import as_async_listener
from aiogroup.structs import OffsetAndMetadata, TopicPartition
from tests.unit.virtual_clock import run_virtual

VERSIONS = {10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 8: (0, 9), 9: (0, 9)}
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
MEMBER = "m-1"
C = ErrorCode

#: One scripted answer: an error code for the API, or an exception the send raises.
Answer = int | BaseException


class FakeCluster:
    def __init__(self) -> None:
        self.partitions: dict[str, int] = {"t": 2}
        self.listeners: list[Callable[[Any], None]] = []

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self.partitions.get(topic)
        return None if n is None else set(range(n))

    def topics(self, exclude_internal_topics: bool = True) -> set[str]:
        return set(self.partitions)

    def add_listener(self, listener: Callable[[Any], None]) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: Callable[[Any], None]) -> None:
        self.listeners.remove(listener)

    def changed(self) -> None:
        for listener in list(self.listeners):
            listener(self)


class ScriptedBroker:
    """Answers classic group requests; records every request as (api name, fields, group)."""

    def __init__(self) -> None:
        self.cluster = FakeCluster()
        self.requests: list[tuple[str, dict[str, Any], Any]] = []
        self.script: dict[str, list[Answer]] = {}
        self.committed: dict[tuple[str, int], int] = {}
        #: JoinGroup answers wait for this when set (a broker holding the join).
        self.hold_join: asyncio.Event | None = None
        self.generation = 0
        self.topics: list[str] = []
        #: Other members the JoinGroup answer names (as raw JoinGroup member rows).
        self.peers: list[dict[str, Any]] = []

    # -- the client surface the shell uses -------------------------------------------------

    def get_random_node(self) -> int:
        return 0

    async def ready(self, node_id: int, group: Any = None) -> bool:
        return True

    def set_topics(self, topics: list[str]) -> asyncio.Future[bool]:
        self.topics = list(topics)
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        fut.set_result(True)
        return fut

    async def force_metadata_update(self) -> bool:
        return True

    async def send(self, node_id: int, request: Any, group: Any = None) -> Any:
        struct = request.prepare(VERSIONS)
        fields = struct_to_dict(struct)
        name = request.API.name
        self.requests.append((name, fields, group))
        answer: Answer = 0
        if self.script.get(name):
            answer = self.script[name].pop(0)
        if isinstance(answer, BaseException):
            raise answer
        if name == "JoinGroup" and self.hold_join is not None:
            await self.hold_join.wait()
        return self._answer(name, request.api_version, fields, answer)

    def _answer(self, name: str, version: int, fields: dict[str, Any], code: int) -> Any:
        if name == "FindCoordinator":
            entry = {"key": "g", "node_id": 1, "host": "h", "port": 1}
            entry |= {"error_code": code, "error_message": None}
            return FIND_COORDINATOR.response(
                version, {"throttle_time_ms": 0, "coordinators": [entry]}
            )
        if name == "JoinGroup":
            if code == 0:
                self.generation += 1
            members = [
                {"member_id": MEMBER, "group_instance_id": None, "metadata": p["metadata"]}
                for p in fields["protocols"][:1]
            ] + self.peers
            return JOIN_GROUP.response(
                version,
                {
                    "throttle_time_ms": 0,
                    "error_code": code,
                    "generation_id": self.generation,
                    "protocol_type": "consumer",
                    "protocol_name": fields["protocols"][0]["name"],
                    "leader": MEMBER,
                    "skip_assignment": False,
                    "member_id": MEMBER,
                    "members": members,
                },
            )
        if name == "SyncGroup":
            mine = [a["assignment"] for a in fields["assignments"] if a["member_id"] == MEMBER]
            return SYNC_GROUP.response(
                version,
                {
                    "throttle_time_ms": 0,
                    "error_code": code,
                    "protocol_type": "consumer",
                    "protocol_name": fields["protocol_name"],
                    "assignment": mine[0] if mine else b"",
                },
            )
        if name == "Heartbeat":
            return HEARTBEAT.response(version, {"throttle_time_ms": 0, "error_code": code})
        if name == "LeaveGroup":
            return LEAVE_GROUP.response(
                version, {"throttle_time_ms": 0, "error_code": code, "members": []}
            )
        if name == "OffsetCommit":
            topics = []
            for t in fields["topics"]:
                rows = []
                for p in t["partitions"]:
                    if code == 0:
                        self.committed[(t["name"], p["partition_index"])] = p["committed_offset"]
                    rows.append({"partition_index": p["partition_index"], "error_code": code})
                topics.append({"name": t["name"], "partitions": rows})
            return OFFSET_COMMIT.response(version, {"throttle_time_ms": 0, "topics": topics})
        if name == "OffsetFetch":
            topics = [
                {
                    "name": t["name"],
                    "partitions": [
                        {
                            "partition_index": p,
                            "committed_offset": self.committed.get((t["name"], p), -1),
                            "committed_leader_epoch": -1,
                            "metadata": "",
                            "error_code": 0,
                        }
                        for p in t["partition_indexes"]
                    ],
                }
                for t in fields["groups"][0]["topics"]
            ]
            group = {"group_id": "g", "topics": topics, "error_code": code}
            return OFFSET_FETCH.response(version, {"throttle_time_ms": 0, "groups": [group]})
        raise AssertionError(f"unscripted request {name}")

    def of(self, name: str) -> list[dict[str, Any]]:
        return [f for n, f, _ in self.requests if n == name]

    def names(self) -> list[str]:
        return [n for n, _, _ in self.requests]

    async def until(self, check: Callable[[], bool]) -> None:
        """Re-check every 10 ms of virtual time until ``check()`` holds.

        The machine's state has no event to await; on the virtual clock a poll costs no
        real time, and the bound (600 virtual seconds) is many session timeouts.
        """
        async with asyncio.timeout(600):
            while not check():  # noqa: ASYNC110 - virtual time, see above
                await asyncio.sleep(0.01)


class Recorder(AsyncConsumerRebalanceListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, set[TopicPartition]]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(("assigned", assigned))

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.calls.append(("lost", lost))


def make(**options: Any) -> tuple[GroupCoordinator, SubscriptionState, ScriptedBroker]:
    config = ConsumerConfig(
        group_id="g",
        session_timeout_ms=10_000,
        heartbeat_interval_ms=1000,
        enable_auto_commit=False,
        **options,
    )
    broker = ScriptedBroker()
    sub = SubscriptionState()
    coordinator = GroupCoordinator(
        broker,  # type: ignore[arg-type]
        sub,
        config,
        resolve_assignors(["range"]),
    )
    return coordinator, sub, broker


async def joined(
    listener: Any = None, **options: Any
) -> tuple[GroupCoordinator, SubscriptionState, ScriptedBroker, Recorder]:
    coordinator, sub, broker = make(**options)
    recorder = listener or Recorder()
    coordinator.set_listener(as_async_listener(recorder, thread=coordinator.listener_thread))
    sub.subscribe(["t"])
    await coordinator.start()
    await broker.until(lambda: coordinator.state is MemberState.STABLE)
    return coordinator, sub, broker, recorder


def test_join_lead_assign_heartbeat_commit_fetch_and_leave() -> None:
    async def scenario() -> None:
        coordinator, sub, broker, recorder = await joined()
        assert broker.names()[:3] == ["FindCoordinator", "JoinGroup", "SyncGroup"]
        assert recorder.calls == [("assigned", {TP0, TP1})]
        assert sub.assigned_partitions == {TP0, TP1}
        assert coordinator.member_id == MEMBER and coordinator.generation_id == 1
        identity = coordinator.identity()  # what group_metadata() decides on
        assert (identity.generation_id, identity.member_id) == (1, MEMBER)
        assert identity.in_group and not identity.stopped and identity.state == "STABLE"
        # Three heartbeat intervals of virtual time: the heartbeats flow.
        loop = asyncio.get_running_loop()
        start = loop.time()
        await broker.until(lambda: loop.time() - start >= 3.5)
        assert len(broker.of("Heartbeat")) >= 3
        await coordinator.commit_offsets({TP0: OffsetAndMetadata(5, "")}, timeout=5)
        commit = broker.of("OffsetCommit")[-1]
        assert (commit["generation_id"], commit["member_id"]) == (1, MEMBER)
        found = await coordinator.fetch_committed_offsets([TP0, TP1], timeout=5)
        assert found == {TP0: OffsetAndMetadata(5, ""), TP1: None}
        await coordinator.close(timeout=5)
        assert broker.names()[-1] == "LeaveGroup"
        assert recorder.calls[-1] == ("revoked", {TP0, TP1})
        assert not coordinator.identity().in_group

    run_virtual(scenario())


def test_commit_after_not_coordinator_finds_the_coordinator_again() -> None:
    async def scenario() -> None:
        coordinator, _, broker, _ = await joined()
        broker.script["OffsetCommit"] = [C.NOT_COORDINATOR]
        finds = len(broker.of("FindCoordinator"))
        await coordinator.commit_offsets({TP0: OffsetAndMetadata(3, "")}, timeout=30)
        assert broker.committed[("t", 0)] == 3
        assert len(broker.of("FindCoordinator")) > finds
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_commit_retries_a_transport_failure_and_a_loading_coordinator() -> None:
    async def scenario() -> None:
        coordinator, _, broker, _ = await joined()
        broker.script["OffsetCommit"] = [KafkaConnectionError(), C.COORDINATOR_LOAD_IN_PROGRESS]
        await coordinator.commit_offsets({TP0: OffsetAndMetadata(4, "")}, timeout=30)
        assert len(broker.of("OffsetCommit")) == 3 and broker.committed[("t", 0)] == 4
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_commit_in_a_rebalancing_group_fails_with_commit_failed() -> None:
    async def scenario() -> None:
        coordinator, _, broker, _ = await joined()
        broker.script["OffsetCommit"] = [C.REBALANCE_IN_PROGRESS]
        with pytest.raises(CommitFailedError, match="REBALANCE_IN_PROGRESS"):
            await coordinator.commit_offsets({TP0: OffsetAndMetadata(4, "")}, timeout=30)
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_commit_with_a_fatal_code_raises_it() -> None:
    async def scenario() -> None:
        coordinator, _, broker, _ = await joined()
        broker.script["OffsetCommit"] = [C.OFFSET_METADATA_TOO_LARGE]
        with pytest.raises(KafkaError, match="OFFSET_METADATA_TOO_LARGE"):
            await coordinator.commit_offsets({TP0: OffsetAndMetadata(4, "")}, timeout=30)
        broker.script["OffsetCommit"] = [IncompatibleBrokerVersion()]
        with pytest.raises(IncompatibleBrokerVersion):
            await coordinator.commit_offsets({TP0: OffsetAndMetadata(4, "")}, timeout=30)
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_fetch_retries_then_raises_what_cannot_be_retried() -> None:
    async def scenario() -> None:
        coordinator, _, broker, _ = await joined()
        broker.committed[("t", 1)] = 9
        fetches = len(broker.of("OffsetFetch"))  # the assignment's own lookup is done
        broker.script["OffsetFetch"] = [
            KafkaConnectionError(),
            C.NOT_COORDINATOR,
            C.COORDINATOR_LOAD_IN_PROGRESS,
        ]
        assert await coordinator.fetch_committed_offsets([TP1], timeout=30) == {
            TP1: OffsetAndMetadata(9, "")
        }
        assert len(broker.of("OffsetFetch")) == fetches + 4
        broker.script["OffsetFetch"] = [C.GROUP_AUTHORIZATION_FAILED]
        with pytest.raises(KafkaError):
            await coordinator.fetch_committed_offsets([TP1], timeout=30)
        assert await coordinator.fetch_committed_offsets([], timeout=1) == {}
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_fetch_asks_for_stable_offsets_and_waits_out_a_pending_transaction() -> None:
    """KIP-447: a new owner must not read the offset from before a transactional
    commit still in flight; the broker answers UNSTABLE_OFFSET_COMMIT until it ends."""

    async def scenario() -> None:
        coordinator, _, broker, _ = await joined()
        broker.committed[("t", 1)] = 9
        fetches = len(broker.of("OffsetFetch"))
        broker.script["OffsetFetch"] = [C.UNSTABLE_OFFSET_COMMIT, C.UNSTABLE_OFFSET_COMMIT]
        assert await coordinator.fetch_committed_offsets([TP1], timeout=30) == {
            TP1: OffsetAndMetadata(9, "")
        }
        sent = broker.of("OffsetFetch")
        assert len(sent) == fetches + 3
        assert all(fetch["require_stable"] for fetch in sent)
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_user_assigned_commit_is_a_simple_commit() -> None:
    async def scenario() -> None:
        coordinator, sub, broker = make()
        sub.assign_from_user([TP0])
        await coordinator.start()
        await coordinator.commit_offsets({TP0: OffsetAndMetadata(2, "")}, timeout=30)
        commit = broker.of("OffsetCommit")[-1]
        assert (commit["generation_id"], commit["member_id"]) == (-1, "")
        assert "JoinGroup" not in broker.names()
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_committed_offsets_become_positions_or_resets() -> None:
    async def scenario() -> None:
        coordinator, sub, broker = make()
        broker.committed[("t", 0)] = 7
        sub.assign_from_user([TP0, TP1])
        await coordinator.start()
        assignment = sub.assignment
        assert assignment is not None
        await broker.until(
            lambda: all(
                st.status is not FetchStatus.AWAITING_COMMITTED for st in assignment.states()
            )
        )
        assert assignment.state(TP0).position == 7
        assert assignment.state(TP1).status is FetchStatus.AWAITING_RESET
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_a_partition_count_change_rejoins() -> None:
    async def scenario() -> None:
        coordinator, sub, broker, _ = await joined()
        joins = len(broker.of("JoinGroup"))
        broker.cluster.partitions["t"] = 3
        broker.cluster.changed()
        await broker.until(
            lambda: len(broker.of("JoinGroup")) > joins and coordinator.state is MemberState.STABLE
        )
        assert sub.assigned_partitions == {TP0, TP1, TopicPartition("t", 2)}
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_a_pattern_subscription_follows_the_matching_topics() -> None:
    async def scenario() -> None:
        coordinator, sub, broker = make()
        coordinator.set_listener(as_async_listener(Recorder(), thread=coordinator.listener_thread))
        sub.subscribe_pattern(re.compile("t.*"))
        await coordinator.start()
        await broker.until(lambda: coordinator.state is MemberState.STABLE)
        assert broker.topics == []  # a pattern asks for every topic's metadata
        broker.cluster.partitions["t2"] = 1
        joins = len(broker.of("JoinGroup"))
        broker.cluster.changed()
        await broker.until(
            lambda: len(broker.of("JoinGroup")) > joins and coordinator.state is MemberState.STABLE
        )
        assert TopicPartition("t2", 0) in sub.assigned_partitions
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_unsubscribe_revokes_and_leaves() -> None:
    async def scenario() -> None:
        coordinator, sub, broker, recorder = await joined()
        sub.unsubscribe()
        await broker.until(lambda: "LeaveGroup" in broker.names())
        assert ("revoked", {TP0, TP1}) in recorder.calls
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_a_failed_heartbeat_finds_the_coordinator_again() -> None:
    async def scenario() -> None:
        coordinator, _, broker, _ = await joined()
        finds = len(broker.of("FindCoordinator"))
        broker.script["Heartbeat"] = [KafkaConnectionError(), C.NOT_COORDINATOR]
        await broker.until(lambda: len(broker.of("FindCoordinator")) >= finds + 2)
        await broker.until(lambda: coordinator.state is MemberState.STABLE)
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_a_heartbeat_saying_rebalance_rejoins_keeping_the_partitions() -> None:
    async def scenario() -> None:
        coordinator, sub, broker, _ = await joined()
        broker.script["Heartbeat"] = [C.REBALANCE_IN_PROGRESS]
        await broker.until(lambda: len(broker.of("JoinGroup")) == 2)
        await broker.until(lambda: coordinator.state is MemberState.STABLE)
        assert sub.assigned_partitions == {TP0, TP1}
        assert coordinator.generation_id == 2
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_close_during_a_held_join_leaves_on_another_connection() -> None:
    async def scenario() -> None:
        coordinator, sub, broker = make()
        broker.hold_join = asyncio.Event()
        coordinator.set_listener(as_async_listener(Recorder(), thread=coordinator.listener_thread))
        sub.subscribe(["t"])
        await coordinator.start()
        await broker.until(lambda: "JoinGroup" in broker.names())
        await coordinator.close(timeout=5)
        assert coordinator.state is MemberState.CLOSED
        # No member id was assigned yet (first join): nothing to leave with.
        assert "LeaveGroup" not in broker.names()

    run_virtual(scenario())


def test_close_during_a_rejoin_sends_leave_group_outside_the_coordination_connection() -> None:
    async def scenario() -> None:
        coordinator, _, broker, _ = await joined()
        broker.hold_join = asyncio.Event()
        broker.script["Heartbeat"] = [C.REBALANCE_IN_PROGRESS]
        await broker.until(lambda: len(broker.of("JoinGroup")) == 2)
        await coordinator.close(timeout=5)
        name, fields, group = broker.requests[-1]
        assert name == "LeaveGroup" and fields["members"][0]["member_id"] == MEMBER
        # Not behind the held JoinGroup on the coordination connection.
        assert group is ConnectionGroup.DEFAULT
        assert {g for n, _, g in broker.requests if n == "JoinGroup"} == {
            ConnectionGroup.COORDINATION
        }

    run_virtual(scenario())


def test_a_listener_that_raises_reaches_the_application() -> None:
    class Raising(Recorder):
        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            raise ValueError("boom")

    async def scenario() -> None:
        coordinator, sub, _, _ = await joined(Raising())
        with pytest.raises(Exception, match="boom"):
            sub.raise_pending_error()
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_abort_sends_nothing() -> None:
    async def scenario() -> None:
        coordinator, _, broker, _ = await joined()
        sent = len(broker.requests)
        await coordinator.abort()
        assert len(broker.requests) == sent
        with pytest.raises(KafkaError, match="not running"):
            await coordinator.commit_offsets({TP0: OffsetAndMetadata(1, "")}, timeout=5)

    run_virtual(scenario())


def test_a_crashed_child_ends_the_routine_and_reports() -> None:
    async def scenario() -> None:
        coordinator, sub, _, _ = await joined()

        async def crash() -> None:
            raise RuntimeError("bug in a child")

        coordinator._children.spawn(crash(), "crash")
        routine = coordinator._routine
        assert routine is not None
        await asyncio.wait({routine})
        with pytest.raises(KafkaError, match="bug in a child"):
            sub.raise_pending_error()
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_the_assignment_reaches_the_sync_request() -> None:
    async def scenario() -> None:
        coordinator, _, broker, _ = await joined()
        sync = broker.of("SyncGroup")[0]
        (row,) = sync["assignments"]
        assert row["member_id"] == MEMBER
        assert row["assignment"] == encode_assignment(ConsumerAssignment(partitions=(TP0, TP1)))
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_a_broker_without_the_api_version_is_reported_through_the_machine() -> None:
    async def scenario() -> None:
        coordinator, sub, broker, _ = await joined()
        broker.script["Heartbeat"] = [IncompatibleBrokerVersion("no Heartbeat v4")]
        await broker.until(lambda: sub.pending_error is not None)
        with pytest.raises(IncompatibleBrokerVersion, match="no Heartbeat v4"):
            sub.raise_pending_error()
        # Not fatal: the failed heartbeat is retried like a lost connection.
        assert coordinator.state is not MemberState.FATAL
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_a_peer_with_undecodable_metadata_is_reported_and_gets_nothing() -> None:
    async def scenario() -> None:
        coordinator, sub, broker = make()
        broker.peers = [{"member_id": "bad", "group_instance_id": None, "metadata": b"\x00\x07x"}]
        coordinator.set_listener(as_async_listener(Recorder(), thread=coordinator.listener_thread))
        sub.subscribe(["t"])
        await coordinator.start()
        await broker.until(lambda: coordinator.state is MemberState.STABLE)
        with pytest.raises(MalformedProtocolDataError):
            sub.raise_pending_error()
        sync = broker.of("SyncGroup")[0]
        bad = [row for row in sync["assignments"] if row["member_id"] == "bad"]
        assert bad and bad[0]["assignment"] == encode_assignment(ConsumerAssignment(()))
        assert sub.assigned_partitions == {TP0, TP1}
        await coordinator.close(timeout=5)

    run_virtual(scenario())


@pytest.mark.parametrize("cause", ["denied", "connection"])
def test_a_committed_offset_lookup_failure_reaches_the_application_only_if_final(
    cause: str,
) -> None:
    async def scenario() -> None:
        coordinator, sub, broker = make()
        failure: Answer = (
            C.GROUP_AUTHORIZATION_FAILED if cause == "denied" else KafkaConnectionError()
        )
        broker.script["OffsetFetch"] = [failure]
        sub.assign_from_user([TP0])
        await coordinator.start()
        assignment = sub.assignment
        assert assignment is not None
        await broker.until(
            lambda: assignment.state(TP0).status is not FetchStatus.AWAITING_COMMITTED
        )
        if cause == "denied":  # asking again cannot cure it: the application hears
            with pytest.raises(KafkaError, match="OffsetFetch"):
                sub.raise_pending_error()
        else:  # retried: the second lookup found nothing committed
            assert sub.pending_error is None
        assert len(broker.of("OffsetFetch")) == 2
        assert assignment.state(TP0).status is FetchStatus.AWAITING_RESET
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_a_crashed_routine_leaves_the_machine_fatal() -> None:
    async def scenario() -> None:
        coordinator, sub, _, _ = await joined()
        coordinator._inbox.put_nowait("not an event")  # the machine has no transition
        routine = coordinator._routine
        assert routine is not None
        await asyncio.wait({routine})
        assert coordinator.state is MemberState.FATAL
        with pytest.raises(KafkaError, match="group coordination failed"):
            sub.raise_pending_error()
        await coordinator.close(timeout=5)

    run_virtual(scenario())


def test_a_generation_ends_its_children_before_the_next_ones_start() -> None:
    """An auto-commit of generation 1 still running when generation 2 is assigned is
    cancelled and finished before generation 2's on_partitions_assigned starts."""
    seen: list[str] = []

    class Watching(Recorder):
        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            seen.append(f"assigned, old commit {'done' if old.done() else 'running'}")
            await super().on_partitions_assigned(assigned)

    async def stuck_commit() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            seen.append("old commit ended")

    async def scenario() -> None:
        nonlocal old
        coordinator, _, broker, _ = await joined(Watching())
        seen.clear()
        old = coordinator._generation.spawn(stuck_commit(), "auto-commit")
        broker.script["Heartbeat"] = [C.REBALANCE_IN_PROGRESS]
        await broker.until(lambda: coordinator.generation_id == 2 and bool(seen))
        await broker.until(lambda: coordinator.state is MemberState.STABLE)
        assert seen == ["old commit ended", "assigned, old commit done"]
        assert old.cancelled()
        await coordinator.close(timeout=5)

    old: asyncio.Task[Any] = None  # type: ignore[assignment]
    run_virtual(scenario())
