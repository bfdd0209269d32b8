"""ingest() against a scripted consumer: commit after return, finish/abandon/lost on revoke."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from aiokafka.structs import ConsumerRecord

from aiogroup.errors import ConfigurationError
from aiogroup.spark.ingest import BatchInfo, SparkIngest, ingest
from aiogroup.spark.schema import records_to_arrow
from aiogroup.structs import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


def chunk(tp: TopicPartition, first: int, count: int) -> pa.RecordBatch:
    return records_to_arrow(
        [
            ConsumerRecord(tp.topic, tp.partition, o, 0, 0, None, b"v", None, -1, 1, [])
            for o in range(first, first + count)
        ]
    )


class FakeConsumer:
    """Hands out scripted chunks; records commits; lets the test drive the listener."""

    def __init__(self, chunks: list[pa.RecordBatch | Callable[[], Awaitable[None]]]) -> None:
        self.config = SimpleNamespace(enable_auto_commit=False)
        self.script = list(chunks)
        self.owned = {T0, T1}
        self.listener: Any = None
        self.commits: list[dict[TopicPartition, int]] = []

    def subscribe(self, topics: Any = (), pattern: Any = None, listener: Any = None) -> None:
        self.listener = listener

    async def getmany_arrow(self, timeout_ms: int = 0, max_records: Any = None) -> Any:
        while self.script:
            item = self.script.pop(0)
            if isinstance(item, pa.RecordBatch):
                return item
            await item()
        await asyncio.sleep(timeout_ms / 1000)
        return None

    def assignment(self) -> set[TopicPartition]:
        return set(self.owned)

    def highwater(self, tp: TopicPartition) -> int:
        return 100

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.commits.append(dict(offsets))


class Gate:
    """A batch function that blocks until released, reporting when it started."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.started = asyncio.Event()
        self.release = threading.Event()
        self.infos: list[BatchInfo] = []
        self.rows: list[int] = []

    def __call__(self, table: pa.Table, info: BatchInfo) -> None:
        self.infos.append(info)
        self.rows.extend(table.column("offset").to_pylist())
        self.loop.call_soon_threadsafe(self.started.set)
        assert self.release.wait(10)

    async def until_called(self, count: int) -> None:
        """Wait until the function was called ``count`` times (``started`` is set after
        every call, through the loop)."""
        while len(self.infos) < count:
            await asyncio.wait_for(self.started.wait(), 5)
            self.started.clear()


SPARK = SimpleNamespace(createDataFrame=lambda table: table)


def runner(consumer: FakeConsumer, gate: Gate, **kwargs: Any) -> SparkIngest:
    return SparkIngest(
        consumer, SPARK, gate, topics=["t"], max_records=10, max_interval=0.05, **kwargs
    )


async def test_offsets_are_committed_only_after_the_function_returned() -> None:
    consumer = FakeConsumer([chunk(T0, 0, 5), chunk(T1, 7, 5)])
    gate = Gate(asyncio.get_running_loop())
    ingestor = runner(consumer, gate)
    task = asyncio.create_task(ingestor.run())
    await asyncio.wait_for(gate.started.wait(), 5)
    assert consumer.commits == []
    assert ingestor.progress().in_flight_records == 10
    ingestor.stop()
    gate.release.set()
    final = await asyncio.wait_for(task, 5)
    assert consumer.commits == [{T0: 5, T1: 12}]
    assert gate.infos[0].ranges == {T0: (0, 5), T1: (7, 12)}
    assert final.batches == 1 and final.records == 10
    assert final.committed == {T0: 5, T1: 12}
    assert final.lag == {T0: 95, T1: 88}


async def test_finish_waits_for_the_batch_and_commits_before_release() -> None:
    consumer = FakeConsumer([chunk(T0, 0, 5), chunk(T1, 0, 5)])
    gate = Gate(asyncio.get_running_loop())
    ingestor = runner(consumer, gate, on_revoke="finish")
    task = asyncio.create_task(ingestor.run())
    await asyncio.wait_for(gate.started.wait(), 5)
    revoke = asyncio.create_task(consumer.listener.on_partitions_revoked({T0}))
    await asyncio.sleep(0.1)
    assert not revoke.done(), "revocation must wait for the batch in flight"
    gate.release.set()
    await asyncio.wait_for(revoke, 5)
    # Whichever of the listener and the loop commits first, T0 is committed by the time
    # the revocation returns, and only once.
    assert any(c.get(T0) == 5 for c in consumer.commits), "revoked partition not committed"
    consumer.owned.discard(T0)
    ingestor.stop()
    await asyncio.wait_for(task, 5)
    assert sorted(tp.partition for c in consumer.commits for tp in c) == [0, 1]
    assert {tp: o for c in consumer.commits for tp, o in c.items()} == {T0: 5, T1: 5}
    assert not gate.infos[0].abandoned.is_set()


