"""The share-group routine against a scripted coordinator: what goes on the wire, in
order, and what reaches the fetch side (``ShareMemberSink``).

No sockets: a fake client answers FindCoordinator, ShareGroupHeartbeat and Metadata from
a script; DescribeConfigs is refused (the member keeps the heartbeat interval as its
gate's bound).  Awaited events, no sleeps.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from aiogroup._coordination.share_routine import ShareGroupRoutine
from aiogroup._membership.codes import ErrorCode
from aiogroup._protocol.messages import FIND_COORDINATOR, TOPIC_METADATA
from aiogroup._protocol.schema import struct_to_dict
from aiogroup._protocol.share import SHARE_GROUP_HEARTBEAT
from aiogroup.errors import KafkaError
from aiogroup.metrics import ShareMetrics

TID = uuid.UUID(int=0x42)
VERSIONS = {10: (0, 6), 76: (1, 1), 3: (0, 12)}
WAIT = 5.0


class ScriptedCoordinator:
    def __init__(self) -> None:
        self.heartbeats: list[dict[str, Any]] = []
        #: Error codes for the next heartbeats (then 0).
        self.errors: list[int] = []
        self.epoch = 0
        self.beat = asyncio.Event()

    def get_random_node(self) -> int:
        return 1

    async def ready(self, node_id: int, group: Any = None) -> bool:
        return True

    def set_topics(self, topics: list[str]) -> None:
        self.topics = topics

    async def send(self, node_id: int, request: Any, group: Any = None) -> Any:
        if not hasattr(request, "API"):  # DescribeConfigs (aiokafka's): refused
            raise KafkaError("no DESCRIBE_CONFIGS permission")
        fields = struct_to_dict(request.prepare(VERSIONS))
        name, version = request.API.name, request.api_version
        if name == "FindCoordinator":
            row = {"key": "g", "node_id": 1, "host": "h", "port": 1, "error_code": 0}
            return FIND_COORDINATOR.response(
                version,
                {"throttle_time_ms": 0, "coordinators": [{**row, "error_message": None}]},
            )
        if name == "Metadata":
            topic = {
                "error_code": 0,
                "name": "t",
                "topic_id": TID,
                "is_internal": False,
                "partitions": [],
                "topic_authorized_operations": 0,
            }
            return TOPIC_METADATA.response(
                version,
                {
                    "throttle_time_ms": 0,
                    "brokers": [],
                    "cluster_id": "c",
                    "controller_id": 1,
                    "topics": [topic],
                    "cluster_authorized_operations": 0,
                },
            )
        assert name == "ShareGroupHeartbeat", name
        self.heartbeats.append(fields)
        self.beat.set()
        code = self.errors.pop(0) if self.errors else 0
        epoch = fields["member_epoch"]
        if code:
            answer_epoch = -1
        elif epoch < 0:
            answer_epoch = -1
        else:
            self.epoch += 1 if epoch == 0 else 0
            answer_epoch = self.epoch
        assignment = (
            {"topic_partitions": [{"topic_id": TID, "partitions": [0, 1]}]}
            if epoch == 0 and not code
            else None
        )
        return SHARE_GROUP_HEARTBEAT.response(
            version,
            {
                "throttle_time_ms": 0,
                "error_code": code,
                "error_message": None,
                "member_id": None,
                "member_epoch": answer_epoch,
                "heartbeat_interval_ms": 20,
                "assignment": assignment,
            },
        )


class Sink:
    def __init__(self) -> None:
        self.assignments: list[dict[tuple[str, int], uuid.UUID]] = []
        self.drops: list[str] = []
        self.gates: list[float | None] = []
        self.errors: list[tuple[BaseException, bool]] = []
        self.changed = asyncio.Event()

    def set_assignment(self, partitions: dict[tuple[str, int], uuid.UUID]) -> None:
        self.assignments.append(dict(partitions))
        self.changed.set()

    def drop_acquired(self, reason: str) -> None:
        self.drops.append(reason)
        self.changed.set()

    def set_membership_valid_until(self, deadline: float | None) -> None:
        self.gates.append(deadline)

    def report_error(self, exc: BaseException, *, fatal: bool) -> None:
        self.errors.append((exc, fatal))
        self.changed.set()


async def until(sink: Sink, check: Any) -> None:
    async def wait() -> None:
        while not check():
            sink.changed.clear()
            await sink.changed.wait()

    await asyncio.wait_for(wait(), WAIT)


def routine(client: ScriptedCoordinator, sink: Sink) -> ShareGroupRoutine:
    return ShareGroupRoutine(
        client,  # type: ignore[arg-type]
        "g",
        sink,
        rack_id="r1",
        retry_backoff=0.01,
        retry_backoff_max=0.05,
        metrics=ShareMetrics(),
    )


async def test_join_names_the_assignment_and_hands_it_to_the_fetcher_then_leaves() -> None:
    client, sink = ScriptedCoordinator(), Sink()
    r = routine(client, sink)
    await r.start(frozenset({"t"}))
    await until(sink, lambda: sink.assignments)
    assert sink.assignments[-1] == {("t", 0): TID, ("t", 1): TID}
    join = client.heartbeats[0]
    assert (join["member_epoch"], join["subscribed_topic_names"], join["rack_id"]) == (
        0,
        ["t"],
        "r1",
    )
    assert join["member_id"] == r.member_id and uuid.UUID(r.member_id)  # KIP-1082
    assert any(g is not None for g in sink.gates)  # the gate opened
    await r.close(timeout=WAIT)
    leave = client.heartbeats[-1]
    assert (leave["member_epoch"], leave["member_id"]) == (-1, r.member_id)
    assert sink.drops == ["leaving the group"]
    assert sink.gates[-1] is None


async def test_a_fence_drops_the_acquired_records_and_rejoins_with_the_same_member_id() -> None:
    client, sink = ScriptedCoordinator(), Sink()
    r = routine(client, sink)
    await r.start(frozenset({"t"}))
    await until(sink, lambda: sink.assignments)
    client.errors = [ErrorCode.FENCED_MEMBER_EPOCH]
    await until(sink, lambda: sink.drops and len(sink.assignments) >= 3)
    assert sink.drops[0].startswith("fenced by the coordinator (FENCED_MEMBER_EPOCH)")
    assert sink.assignments[1] == {}  # stopped reading at once
    assert sink.assignments[2] == {("t", 0): TID, ("t", 1): TID}
    joins = [h for h in client.heartbeats if h["member_epoch"] == 0]
    assert len(joins) == 2 and {h["member_id"] for h in joins} == {r.member_id}
    await r.close(timeout=WAIT)


async def test_a_group_of_another_type_is_fatal_and_reported() -> None:
    client, sink = ScriptedCoordinator(), Sink()
    client.errors = [ErrorCode.GROUP_ID_NOT_FOUND]
    r = routine(client, sink)
    await r.start(frozenset({"t"}))
    await until(sink, lambda: sink.errors)
    exc, fatal = sink.errors[0]
    assert fatal and "'g' is in use by a classic or consumer group" in str(exc)
    assert r.machine.failed
    await r.close(timeout=WAIT)  # ends at once: the routine is done
