"""kafka-python 3 ``KafkaConsumer``, a blocking client, driven from a worker thread."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from benchmarks.adapters.base import Adapter, Hooks, Polled, SyncCommit, Variant, merge_range

VARIANTS = {
    "defaults": Variant("defaults", "library defaults (max_poll_records=500), poll(timeout_ms)"),
    "tuned": Variant(
        "tuned",
        "max_poll_records=10000, max_partition_fetch_bytes=8 MiB, fetch_max_bytes=64 MiB",
        {
            "max_poll_records": 10_000,
            "max_partition_fetch_bytes": 8 * 1024 * 1024,
            "fetch_max_bytes": 64 * 1024 * 1024,
        },
    ),
}


def _listener(hooks: Hooks, commit: SyncCommit) -> Any:
    from kafka import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            hooks.on_sync("revoked", sorted(tp.partition for tp in revoked), commit)

        def on_partitions_assigned(self, assigned: Any) -> None:
            hooks.on_sync("assigned", sorted(tp.partition for tp in assigned))

        def on_partitions_lost(self, lost: Any) -> None:
            hooks.on_sync("lost", sorted(tp.partition for tp in lost))

    return Listener()


class KafkaPythonAdapter(Adapter):
    client = "kafka-python"
    supports_cooperative = True
    buffer_bound = "fetches only inside poll(): at most one fetch response in flight"
    imports = ("kafka",)

    consumer: Any = None

    def _new(self, group_id: str | None, **extra: Any) -> Any:
        from kafka import KafkaConsumer

        self.consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **self.variant.options,
            **extra,
        )
        return self.consumer

    async def assign(self, topic: str, partitions: list[int], group_id: str | None = None) -> None:
        from kafka import TopicPartition

        def run() -> None:
            consumer = self._new(group_id)
            tps = [TopicPartition(topic, p) for p in partitions]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)

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
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
        from kafka.coordinator.assignors.range import RangePartitionAssignor

        strategy = [CooperativeStickyAssignor] if cooperative else [RangePartitionAssignor]

        def run() -> None:
            consumer = self._new(
                group_id,
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                **({} if client_id is None else {"client_id": client_id}),
                partition_assignment_strategy=strategy,
            )
            consumer.subscribe(
                [topic],
                listener=_listener(hooks, lambda offsets: self._commit_sync(topic, offsets)),
            )

        await asyncio.to_thread(run)

    def _poll_sync(self, timeout: float, track: bool, max_records: int | None = None) -> Polled:
        batches = self.consumer.poll(timeout_ms=int(timeout * 1000), max_records=max_records)
        out = Polled()
        for tp, recs in batches.items():
            out.count += len(recs)
            out.nbytes += sum(len(r.value) for r in recs)
            if track and recs:
                merge_range(out.ranges, tp.partition, recs[0].offset, recs[-1].offset)
        return out

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
        from kafka import OffsetAndMetadata, TopicPartition

        self.consumer.commit(
            {TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}
        )

    async def commit(self, topic: str, offsets: dict[int, int]) -> None:
        await asyncio.to_thread(self._commit_sync, topic, offsets)

    async def close(self) -> None:
        if self.consumer is not None:
            await asyncio.to_thread(self.consumer.close)


ADAPTER = KafkaPythonAdapter