@pytest.mark.parametrize(("on_revoke", "hook"), [("abandon", "revoked"), ("finish", "lost")])
async def test_abandoned_partitions_are_never_committed(on_revoke: str, hook: str) -> None:
    consumer = FakeConsumer([chunk(T0, 0, 5), chunk(T1, 0, 5)])
    gate = Gate(asyncio.get_running_loop())
    ingestor = runner(consumer, gate, on_revoke=on_revoke)
    task = asyncio.create_task(ingestor.run())
    await asyncio.wait_for(gate.started.wait(), 5)
    await asyncio.wait_for(getattr(consumer.listener, f"on_partitions_{hook}")({T0}), 1)
    assert gate.infos[0].abandoned.is_set()
    ingestor.stop()
    gate.release.set()
    final = await asyncio.wait_for(task, 5)
    assert consumer.commits == [{T1: 5}]
    assert final.abandoned_batches == 1


async def test_collected_records_of_revoked_partitions_are_dropped() -> None:
    consumer: FakeConsumer

    async def revoke_t0() -> None:
        await consumer.listener.on_partitions_revoked({T0})
        consumer.owned.discard(T0)

    consumer = FakeConsumer([chunk(T0, 0, 3), chunk(T1, 0, 3), revoke_t0])
    gate = Gate(asyncio.get_running_loop())
    gate.release.set()
    ingestor = runner(consumer, gate)
    task = asyncio.create_task(ingestor.run())
    await asyncio.wait_for(gate.started.wait(), 5)
    ingestor.stop()
    await asyncio.wait_for(task, 5)
    assert gate.infos[0].ranges == {T1: (0, 3)}
    assert consumer.commits == [{T1: 3}]


async def test_a_failing_function_commits_nothing_and_raises() -> None:
    consumer = FakeConsumer([chunk(T0, 0, 5)])

    def broken(table: Any, info: BatchInfo) -> None:
        raise RuntimeError("sink down")

    with pytest.raises(RuntimeError, match="sink down"):
        await asyncio.wait_for(
            ingest(consumer, SPARK, broken, topics=["t"], max_records=5, max_interval=0.05), 5
        )
    assert consumer.commits == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_records": 0}, "max_records"),
        ({"max_interval": 0}, "max_interval"),
        ({"on_revoke": "later"}, "on_revoke"),
        ({"topics": None}, "topics= or pattern="),
        ({"pattern": "t.*"}, "topics= or pattern="),
    ],
)
def test_bad_arguments_fail_at_once(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"topics": ["t"], **kwargs}
    with pytest.raises(ValueError, match=message):
        SparkIngest(FakeConsumer([]), SPARK, lambda df, info: None, **args)


def test_auto_commit_consumers_are_refused() -> None:
    consumer = FakeConsumer([])
    consumer.config.enable_auto_commit = True
    with pytest.raises(ConfigurationError, match="enable_auto_commit"):
        SparkIngest(consumer, SPARK, lambda df, info: None, topics=["t"])


class BuildingSpark:
    """createDataFrame returns the table itself and tells the test about every call."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fail_on: int | None = None) -> None:
        self.loop = loop
        self.fail_on = fail_on
        self.built: list[list[tuple[int, int]]] = []
        self.changed = asyncio.Event()

    def createDataFrame(self, table: pa.Table) -> pa.Table:
        columns = table.column("partition").to_pylist(), table.column("offset").to_pylist()
        rows = list(zip(*columns, strict=True))
        self.built.append(rows)
        self.loop.call_soon_threadsafe(self.changed.set)
        if self.fail_on is not None and len(self.built) == self.fail_on:
            raise ValueError("cannot convert this table")
        return table

    async def until_built(self, count: int) -> None:
        while len(self.built) < count:
            await asyncio.wait_for(self.changed.wait(), 5)
            self.changed.clear()


class Building:
    """An ingest() run of 10-record batches, entered once batch 0's function runs (held
    by its gate) and batch 1's DataFrame has been built; leaving it stops the run."""

    def __init__(self, chunks: list[pa.RecordBatch], **kwargs: Any) -> None:
        loop = asyncio.get_running_loop()
        self.consumer = FakeConsumer(list(chunks))
        self.spark = BuildingSpark(loop)
        self.gate = Gate(loop)
        self.ingestor = SparkIngest(
            self.consumer, self.spark, self.gate, topics=["t"], max_records=10, **kwargs
        )

    async def __aenter__(self) -> Building:
        self.task = asyncio.create_task(self.ingestor.run())
        await asyncio.wait_for(self.gate.started.wait(), 5)
        await self.spark.until_built(2)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.gate.release.set()
        self.ingestor.stop()
        await asyncio.wait_for(self.task, 5)


