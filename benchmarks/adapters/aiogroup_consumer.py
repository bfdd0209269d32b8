"""aiogroup's ``GroupConsumer``: per-record ``getmany`` and the columnar ``getmany_arrow``."""

from __future__ import annotations

import importlib
from typing import Any

from benchmarks.adapters import arrow_build
from benchmarks.adapters.base import (
    Adapter,
    AsyncCommit,
    Hooks,
    NotAvailable,
    Polled,
    Variant,
    merge_range,
)

_BIG_FETCH = {"max_partition_fetch_bytes": 8 * 1024 * 1024, "fetch_max_bytes": 64 * 1024 * 1024}
#: The application's opt-in to glibc thresholds that keep freed pages
#: (aiogroup._support.allocator): a process-wide choice, so a tuned run makes it.
_TUNED_ENV = {"AIOGROUP_MALLOC_TUNE": "1"}

VARIANTS = {
    "defaults": Variant("defaults", "library defaults, getmany(timeout_ms=1000)"),
    "tuned": Variant(
        "tuned",
        "max_partition_fetch_bytes=8 MiB, fetch_max_bytes=64 MiB (same as aiokafka tuned), "
        "worker started with AIOGROUP_MALLOC_TUNE=1 (glibc keeps freed response pages)",
        dict(_BIG_FETCH),
        env=dict(_TUNED_ENV),
    ),
    "tuned-nocrc": Variant(
        "tuned-nocrc",
        "tuned with check_crcs=False: batches' CRC-32C not checked, as librdkafka's default "
        "(check.crcs=false); a like-against-like row, not a recommended setting",
        {**_BIG_FETCH, "check_crcs": False},
        env=dict(_TUNED_ENV),
    ),
    "buffer16": Variant(
        "buffer16",
        "defaults with max_buffered_bytes=16 MiB (memory scenario: does RSS follow the bound?)",
        {"max_buffered_bytes": 16 * 1024 * 1024},
    ),
    "mmap128k": Variant(
        "mmap128k",
        "defaults, worker started with MALLOC_MMAP_THRESHOLD_=131072 (memory scenario: "
        "glibc returns freed response copies to the OS at once instead of keeping them)",
        env={"MALLOC_MMAP_THRESHOLD_": "131072"},
    ),
    "kip848": Variant(
        "kip848",
        "defaults with group_protocol='consumer' (KIP-848: the broker's assignor, no "
        "rebalance barrier; Apache Kafka 4 only)",
        {"group_protocol": "consumer"},
    ),
    "arrow": Variant(
        "arrow",
        "tuned, getmany_arrow(): one pyarrow.RecordBatch per call, no per-record objects",
        dict(_BIG_FETCH),
        env=dict(_TUNED_ENV),
        columnar=True,
    ),
}


def check_available() -> None:
    """The consumer is being written alongside the benchmarks: say so instead of failing."""
    for module in (
        "aiogroup.consumer",
        "aiogroup._fetch.fetcher",
        "aiogroup._coordination.classic_routine",
    ):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise NotAvailable(f"{module} cannot be imported yet: {exc}") from exc


class _Listener:
    def __init__(self, hooks: Hooks, commit: AsyncCommit) -> None:
        self.hooks = hooks
        self.commit = commit

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.hooks.on_async("revoked", sorted(tp.partition for tp in revoked), self.commit)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.hooks.on_async("assigned", sorted(tp.partition for tp in assigned))

    async def on_partitions_lost(self, lost: Any) -> None:
        await self.hooks.on_async("lost", sorted(tp.partition for tp in lost))


_BOUND = "max_buffered_bytes ({limit}): fetched, undelivered record bytes, transient copies"


class AiogroupAdapter(Adapter):
    client = "aiogroup"
    supports_cooperative = True
    buffer_bound = _BOUND.format(limit="64 MiB default")
    imports = ("aiogroup.consumer",)

    consumer: Any = None

    def describe_bound(self) -> str:
        limit = self.variant.options.get("max_buffered_bytes")
        if limit is None:
            return self.buffer_bound
        return _BOUND.format(limit=f"{limit / 2**20:.0f} MiB")

    def _new(self, group_id: str | None, **extra: Any) -> Any:
        from aiogroup.consumer import GroupConsumer

        self.consumer = GroupConsumer(
            bootstrap_servers=self.bootstrap_servers,
            group_id=group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **self.variant.options,
            **extra,
        )
        return self.consumer

    async def assign(self, topic: str, partitions: list[int], group_id: str | None = None) -> None:
        from aiogroup.structs import TopicPartition

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
        strategy = ("cooperative-sticky",) if cooperative else ("range",)
        classic: dict[str, Any] = {
            "session_timeout_ms": session_timeout_ms,
            "heartbeat_interval_ms": heartbeat_interval_ms,
            "partition_assignment_strategy": strategy,
        }
        if self.variant.options.get("group_protocol") == "consumer":
            classic = {}  # the broker owns session, heartbeat interval and assignment
        consumer = self._new(
            group_id,
            **({} if client_id is None else {"client_id": client_id}),
            **classic,
        )
        await consumer.start()
        consumer.subscribe(
            [topic], listener=_Listener(hooks, lambda offsets: self.commit(topic, offsets))
        )

    async def poll(
        self, timeout: float, *, track: bool = False, max_records: int | None = None
    ) -> Polled:
        out = Polled()
        if self.variant.columnar:
            batch = await self.consumer.getmany_arrow(
                timeout_ms=int(timeout * 1000), max_records=max_records
            )
            if batch is None or batch.num_rows == 0:
                return out
            out.count = batch.num_rows
            out.nbytes = arrow_build.value_bytes(batch)
            if track:
                import pyarrow.compute as pc

                parts = batch.column("partition")
                offs = batch.column("offset")
                for p in pc.unique(parts).to_pylist():
                    mm = pc.min_max(pc.filter(offs, pc.equal(parts, p))).as_py()
                    merge_range(out.ranges, p, mm["min"], mm["max"])
            return out
        batches = await self.consumer.getmany(
            timeout_ms=int(timeout * 1000), max_records=max_records
        )
        for tp, recs in batches.items():
            out.count += len(recs)
            out.nbytes += sum(len(r.value) for r in recs)
            if track and recs:
                merge_range(out.ranges, tp.partition, recs[0].offset, recs[-1].offset)
        return out

    async def commit(self, topic: str, offsets: dict[int, int]) -> None:
        from aiogroup.structs import TopicPartition

        await self.consumer.commit({TopicPartition(topic, p): o for p, o in offsets.items()})

    async def close(self) -> None:
        if self.consumer is not None:
            await self.consumer.stop()


ADAPTER = AiogroupAdapter
