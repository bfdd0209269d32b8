"""The consumer-protocol shell against a scripted broker: what goes on the wire, in order.

No sockets: a fake client answers each request from a script (the shape aiokafka's
client has: ``send``, ``ready``, ``get_random_node``, ``set_topics``), and the test
checks the requests the shell built from the machine's actions and what it did to
the SubscriptionState and the listener.  Awaited events, no sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import pytest
from aiokafka.errors import IncompatibleBrokerVersion, UnsupportedVersionError

from aiogroup import AsyncConsumerRebalanceListener, TopicPartition
from aiogroup._coordination.consumer_protocol_routine import ConsumerGroupCoordinator
from aiogroup._protocol.messages import (
    CONSUMER_GROUP_HEARTBEAT,
    FIND_COORDINATOR,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    TOPIC_METADATA,
)
from aiogroup._protocol.schema import struct_to_dict
from aiogroup._state.subscription import SubscriptionState
from aiogroup.config import ConsumerConfig
from aiogroup.errors import KafkaError
from aiogroup.listeners import as_async_listener
from aiogroup.structs import OffsetAndMetadata

TID = uuid.UUID(int=0x42)
VERSIONS = {10: (0, 6), 68: (0, 1), 3: (0, 12), 8: (0, 9), 9: (0, 9)}


class ScriptedBroker:
    """Answers group requests; records every request as (api name, fields)."""

    def __init__(self, *, heartbeat_supported: bool = True) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.heartbeat_supported = heartbeat_supported
        self.assignment: dict[uuid.UUID, list[int]] | None = {TID: [0, 1]}
        self.epoch = 0
        self.changed = asyncio.Event()

    # -- the client surface the shell uses -------------------------------------------------

    def get_random_node(self) -> int:
        return 1

    async def ready(self, node_id: int, group: Any = None) -> bool:
        return True

    def set_topics(self, topics: list[str]) -> None:
        pass

    async def send(self, node_id: int, request: Any, group: Any = None) -> Any:
        versions = dict(VERSIONS)
        if not self.heartbeat_supported:
            del versions[68]
        struct = request.prepare(versions)
        fields = struct_to_dict(struct)
        name = request.API.name
        self.requests.append((name, fields))
        self.changed.set()
        version = request.api_version
        if name == "FindCoordinator":
            return FIND_COORDINATOR.response(
                version,
                {
                    "throttle_time_ms": 0,
                    "coordinators": [
                        {
                            "key": "g",
                            "node_id": 1,
                            "host": "h",
                            "port": 1,
                            "error_code": 0,
                            "error_message": None,
                        }
                    ],
                },
            )
        if name == "ConsumerGroupHeartbeat":
            leaving = fields["member_epoch"] < 0
            self.epoch = fields["member_epoch"] if leaving else max(self.epoch, 1)
            assignment = None
            if not leaving and self.assignment is not None:
                assignment = {
                    "topic_partitions": [
                        {"topic_id": t, "partitions": p} for t, p in self.assignment.items()
                    ]
                }
            return CONSUMER_GROUP_HEARTBEAT.response(
                version,
                {
                    "throttle_time_ms": 0,
                    "error_code": 0,
                    "error_message": None,
                    "member_id": None,
                    "member_epoch": self.epoch,
                    "heartbeat_interval_ms": 60_000,
                    "assignment": assignment,
                },
            )
        if name == "Metadata":
            return TOPIC_METADATA.response(
                version,
                {
                    "throttle_time_ms": 0,
                    "brokers": [],
                    "cluster_id": "c",
                    "controller_id": 1,
                    "topics": [
                        {
                            "error_code": 0,
                            "name": "t",
                            "topic_id": TID,
                            "is_internal": False,
                            "partitions": [],
                            "topic_authorized_operations": 0,
                        }
                    ],
                    "cluster_authorized_operations": 0,
                },
            )
        if name == "OffsetCommit":
            return OFFSET_COMMIT.response(
                version,
                {
                    "throttle_time_ms": 0,
                    "topics": [
                        {
                            "name": t["name"],
                            "partitions": [
                                {"partition_index": p["partition_index"], "error_code": 0}
                                for p in t["partitions"]
                            ],
                        }
                        for t in fields["topics"]
                    ],
                },
            )
        if name == "OffsetFetch":  # nothing committed yet
            return OFFSET_FETCH.response(
                version,
                {
                    "throttle_time_ms": 0,
                    "groups": [
                        {
                            "group_id": "g",
                            "topics": [
                                {
                                    "name": t["name"],
                                    "partitions": [
                                        {
                                            "partition_index": p,
                                            "committed_offset": -1,
                                            "committed_leader_epoch": -1,
                                            "metadata": None,
                                            "error_code": 0,
                                        }
                                        for p in t["partition_indexes"]
                                    ],
                                }
                                for t in fields["groups"][0]["topics"]
                            ],
                            "error_code": 0,
                        }
                    ],
                },
            )
        raise AssertionError(f"unscripted request {name}")

    def of(self, name: str) -> list[dict[str, Any]]:
        return [f for n, f in self.requests if n == name]

    async def until(self, check: Any) -> None:
        """Re-check after every request, and every 50 ms for what follows an answer."""
        async with asyncio.timeout(10):
            while not check():
                self.changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.changed.wait(), 0.05)


class Recorder(AsyncConsumerRebalanceListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, set[TopicPartition]]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(("assigned", assigned))

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.calls.append(("lost", lost))


def coordinator(
    broker: ScriptedBroker, **options: Any
) -> tuple[ConsumerGroupCoordinator, SubscriptionState]:
    sub = SubscriptionState()
    cfg = ConsumerConfig(
        group_id="g", group_protocol="consumer", enable_auto_commit=False, **options
    )
    return ConsumerGroupCoordinator(broker, sub, cfg), sub  # type: ignore[arg-type]


async def test_join_assign_acknowledge_commit_and_leave() -> None:
    broker = ScriptedBroker()
    coord, sub = coordinator(broker, group_remote_assignor="uniform")
    listener = Recorder()
    await coord.start()
    try:
        coord.set_listener(as_async_listener(listener, thread=coord.listener_thread))
        sub.subscribe(["t"])
        expected = {TopicPartition("t", 0), TopicPartition("t", 1)}
        await broker.until(lambda: len(broker.of("ConsumerGroupHeartbeat")) >= 2)
        join, ack = broker.of("ConsumerGroupHeartbeat")[:2]
        # The join: epoch 0, the client's own member id, full state, empty owned list.
        assert join["member_epoch"] == 0 and join["member_id"] == coord.member_id
        assert join["subscribed_topic_names"] == ["t"] and join["server_assignor"] == "uniform"
        assert join["topic_partitions"] == []
        assert broker.of("Metadata"), "topic ids were resolved through Metadata"
        # The acknowledgement reports the reconciled partitions by topic id.
        assert ack["member_epoch"] == 1
        assert [(r["topic_id"], r["partitions"]) for r in ack["topic_partitions"]] == [
            (TID, [0, 1])
        ]
        assert ack["subscribed_topic_names"] is None  # unchanged since the join
        assert listener.calls == [("assigned", expected)]
        assert sub.assigned_partitions == expected
        await broker.until(lambda: coord.state.value == "STABLE")

        await coord.commit_offsets({TopicPartition("t", 0): OffsetAndMetadata(5, "")}, timeout=5)
        (commit,) = broker.of("OffsetCommit")
        assert commit["generation_id"] == 1 and commit["member_id"] == coord.member_id
        # group_metadata()'s input: the member epoch in the generation's place (KIP-848).
        identity = coord.identity()
        assert (identity.generation_id, identity.member_id) == (1, coord.member_id)
        assert identity.in_group and not identity.stopped

        await coord.close(timeout=5)
        leave = broker.of("ConsumerGroupHeartbeat")[-1]
        assert leave["member_epoch"] == -1
        assert listener.calls[-1] == ("revoked", expected)
        assert coord.state.value == "UNSUBSCRIBED"
        assert not coord.identity().in_group
    finally:
        await coord.abort()


async def test_static_member_leaves_with_minus_two() -> None:
    broker = ScriptedBroker()
    coord, sub = coordinator(broker, group_instance_id="i-1")
    await coord.start()
    try:
        sub.subscribe(["t"])
        await broker.until(lambda: coord.state.value == "STABLE")
        await coord.close(timeout=5)
        leave = broker.of("ConsumerGroupHeartbeat")[-1]
        assert leave["member_epoch"] == -2 and leave["instance_id"] == "i-1"
    finally:
        await coord.abort()


async def test_broker_without_the_protocol_is_reported_by_name() -> None:
    broker = ScriptedBroker(heartbeat_supported=False)
    coord, sub = coordinator(broker)
    await coord.start()
    try:
        sub.subscribe(["t"])
        reported = asyncio.Event()
        sub.add_error_callback(reported.set)
        async with asyncio.timeout(10):
            await reported.wait()
        with pytest.raises(UnsupportedVersionError, match=r"ConsumerGroupHeartbeat.*classic"):
            sub.raise_pending_error()
        assert coord.state.value == "FATAL"
    finally:
        await coord.abort()


async def test_commit_needs_v9() -> None:
    broker = ScriptedBroker()
    coord, sub = coordinator(broker)
    await coord.start()
    try:
        sub.subscribe(["t"])
        await broker.until(lambda: coord.state.value == "STABLE")
        VERSIONS[8] = (0, 8)
        with pytest.raises(IncompatibleBrokerVersion, match="member epoch"):
            await coord.commit_offsets(
                {TopicPartition("t", 0): OffsetAndMetadata(1, "")}, timeout=5
            )
    finally:
        VERSIONS[8] = (0, 9)
        await coord.abort()


async def test_a_listener_error_reaches_the_application_as_raised() -> None:
    class Raising(Recorder):
        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            raise LookupError("boom in assigned")

    broker = ScriptedBroker()
    coord, sub = coordinator(broker)
    await coord.start()
    try:
        coord.set_listener(as_async_listener(Raising(), thread=coord.listener_thread))
        sub.subscribe(["t"])
        await broker.until(lambda: sub.pending_error is not None)
        # Through the machine's RaiseToApplication, with the callback's own exception.
        with pytest.raises(LookupError, match="boom in assigned"):
            sub.raise_pending_error()
        assert coord.state.value != "FATAL"
    finally:
        await coord.abort()


async def test_a_crashed_routine_leaves_the_machine_fatal() -> None:
    broker = ScriptedBroker()
    coord, sub = coordinator(broker)
    await coord.start()
    try:
        sub.subscribe(["t"])
        await broker.until(lambda: coord.state.value == "STABLE")
        coord._inbox.put_nowait("not an event")  # the machine has no transition for it
        routine = coord._routine
        assert routine is not None
        await asyncio.wait({routine}, timeout=10)
        assert routine.done() and coord.state.value == "FATAL"
        with pytest.raises(KafkaError, match="group coordination failed"):
            sub.raise_pending_error()
    finally:
        await coord.abort()
