"""aiokafka 0.14 ``AIOKafkaConsumer``: the asyncio client aiogroup is measured against."""

from __future__ import annotations

from typing import Any

from benchmarks.adapters import arrow_build
from benchmarks.adapters.base import Adapter, AsyncCommit, Hooks, Polled, Variant, merge_range

VARIANTS = {
    "defaults": Variant("defaults", "library defaults, getmany(timeout_ms=1000)"),
    "tuned": Variant(
        "tuned",
        "max_partition_fetch_bytes=8 MiB, fetch_max_bytes=64 MiB (bigger fetches per round trip)",
        {"max_partition_fetch_bytes": 8 * 1024 * 1024, "fetch_max_bytes": 64 * 1024 * 1024},
    ),
    "tuned+arrow": Variant(
        "tuned+arrow",
        "tuned getmany, then the same Arrow RecordBatch aiogroup returns, built from the records",
        {"max_partition_fetch_bytes": 8 * 1024 * 1024, "fetch_max_bytes": 64 * 1024 * 1024},
        columnar=True,
    ),
}


def _listener(hooks: Hooks, commit: AsyncCommit) -> Any:
    from aiokafka import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            await hooks.on_async("revoked", sorted(tp.partition for tp in revoked), commit)

        async def on_partitions_assigned(self, assigned: Any) -> None:
            await hooks.on_async("assigned", sorted(tp.partition for tp in assigned))

    return Listener()


class AiokafkaAdapter(Adapter):
    client = "aiokafka"
    buffer_bound = "one fetch response per partition (max_partition_fetch_bytes each)"
    imports = ("aiokafka",)

    consumer: Any = None

    def _new(self, group_id: str | None, **extra: Any) -> Any:
        from aiokafka import AIOKafkaConsumer

        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **self.variant.options,
            **extra,
        )
        return self.consumer

    async def assign(self, topic: str, partitions: list[int], group_id: str | None = None) -> None:
        from aiokafka import TopicPartition

        consumer = self._new(group_id)
        await consumer.start()
        tps = [TopicPartition(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)

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
        if cooperative:
            raise NotImplementedError("aiokafka has no cooperative rebalancing")
        consumer = self._new(
            group_id,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            **({} if client_id is None else {"client_id": client_id}),
        )
        await consumer.start()
        consumer.subscribe(
            [topic], listener=_listener(hooks, lambda offsets: self.commit(topic, offsets))
        )

    async def poll(
        self, timeout: float, *, track: bool = False, max_records: int | None = None
    ) -> Polled:
        batches = await self.consumer.getmany(
            timeout_ms=int(timeout * 1000), max_records=max_records
        )
        out = Polled()
        if self.variant.columnar:
            if not batches:
                return out
            schema = getattr(self, "_schema", None) or arrow_build.schema()
            self._schema = schema
            records = [r for recs in batches.values() for r in recs]
            batch = arrow_build.from_records(records, schema)
            out.count = batch.num_rows
            out.nbytes = arrow_build.value_bytes(batch)
            if track:
                for tp, recs in batches.items():
                    merge_range(out.ranges, tp.partition, recs[0].offset, recs[-1].offset)
            return out
        for tp, recs in batches.items():
            out.count += len(recs)
            out.nbytes += sum(len(r.value) for r in recs)
            if track and recs:
                merge_range(out.ranges, tp.partition, recs[0].offset, recs[-1].offset)
        return out

    async def commit(self, topic: str, offsets: dict[int, int]) -> None:
        from aiokafka import TopicPartition

        await self.consumer.commit({TopicPartition(topic, p): o for p, o in offsets.items()})

    async def close(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()


ADAPTER = AiokafkaAdapter
