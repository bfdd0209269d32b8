"""A group leader that hands out garbage assignment bytes, on the real broker.

The leader is a hand-driven member speaking the group API directly (the project's
request builders over aiokafka's connection), so it can send what no correct
client would.  The aiogroup member that receives the bytes must say exactly what
is wrong through the application's poll, keep its coordination task alive, rejoin,
and work normally once the leader assigns properly: one bad peer costs a
generation, not the consumer.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct

import pytest
from aiokafka import AIOKafkaClient, AIOKafkaProducer

from aiogroup import (
    AsyncConsumerRebalanceListener,
    GroupConsumer,
    MalformedProtocolDataError,
    TopicPartition,
)
from aiogroup._protocol.classic_embedded import (
    ConsumerAssignment,
    ConsumerSubscription,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from aiogroup._protocol.group import (
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
    parse_find_coordinator,
    parse_heartbeat,
    parse_join_group,
    parse_sync_group,
)
from aiogroup._protocol.results import JoinGroupResult
from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration

SESSION_MS = 6000
WAIT = 60.0
NONE = 0
MEMBER_ID_REQUIRED = 79
REBALANCE_IN_PROGRESS = 27
PARTITIONS = 3

#: Assignment version 0 announcing 5 topics, then nothing: truncated.
TRUNCATED = struct.pack(">hi", 0, 5)
#: A topic name length of -7: negative lengths are never valid for a non-null string.
NEGATIVE_LENGTH = struct.pack(">hih", 0, 1, -7) + bytes(16)
#: No such version: versions are never negative.
BAD_VERSION = struct.pack(">h", -1)


class RawLeader:
    """A member driven by hand: joins first (so it leads), assigns what it is told."""

    def __init__(self, client: AIOKafkaClient, group: str, topic: str) -> None:
        self.client = client
        self.group = group
        self.topic = topic
        self.node = -1
        self.member_id = ""
        self.generation = -1
        self.rebalancing = asyncio.Event()
        self._beat: asyncio.Task[None] | None = None

    async def find_coordinator(self) -> None:
        """FindCoordinator, retried while a fresh broker creates its offsets topic
        (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS), as every client does."""
        request = FindCoordinatorRequest(self.group)
        deadline = asyncio.get_running_loop().time() + WAIT
        while True:
            found = parse_find_coordinator(
                await self.client.send(self.client.get_random_node(), request)
            )
            if found.error_code not in (14, 15) or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.1)
        assert found.error_code == NONE, found
        self.node = found.node_id

    def _join_request(self) -> JoinGroupRequest:
        metadata = encode_subscription(ConsumerSubscription(topics=(self.topic,)))
        return JoinGroupRequest(
            self.group,
            SESSION_MS,
            SESSION_MS,
            self.member_id,
            None,
            "consumer",
            [("range", metadata)],
        )

    async def join(self) -> JoinGroupResult:
        for _ in range(int(WAIT / 0.1)):
            joined = parse_join_group(await self.client.send(self.node, self._join_request()))
            if joined.error_code == MEMBER_ID_REQUIRED:
                self.member_id = joined.member_id
                continue
            if joined.error_code in (14, 15, 16):  # a fresh broker still loading the group
                await asyncio.sleep(0.1)
                await self.find_coordinator()
                continue
            assert joined.error_code == NONE, joined
            self.member_id = joined.member_id
            self.generation = joined.generation_id
            return joined
        raise AssertionError(f"JoinGroup still refused after {WAIT}s: {joined}")

    async def sync(self, joined: JoinGroupResult, assignments: dict[str, bytes]) -> None:
        assert joined.leader == self.member_id, "the hand-driven member must lead"
        request = SyncGroupRequest(
            self.group,
            joined.generation_id,
            self.member_id,
            None,
            "consumer",
            joined.protocol_name,
            list(assignments.items()),
        )
        synced = parse_sync_group(await self.client.send(self.node, request))
        assert synced.error_code == NONE, synced
        self.rebalancing.clear()
        if self._beat is None:
            self._beat = asyncio.create_task(self._heartbeats())

    async def _heartbeats(self) -> None:
        """Keep the session alive; flag a rebalance so the test rejoins on its terms."""
        while True:
            request = HeartbeatRequest(self.group, self.generation, self.member_id, None)
            beat = parse_heartbeat(await self.client.send(self.node, request))
            if beat.error_code == REBALANCE_IN_PROGRESS:
                self.rebalancing.set()
            else:
                assert beat.error_code == NONE, beat
            await asyncio.sleep(SESSION_MS / 6000)  # the heartbeat interval, not a wait for state

    async def close(self) -> None:
        if self._beat is not None:
            self._beat.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._beat
        if self.member_id:
            with contextlib.suppress(Exception):
                await self.client.send(
                    self.node, LeaveGroupRequest(self.group, self.member_id, None)
                )


class Journal(AsyncConsumerRebalanceListener):
    def __init__(self) -> None:
        self.assigned: list[set[TopicPartition]] = []
        self.changed = asyncio.Event()

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.assigned.append(set(assigned))
        self.changed.set()


async def produce(bootstrap: str, topic: str) -> dict[TopicPartition, int]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        ends = {}
        for p in range(PARTITIONS):
            md = await (await producer.send(topic, f"r{p}".encode(), partition=p))
            ends[TopicPartition(topic, p)] = md.offset + 1
        return ends
    finally:
        await producer.stop()


@pytest.mark.parametrize(
    "garbage", [TRUNCATED, NEGATIVE_LENGTH, BAD_VERSION], ids=["truncated", "negative", "version"]
)
async def test_garbage_assignment_reaches_the_poll_and_the_member_recovers(
    client: AIOKafkaClient,
    bootstrap_servers: str,
    kafka_topic: TopicFactory,
    group_id: str,
    garbage: bytes,
) -> None:
    topic = await kafka_topic(partitions=PARTITIONS)
    ends = await produce(bootstrap_servers, topic)
    leader = RawLeader(client, group_id, topic)
    await leader.find_coordinator()
    alone = await leader.join()
    await leader.sync(alone, {leader.member_id: encode_assignment(ConsumerAssignment(()))})

    journal = Journal()
    consumer = GroupConsumer(
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        partition_assignment_strategy=("range",),
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=1000,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        consumer.subscribe([topic], listener=journal)

        # Round 1: the aiogroup member joins; the leader hands it garbage.
        await asyncio.wait_for(leader.rebalancing.wait(), WAIT)
        joined = await leader.join()
        theirs = [m for m in joined.members if m.member_id != leader.member_id]
        assert len(theirs) == 1, joined.members
        victim = theirs[0].member_id
        # The leader can read what the aiogroup member subscribed to.
        assert decode_subscription(theirs[0].metadata).topics == (topic,)
        await leader.sync(
            joined, {leader.member_id: encode_assignment(ConsumerAssignment(())), victim: garbage}
        )

        # The application's waiting poll gets an error naming the problem.
        with pytest.raises(MalformedProtocolDataError, match="assignment") as caught:
            await consumer.getmany(timeout_ms=int(WAIT * 1000))
        assert "assignment" in str(caught.value)
        assert consumer.assignment() == set()
        assert journal.assigned == []  # that rebalance did not complete for this member

        # Round 2: the member rejoins by itself; a proper assignment now works.
        await asyncio.wait_for(leader.rebalancing.wait(), WAIT)
        joined = await leader.join()
        assert victim in {m.member_id for m in joined.members}
        everything = tuple(TopicPartition(topic, p) for p in range(PARTITIONS))
        await leader.sync(
            joined,
            {
                leader.member_id: encode_assignment(ConsumerAssignment(())),
                victim: encode_assignment(ConsumerAssignment(everything)),
            },
        )
        await asyncio.wait_for(journal.changed.wait(), WAIT)
        assert journal.assigned == [set(everything)]
        assert consumer.assignment() == set(everything)

        got: dict[TopicPartition, list[int]] = {tp: [] for tp in everything}

        async def read_all() -> None:
            while any(len(got[tp]) < ends[tp] for tp in everything):
                for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                    got[tp].extend(r.offset for r in records)

        await asyncio.wait_for(read_all(), WAIT)
        assert got == {tp: list(range(ends[tp])) for tp in everything}
    finally:
        await consumer.stop()
        await leader.close()
