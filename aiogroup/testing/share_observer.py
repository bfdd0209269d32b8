"""The broker's view of a share group's members, sampled from outside them.

Why: a share consumer that was frozen (SIGSTOP) or cut off cannot say when the broker
dropped it, and the share checker needs that moment - the broker gives a dropped
member's records back then.  :class:`ShareGroupObserver` asks the coordinator
(ShareGroupDescribe, on its own connection) every ``interval`` seconds which members
the share group has, and appends a ``gone`` event to a
:class:`~aiogroup.testing.share_checker.ShareRecorder` when a member id disappears:
``since`` is the send time of the last sample that still showed it, ``t`` the arrival
of the first that did not, so the drop lies in ``[since, t]``.  As the classic
observer (:mod:`aiogroup.testing.observer`) does, an absence counts once a second
sample confirms it, and a failed sample is retried, never read as "gone".

Members are named by their client id: give each consumer the name it records under
as its client id (the peers in :mod:`aiogroup.testing.share_peers` do).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from aiogroup.testing.share_checker import ShareRecorder

__all__ = ["ShareGroupObserver"]


class ShareGroupObserver:
    """Samples a share group's members; ``gone`` events into ``recorder``."""

    def __init__(
        self,
        bootstrap_servers: str,
        group: str,
        recorder: ShareRecorder,
        *,
        interval: float = 0.1,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be > 0, not {interval}")
        self.bootstrap_servers = bootstrap_servers
        self.group = group
        self.recorder = recorder
        self.interval = interval
        #: Samples answered, failed samples, and the member ids seen per client id.
        self.samples = 0
        self.failures = 0
        self.seen: dict[str, set[str]] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> ShareGroupObserver:
        self._task = asyncio.create_task(self._run(), name=f"share-observer-{self.group}")
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def __aenter__(self) -> ShareGroupObserver:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(
            bootstrap_servers=self.bootstrap_servers, request_timeout_ms=5_000
        )
        await admin.start()
        try:
            await self._sample_forever(admin)
        finally:
            await admin.close()

    async def _sample_forever(self, admin: Any) -> None:
        from aiokafka.errors import KafkaError

        from aiogroup._protocol.share_admin import (
            ShareGroupDescribeRequest,
            parse_share_group_describe,
        )

        #: member id -> (client id, send time of the last sample showing it)
        present: dict[str, tuple[str, float]] = {}
        #: member id -> (client id, since, first sample without it): awaiting confirmation.
        missing: dict[str, tuple[str, float, float]] = {}
        while True:
            sent = time.monotonic()
            try:
                node = await admin.find_coordinator(self.group)
                found = parse_share_group_describe(
                    await admin._client.send(node, ShareGroupDescribeRequest(self.group))
                )
            except (KafkaError, OSError, ValueError):
                self.failures += 1
                await asyncio.sleep(self.interval)
                continue
            arrived = time.monotonic()
            if found.error_code:
                self.failures += 1  # not created yet, or the coordinator moving
                await asyncio.sleep(self.interval)
                continue
            self.samples += 1
            now = {m.member_id: m.client_id for m in found.members}
            for member_id, client_id in now.items():
                self.seen.setdefault(client_id, set()).add(member_id)
                missing.pop(member_id, None)
                present[member_id] = (client_id, sent)
            for member_id in [m for m in present if m not in now]:
                client_id, since = present[member_id]
                if member_id in missing:
                    _, since, first_absent = missing.pop(member_id)
                    del present[member_id]
                    self.recorder.add(client_id, "gone", t=first_absent, since=since)
                else:
                    missing[member_id] = (client_id, since, arrived)
            await asyncio.sleep(self.interval)
