"""confluent-kafka's blocking ``Consumer`` (librdkafka), ``consume(num_messages)`` in a thread."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks.adapters import confluent_common as common
from benchmarks.adapters.base import Adapter, Hooks, Polled

VARIANTS = common.VARIANTS


class ConfluentAdapter(Adapter):
    client = "confluent"
    supports_cooperative = True
    buffer_bound = "queued.max.messages.kbytes (64 MiB) + fetch.max.bytes pre-fetched by librdkafka"
    imports = ("confluent_kafka",)

    consumer: Any = None

    async def assign(self, topic: str, partitions: list[int], group_id: str | None = None) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        def run() -> None:
            self.consumer = Consumer(common.config(self.bootstrap_servers, self.variant, group_id))
            self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])

        await asyncio.to_thread(run)

    async def subscribe(
        self,
        topic: str,
        group_id: str,
        hooks: Hooks,
        *,
        cooperative: bool,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        client_id: str | None = None,
    ) -> None:
        from confluent_kafka import Consumer

        extra = common.group_config(
            cooperative, session_timeout_ms, heartbeat_interval_ms, self.variant
        )
        if client_id is not None:
            extra["client.id"] = client_id

        def run() -> None:
            self.consumer = Consumer(
                common.config(self.bootstrap_servers, self.variant, group_id, **extra)
            )
            self.consumer.subscribe(
                [topic],
                on_assign=lambda _c, tps: hooks.on_sync("assigned", common.partitions_of(tps)),
                on_revoke=lambda _c, tps: hooks.on_sync(
                    "revoked",
                    common.partitions_of(tps),
                    lambda offsets: self._commit_sync(topic, offsets),
                ),
                on_lost=lambda _c, tps: hooks.on_sync("lost", common.partitions_of(tps)),
            )

        await asyncio.to_thread(run)

    def _poll_sync(self, timeout: float, track: bool, max_records: int | None = None) -> Polled:
        return common.tally(
            self.consumer.consume(num_messages=max_records or common.BATCH, timeout=timeout), track
        )

    async def poll(
        self, timeout: float, *, track: bool = False, max_records: int | None = None
    ) -> Polled:
        return await asyncio.to_thread(self._poll_sync, timeout, track, max_records)

    async def drain(self, records: int, timeout: float) -> tuple[int, int]:
        def run() -> tuple[int, int]:
            deadline = time.monotonic() + timeout
            count = nbytes = 0
            while count < records:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.label}: {count}/{records} after {timeout}s")
                got = self._poll_sync(1.0, False)
                count += got.count
                nbytes += got.nbytes
            return count, nbytes

        return await asyncio.to_thread(run)

    def _commit_sync(self, topic: str, offsets: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(topic, p, o) for p, o in offsets.items()]
        self.consumer.commit(offsets=tps, asynchronous=False)

    async def commit(self, topic: str, offsets: dict[int, int]) -> None:
        await asyncio.to_thread(self._commit_sync, topic, offsets)

    async def close(self) -> None:
        if self.consumer is not None:
            await asyncio.to_thread(self.consumer.close)


ADAPTER = ConfluentAdapter
