"""The group-API builders against a real broker: the negotiated version is the highest
both sides speak, the broker accepts what we send, and the answers parse.

One member walks the whole life of a classic group member:
FindCoordinator -> JoinGroup (twice on v4+) -> SyncGroup -> Heartbeat ->
OffsetCommit -> OffsetFetch -> LeaveGroup.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.admin import ApiVersionRequest
from aiokafka.protocol.group import MemberAssignment, ProtocolMetadata

from aiogroup._protocol.group import (
    FindCoordinatorRequest,
    GroupApiRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    parse_find_coordinator,
    parse_heartbeat,
    parse_join_group,
    parse_leave_group,
    parse_offset_commit,
    parse_offset_fetch,
    parse_sync_group,
)
from aiogroup._protocol.schema import ApiStructs
from aiogroup.structs import OffsetAndMetadata, TopicPartition
from aiogroup.testing import KafkaBroker
from aiogroup.testing.caps import BrokerCaps

pytestmark = pytest.mark.integration

NONE = 0
MEMBER_ID_REQUIRED = 79
COORDINATOR_SETTLING = (14, 15, 16)
UNKNOWN_MEMBER_ID = 25
SESSION_TIMEOUT_MS = 6000


def metadata_kept(got: str | None, committed: str, caps: BrokerCaps) -> bool:
    """Kafka gives back the committed metadata string; a broker without
    ``caps.keeps_commit_metadata`` (Tansu) answers "" or null.  The unit tests pin the
    metadata bytes."""
    return got == committed if caps.keeps_commit_metadata else got in ("", None)


async def broker_versions(client: AIOKafkaClient, node_id: int) -> dict[int, tuple[int, int]]:
    resp = await client.send(node_id, ApiVersionRequest())
    assert resp.error_code == NONE
    return {key: (low, high) for key, low, high in resp.api_versions}


async def settled_coordinator(
    client: AIOKafkaClient, node: int, find: FindCoordinatorRequest
) -> Any:
    """FindCoordinator until the coordinator answers for the group: a fresh Kafka
    broker creates __consumer_offsets on the first lookup and then loads it
    (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR)."""
    for _ in range(100):
        found = parse_find_coordinator(await send(client, node, find))
        if found.error_code == NONE:
            probe = OffsetFetchRequest(find.key, None)
            answer = parse_offset_fetch(await send(client, found.node_id, probe))
            if answer.error_code not in COORDINATOR_SETTLING:
                return found
        elif found.error_code not in COORDINATOR_SETTLING:
            return found
        await asyncio.sleep(0.2)  # a client's retry backoff
    return found


def expected_version(versions: dict[int, tuple[int, int]], api: ApiStructs) -> int:
    return min(versions[api.api_key][1], api.max_version)


async def send(client: AIOKafkaClient, node_id: int, request: GroupApiRequest) -> Any:
    return await client.send(node_id, request)


async def test_member_lifecycle_uses_highest_common_versions(
    client: AIOKafkaClient, kafka_topic: Any, group_id: str, kafka_broker: KafkaBroker
) -> None:
    topic = await kafka_topic(partitions=2)
    bootstrap_node = client.get_random_node()
    versions = await broker_versions(client, bootstrap_node)

    find = FindCoordinatorRequest(group_id)
    coordinator = await settled_coordinator(client, bootstrap_node, find)
    assert find.api_version == expected_version(versions, find.API)
    assert coordinator.error_code == NONE
    assert coordinator.port > 0 and coordinator.host
    node = coordinator.node_id
    # The coordinator may be a different connection; ask it what it speaks.
    versions = await broker_versions(client, node)

    metadata = ProtocolMetadata(0, [topic], b"").encode()

    def join_request(member_id: str) -> JoinGroupRequest:
        return JoinGroupRequest(
            group_id=group_id,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=SESSION_TIMEOUT_MS,
            member_id=member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocols=[("range", metadata)],
            reason="aiogroup protocol test",
        )

    join_version = expected_version(versions, JoinGroupRequest.API)
    join = join_request("")
    first = parse_join_group(await send(client, node, join))
    assert join.api_version == join_version
    if join_version >= 4:
        assert first.error_code == MEMBER_ID_REQUIRED
        assert first.member_id
        join = join_request(first.member_id)
        joined = parse_join_group(await send(client, node, join))
        assert join.api_version == join_version
        member_id = first.member_id
    else:
        joined = first
        member_id = joined.member_id
    assert joined.error_code == NONE
    assert joined.member_id == member_id
    assert joined.leader == member_id
    assert joined.generation_id >= 0
    assert joined.protocol_name == "range"
    if join_version >= 7:
        assert joined.protocol_type == "consumer"
    assert [(m.member_id, m.metadata) for m in joined.members] == [(member_id, metadata)]

    assignment = MemberAssignment(0, [(topic, [0])], b"").encode()
    sync = SyncGroupRequest(
        group_id=group_id,
        generation_id=joined.generation_id,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name=joined.protocol_name,
        assignments=[(member_id, assignment)],
    )
    synced = parse_sync_group(await send(client, node, sync))
    assert sync.api_version == expected_version(versions, sync.API)
    assert synced.error_code == NONE
    assert synced.assignment == assignment
    decoded = MemberAssignment.decode(synced.assignment)
    assert decoded.assignment == [(topic, [0])]

    heartbeat = HeartbeatRequest(group_id, joined.generation_id, member_id, None)
    beat = parse_heartbeat(await send(client, node, heartbeat))
    assert heartbeat.api_version == expected_version(versions, heartbeat.API)
    assert beat.error_code == NONE

    tp = TopicPartition(topic, 0)
    commit = OffsetCommitRequest(
        group_id,
        joined.generation_id,
        member_id,
        None,
        {tp: OffsetAndMetadata(7, "aiogroup-meta")},
    )
    committed = parse_offset_commit(await send(client, node, commit))
    assert commit.api_version == expected_version(versions, commit.API)
    assert committed.errors == {(topic, 0): NONE}

    fetch = OffsetFetchRequest(group_id, [tp, TopicPartition(topic, 1)])
    fetched = parse_offset_fetch(await send(client, node, fetch))
    assert fetch.api_version == expected_version(versions, fetch.API)
    assert fetched.error_code == NONE
    offset, _epoch, meta, error = fetched.partitions[(topic, 0)]
    assert (offset, error) == (7, NONE)
    assert metadata_kept(meta, "aiogroup-meta", kafka_broker.caps)
    # Never committed: Kafka answers offset -1.
    assert fetched.partitions[(topic, 1)][0] == -1

    fetch_all = OffsetFetchRequest(group_id, None)
    everything = parse_offset_fetch(await send(client, node, fetch_all))
    assert everything.error_code == NONE
    assert everything.partitions[(topic, 0)][0] == 7

    leave = LeaveGroupRequest(group_id, member_id, None, reason="test done")
    left = parse_leave_group(await send(client, node, leave))
    assert leave.api_version == expected_version(versions, leave.API)
    assert left.error_code == NONE
    if leave.api_version >= 3:
        assert left.members == ((member_id, None, NONE),)

    # Gone for good: the coordinator no longer knows the member.
    after = parse_heartbeat(await send(client, node, heartbeat))
    assert after.error_code != NONE


class _Pinned:
    """Sends a builder at one forced version, to exercise the older layouts on the wire."""

    def __init__(self, request: GroupApiRequest, version: int) -> None:
        self.request = request
        self.version = version

    def prepare(self, versions: dict[int, tuple[int, int]]) -> Any:
        return self.request.build(self.version)


async def test_every_offset_and_coordinator_version_is_accepted(
    client: AIOKafkaClient, kafka_topic: Any, group_id: str, kafka_broker: KafkaBroker
) -> None:
    """Every FindCoordinator, OffsetCommit and OffsetFetch version both sides speak,
    without joining (a generation -1 commit is how standalone consumers commit)."""
    topic = await kafka_topic(partitions=1)
    bootstrap_node = client.get_random_node()
    versions = await broker_versions(client, bootstrap_node)
    tp = TopicPartition(topic, 0)

    find = FindCoordinatorRequest(group_id)
    node = None
    for version in range(expected_version(versions, find.API) + 1):
        found = parse_find_coordinator(await client.send(bootstrap_node, _Pinned(find, version)))
        assert found.error_code == NONE, version
        assert node in (None, found.node_id)
        node = found.node_id
    assert node is not None
    versions = await broker_versions(client, node)

    first_commit = max(versions[OffsetCommitRequest.API_KEY][0], 2)
    commit_versions = range(first_commit, expected_version(versions, OffsetCommitRequest.API) + 1)
    assert len(commit_versions) > 0
    for offset, version in enumerate(commit_versions, start=10):
        commit = OffsetCommitRequest(group_id, -1, "", None, {tp: OffsetAndMetadata(offset, "m")})
        result = parse_offset_commit(await client.send(node, _Pinned(commit, version)))
        assert result.errors == {(topic, 0): NONE}, version

        for fetch_version in (1, expected_version(versions, OffsetFetchRequest.API)):
            fetch = OffsetFetchRequest(group_id, [tp])
            fetched = parse_offset_fetch(await client.send(node, _Pinned(fetch, fetch_version)))
            assert fetched.partitions[(topic, 0)][0] == offset, (version, fetch_version)
            assert metadata_kept(fetched.partitions[(topic, 0)][2], "m", kafka_broker.caps)

    last = commit_versions[-1] - commit_versions[0] + 10
    fetch_versions = range(
        max(versions[OffsetFetchRequest.API_KEY][0], 1),
        expected_version(versions, OffsetFetchRequest.API) + 1,
    )
    for version in fetch_versions:
        fetched = parse_offset_fetch(
            await client.send(node, _Pinned(OffsetFetchRequest(group_id, [tp]), version))
        )
        assert fetched.error_code == NONE, version
        assert list(fetched.partitions) == [(topic, 0)]
        offset, _epoch, meta, error = fetched.partitions[(topic, 0)]
        assert (offset, error) == (last, NONE), version
        assert metadata_kept(meta, "m", kafka_broker.caps)


async def test_heartbeat_for_unknown_member_is_rejected_at_every_version(
    client: AIOKafkaClient, group_id: str
) -> None:
    """Old Heartbeat/LeaveGroup layouts reach the coordinator and come back parsed."""
    bootstrap_node = client.get_random_node()
    coordinator = parse_find_coordinator(
        await client.send(bootstrap_node, FindCoordinatorRequest(group_id))
    )
    node = coordinator.node_id
    versions = await broker_versions(client, node)
    heartbeat = HeartbeatRequest(group_id, 1, "nobody", None)
    for version in range(expected_version(versions, heartbeat.API) + 1):
        result = parse_heartbeat(await client.send(node, _Pinned(heartbeat, version)))
        assert result.error_code != NONE, version