async def test_the_next_batch_is_built_while_the_current_one_runs() -> None:
    """createDataFrame of batch n+1 (the Arrow table's trip into the JVM) overlaps batch
    n's function; it used to run only after it, in the same worker thread."""
    async with Building([chunk(T0, 0, 10), chunk(T1, 0, 10)], max_interval=0.05) as run:
        assert len(run.gate.infos) == 1 and run.consumer.commits == []  # batch 0 still runs
        run.gate.release.set()
        await run.gate.until_called(2)
    assert run.consumer.commits == [{T0: 10}, {T1: 10}]


@pytest.mark.parametrize("on_revoke", ["finish", "abandon"])
async def test_a_revocation_drops_its_partitions_from_the_batch_being_built(
    on_revoke: str,
) -> None:
    """The batch whose DataFrame is built while the previous one runs is still collected:
    a revocation drops the revoked partitions from it, and it is built again without
    them before its function starts."""
    chunks = [chunk(T0, 0, 5), chunk(T1, 0, 5), chunk(T0, 5, 5), chunk(T1, 5, 5)]
    async with Building(chunks, max_interval=5, on_revoke=on_revoke) as run:
        revoke = asyncio.create_task(run.consumer.listener.on_partitions_revoked({T0}))
        if on_revoke == "abandon":
            await asyncio.wait_for(revoke, 5)  # returns at once
        run.gate.release.set()
        await asyncio.wait_for(revoke, 5)
        run.consumer.owned.discard(T0)
        await run.spark.until_built(3)
        assert run.spark.built[2] == [(1, o) for o in range(5, 10)]
        await run.gate.until_called(2)
    assert run.gate.infos[1].ranges == {T1: (5, 10)}
    assert run.gate.rows[10:] == list(range(5, 10))
    committed = list(run.consumer.commits)
    assert all(c.get(T0, 0) <= 5 for c in committed), committed  # T0 5..9 never committed
    assert committed[-1] == {T1: 10}
    assert (T0 in {tp for c in committed for tp in c}) == (on_revoke == "finish")


async def test_a_batch_emptied_while_it_was_built_never_reaches_the_function() -> None:
    chunks = [chunk(T1, 0, 10), chunk(T0, 0, 10), chunk(T1, 10, 10)]
    async with Building(chunks, max_interval=5) as run:
        await asyncio.wait_for(run.consumer.listener.on_partitions_lost({T0}), 5)
        run.consumer.owned.discard(T0)
        run.gate.release.set()
        await run.gate.until_called(2)
    assert [info.ranges for info in run.gate.infos] == [{T1: (0, 10)}, {T1: (10, 20)}]
    assert len(run.spark.built) == 3  # nothing was built again for the emptied batch
    assert run.consumer.commits == [{T1: 10}, {T1: 20}]


async def test_a_batch_that_cannot_be_built_raises_after_the_one_in_flight_is_committed() -> None:
    loop = asyncio.get_running_loop()
    consumer = FakeConsumer([chunk(T0, 0, 10), chunk(T1, 0, 10)])
    spark = BuildingSpark(loop, fail_on=2)
    gate = Gate(loop)
    gate.release.set()
    ingestor = SparkIngest(consumer, spark, gate, topics=["t"], max_records=10, max_interval=5)
    with pytest.raises(ValueError, match="cannot convert"):
        await asyncio.wait_for(ingestor.run(), 5)
    assert len(gate.infos) == 1
    assert consumer.commits == [{T0: 10}]  # batch 1 was never handed over: uncommitted
