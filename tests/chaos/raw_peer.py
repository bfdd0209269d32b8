"""A group member driven by hand that joins with malformed subscription metadata.

It speaks the group API directly (the project's request builders over a bare
aiokafka connection), so it can send what no correct client would: JoinGroup with
subscription bytes that do not decode.  It follows the group like any member: it
rejoins when the coordinator says a rebalance is in progress, sends a follower's
empty SyncGroup and heartbeats.  It joins after the real members, so it should
never lead; ``led`` records whether it did (the test asserts it did not).
"""

from __future__ import annotations

import asyncio
import contextlib

from aiokafka import AIOKafkaClient

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

NONE = 0
MEMBER_ID_REQUIRED = 79
REBALANCE_IN_PROGRESS = 27


class MalformedPeer:
    def __init__(
        self, bootstrap: str, group: str, metadata: bytes, protocol: str, session_ms: int
    ) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.metadata = metadata
        self.protocol = protocol
        self.session_ms = session_ms
        self.member_id = ""
        self.generation = -1
        self.joins = 0
        self.led = False
        self.errors: list[BaseException] = []
        self._client: AIOKafkaClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._node = -1

    async def start(self) -> None:
        self._client = AIOKafkaClient(bootstrap_servers=self.bootstrap, request_timeout_ms=30000)
        await self._client.bootstrap()
        found = parse_find_coordinator(
            await self._client.send(
                self._client.get_random_node(), FindCoordinatorRequest(self.group)
            )
        )
        assert found.error_code == NONE, found
        self._node = found.node_id
        self._task = asyncio.create_task(self._run())

    async def _join_and_sync(self) -> None:
        assert self._client is not None
        while True:
            request = JoinGroupRequest(
                self.group,
                self.session_ms,
                self.session_ms,
                self.member_id,
                None,
                "consumer",
                [(self.protocol, self.metadata)],
            )
            joined = parse_join_group(await self._client.send(self._node, request))
            if joined.error_code == MEMBER_ID_REQUIRED:
                self.member_id = joined.member_id
                continue
            if joined.error_code == REBALANCE_IN_PROGRESS:
                continue
            assert joined.error_code == NONE, joined
            self.member_id = joined.member_id
            self.generation = joined.generation_id
            self.joins += 1
            self.led = self.led or joined.leader == self.member_id
            sync = SyncGroupRequest(
                self.group,
                joined.generation_id,
                self.member_id,
                None,
                "consumer",
                joined.protocol_name,
                [],
            )
            synced = parse_sync_group(await self._client.send(self._node, sync))
            if synced.error_code == REBALANCE_IN_PROGRESS:
                continue
            assert synced.error_code == NONE, synced
            return

    async def _run(self) -> None:
        assert self._client is not None
        try:
            await self._join_and_sync()
            while True:
                await asyncio.sleep(self.session_ms / 6000)  # the heartbeat interval
                beat = parse_heartbeat(
                    await self._client.send(
                        self._node,
                        HeartbeatRequest(self.group, self.generation, self.member_id, None),
                    )
                )
                if beat.error_code == REBALANCE_IN_PROGRESS:
                    await self._join_and_sync()
                else:
                    assert beat.error_code == NONE, beat
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # kept for the test to report
            self.errors.append(exc)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._client is not None:
            if self.member_id:
                with contextlib.suppress(Exception):
                    await self._client.send(
                        self._node, LeaveGroupRequest(self.group, self.member_id, None)
                    )
            await self._client.close()
