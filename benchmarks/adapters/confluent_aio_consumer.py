"""confluent-kafka's asyncio ``AIOConsumer`` (``confluent_kafka.aio``), ``consume()`` batches."""

from __future__ import annotations

from typing import Any

from benchmarks.adapters import confluent_common as common
from benchmarks.adapters.base import Adapter, Hooks, NotAvailable, Polled

VARIANTS = common.VARIANTS


def check_available() -> None:
    try:
        from confluent_kafka.aio import AIOConsumer  # noqa: F401
    except ImportError as exc:
        raise NotAvailable(f"confluent_kafka.aio is missing in this version: {exc}") from exc


class ConfluentAioAdapter(Adapter):
    client = "confluent-aio"
    supports_cooperative = True
    buffer_bound = "queued.max.messages.kbytes (64 MiB) + fetch.max.bytes pre-fetched by librdkafka"
    imports = ("confluent_kafka.aio",)

    consumer: Any = None

    async def assign(self, topic: str, partitions: list[int], group_id: str | None = None) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition
        from confluent_kafka.aio import AIOConsumer

        self.consumer = AIOConsumer(common.config(self.bootstrap_servers, self.variant, group_id))
        await self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])

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
        from confluent_kafka.aio import AIOConsumer

        extra = common.group_config(
            cooperative, session_timeout_ms, heartbeat_interval_ms, self.variant
        )
        if client_id is not None:
            extra["client.id"] = client_id
        self.consumer = AIOConsumer(
            common.config(self.bootstrap_servers, self.variant, group_id, **extra)
        )

        async def on_assign(_c: Any, tps: Any) -> None:
            await hooks.on_async("assigned", common.partitions_of(tps))

        async def on_revoke(_c: Any, tps: Any) -> None:
            await hooks.on_async(
                "revoked",
                common.partitions_of(tps),
                lambda offsets: self.commit(topic, offsets),
            )

        async def on_lost(_c: Any, tps: Any) -> None:
            await hooks.on_async("lost", common.partitions_of(tps))

        await self.consumer.subscribe(
            [topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost
        )

    async def poll(
        self, timeout: float, *, track: bool = False, max_records: int | None = None
    ) -> Polled:
        messages = await self.consumer.consume(
            num_messages=max_records or common.BATCH, timeout=timeout
        )
        return common.tally(messages, track)

    async def commit(self, topic: str, offsets: dict[int, int]) -> None:
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(topic, p, o) for p, o in offsets.items()]
        await self.consumer.commit(offsets=tps, asynchronous=False)

    async def close(self) -> None:
        if self.consumer is not None:
            await self.consumer.close()


ADAPTER = ConfluentAioAdapter
