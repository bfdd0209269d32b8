"""Driver-side ingestion: a GroupConsumer feeds Spark DataFrames to a batch function.

The loop collects up to ``max_records`` records (or whatever arrived within
``max_interval``) as Arrow and hands them to the user's function as a DataFrame; the
function runs in a worker thread, so heartbeats, rebalances and listener callbacks
carry on while Spark works - and so does collecting the *next* batch, which is where
the pipeline's speed comes from (decoding here, writing in the JVM).  The hand-over
from collected to in flight is synchronous: a revocation finds each record either
among the collected ones or in the batch in flight, never between.  A collected batch
is turned into its DataFrame (``createDataFrame``: the Arrow table's trip into the JVM,
a quarter of a batch's time at 100-byte records) in a second thread while the previous
batch runs; it stays *collected* until its function starts, so a revocation meanwhile
drops its partitions from it and the DataFrame is built again without them.  A batch's offsets
are committed only after the function returned, and only for partitions this member
still owns and has not released since the batch was handed over: at-least-once
delivery into whatever the function writes to.

Revocation is where the choice lies (``on_revoke``):

* ``"finish"`` - the revoke callback waits for the batch in flight, commits the
  revoked partitions' offsets, and only then lets the partitions go.  The next owner
  starts exactly after the batch; nothing is processed twice.
* ``"abandon"`` - the revoke callback returns at once.  The batch's offsets for the
  revoked partitions are never committed and ``BatchInfo.abandoned`` is set, so the
  function may stop early; the next owner re-reads those records.

Either way, collected records of released partitions are dropped uncommitted; the
consumer forgets a released partition's position, so it restarts from the committed
offset (the end of the last batch written) wherever it goes next.

Lost partitions (session expired, fenced) are always abandoned: their offsets can no
longer be committed by this member.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from aiogroup.errors import ConfigurationError, KafkaError
from aiogroup.listeners import AsyncConsumerRebalanceListener, as_async_listener
from aiogroup.spark.schema import conform
from aiogroup.structs import TopicPartition

__all__ = ["BatchInfo", "IngestProgress", "SparkIngest", "ingest"]

log = logging.getLogger("aiogroup.spark.ingest")

OnRevoke = Literal["finish", "abandon"]
_Rows = TypeVar("_Rows", pa.RecordBatch, pa.Table)
BatchFunction = Callable[[Any, "BatchInfo"], Any]


@dataclass
class BatchInfo:
    """What a batch holds; passed to the batch function next to the DataFrame."""

    batch_id: int
    #: ``[first offset, last offset + 1)`` per partition in this batch.
    ranges: Mapping[TopicPartition, tuple[int, int]]
    num_records: int
    #: Set when some of the batch's partitions were taken away and will not be
    #: committed (``on_revoke="abandon"`` or lost partitions); the function may stop.
    abandoned: threading.Event = field(default_factory=threading.Event)
    abandoned_partitions: set[TopicPartition] = field(default_factory=set)
    committed_partitions: set[TopicPartition] = field(default_factory=set)
    #: Each partition's release count when the batch was handed over (see SparkIngest).
    release_counts: dict[TopicPartition, int] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class IngestProgress:
    """A snapshot of the loop's progress (``SparkIngest.progress()``)."""

    batches: int
    records: int
    records_per_second: float
    #: Records between the group's committed offset and the high watermark, per
    #: owned partition (only partitions whose high watermark is known yet).
    lag: Mapping[TopicPartition, int]
    committed: Mapping[TopicPartition, int]
    abandoned_batches: int
    in_flight_records: int
    last_batch_seconds: float | None

    @property
    def total_lag(self) -> int:
        return sum(self.lag.values())


class _Listener(AsyncConsumerRebalanceListener):
    def __init__(self, ingest: SparkIngest, user: AsyncConsumerRebalanceListener) -> None:
        self._ingest = ingest
        self._user = user

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._ingest._release(revoked, lost=False)
        await self._user.on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        return await self._user.on_partitions_assigned(assigned)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        await self._ingest._release(lost, lost=True)
        await self._user.on_partitions_lost(lost)


def _ranges(table: pa.Table) -> dict[TopicPartition, tuple[int, int]]:
    grouped = table.group_by(["topic", "partition"]).aggregate(
        [("offset", "min"), ("offset", "max")]
    )
    return {
        TopicPartition(row["topic"], row["partition"]): (row["offset_min"], row["offset_max"] + 1)
        for row in grouped.to_pylist()
    }


def _table_for_spark(batches: Iterable[pa.RecordBatch]) -> pa.Table | None:
    """One table of the collected batches, without zero-row batches; None if nothing is left.

    Spark's reader of the Arrow stream ``createDataFrame`` writes stops at a zero-row
    batch: every row after it is silently missing from the DataFrame (measured with
    PySpark 4.3.0: batches of 3, 0 and 3 rows give a DataFrame of 3 rows).  A revoke
    that filters a collected batch down to nothing makes exactly such a batch, and
    the rows after it were then committed without reaching the batch function.
    """
    kept = [b for b in batches if b.num_rows]
    if not kept:
        return None
    return pa.Table.from_batches(kept)


def _without(table: _Rows, tps: Iterable[TopicPartition]) -> _Rows:
    drop = set(tps)
    if not drop or table.num_rows == 0:
        return table
    keep = None
    for tp in drop:
        match = pc.and_(
            pc.equal(table["topic"], tp.topic), pc.equal(table["partition"], tp.partition)
        )
        keep = match if keep is None else pc.or_(keep, match)
    return table.filter(pc.invert(keep))


@dataclass
class _Prepared:
    """A collected batch whose DataFrame is being built in the preparing thread.

    Still collected, not in flight: a revocation adds its partitions to ``dropped``, and
    the batch is built again without them before its function may start.
    """

    table: pa.Table
    ranges: dict[TopicPartition, tuple[int, int]]
    frame: asyncio.Future[Any]
    dropped: set[TopicPartition] = field(default_factory=set)
    #: ``table`` without the ``dropped`` partitions, once a revocation touched it (the
    #: filter that counted the dropped rows, kept for the rebuild)
    kept: pa.Table | None = None


class SparkIngest:
    """The ingestion loop; ``await run()`` until ``stop()`` (or cancellation).

    The consumer must be started, created without topics and with
    ``enable_auto_commit=False``; the loop subscribes it to ``topics`` or ``pattern``
    with its own rebalance listener, which calls ``listener`` after its own work.
    """

    def __init__(
        self,
        consumer: Any,
        spark: Any,
        handle_batch: BatchFunction,
        *,
        topics: Iterable[str] | None = None,
        pattern: str | None = None,
        listener: object | None = None,
        max_records: int = 10_000,
        max_interval: float = 1.0,
        on_revoke: OnRevoke = "finish",
        on_progress: Callable[[IngestProgress], Any] | None = None,
    ) -> None:
        if not callable(handle_batch):
            raise TypeError(f"handle_batch must be callable, got {handle_batch!r}")
        if not isinstance(max_records, int) or isinstance(max_records, bool) or max_records <= 0:
            raise ValueError(f"max_records must be a positive int, got {max_records!r}")
        if not isinstance(max_interval, (int, float)) or max_interval <= 0:
            raise ValueError(f"max_interval must be > 0 seconds, got {max_interval!r}")
        if on_revoke not in ("finish", "abandon"):
            raise ValueError(f"on_revoke must be 'finish' or 'abandon', got {on_revoke!r}")
        topic_list = [topics] if isinstance(topics, str) else list(topics or ())
        if bool(topic_list) == (pattern is not None):
            raise ValueError(
                "ingest() needs exactly one of topics= or pattern=: it subscribes the consumer "
                "itself, with a rebalance listener that guards the batch in flight"
            )
        config = getattr(consumer, "config", None)
        if config is not None and config.enable_auto_commit:
            raise ConfigurationError(
                "ingest() commits each batch after handle_batch returned; create the consumer "
                "with enable_auto_commit=False"
            )
        self._consumer = consumer
        self._spark = spark
        self._handle_batch = handle_batch
        self._topics = topic_list
        self._pattern = pattern
        self._listener = _Listener(self, as_async_listener(listener))
        self._max_records = max_records
        self._max_interval = float(max_interval)
        self._on_revoke: OnRevoke = on_revoke
        self._on_progress = on_progress
        self._stop = asyncio.Event()
        self._commit_lock = asyncio.Lock()
        # One worker thread: batches are processed strictly one after the other.
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="aiogroup-spark-batch"
        )
        # And one that builds the next batch's DataFrame meanwhile.
        self._preparer = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="aiogroup-spark-prepare"
        )
        self._pending: list[pa.RecordBatch] = []
        self._prepared: _Prepared | None = None
        self._in_flight: BatchInfo | None = None
        self._in_flight_done: asyncio.Future[Any] | None = None
        self._batches = 0
        self._records = 0
        self._abandoned_batches = 0
        self._committed: dict[TopicPartition, int] = {}
        self._started_at: float | None = None
        self._last_batch_seconds: float | None = None
        self._batch_started = 0.0
        #: How often each partition was released (revoked or lost).  A batch remembers
        #: the counts it was collected under, and a partition released since is never
        #: committed by that batch's normal path: only the release itself may commit it.
        self._releases: dict[TopicPartition, int] = {}

    # -- public ----------------------------------------------------------------------------

    def stop(self) -> None:
        """Finish (and commit) the batch in flight, then make ``run()`` return."""
        self._stop.set()

    def progress(self) -> IngestProgress:
        elapsed = 0.0 if self._started_at is None else time.monotonic() - self._started_at
        lag: dict[TopicPartition, int] = {}
        try:
            owned = self._consumer.assignment()
        except Exception:
            owned = set()
        for tp in owned:
            try:
                highwater = self._consumer.highwater(tp)
            except Exception:
                continue
            if highwater is not None:
                base = self._committed.get(tp)
                if base is None:
                    continue
                lag[tp] = max(0, highwater - base)
        in_flight = self._in_flight
        return IngestProgress(
            batches=self._batches,
            records=self._records,
            records_per_second=self._records / elapsed if elapsed > 0 else 0.0,
            lag=lag,
            committed=dict(self._committed),
            abandoned_batches=self._abandoned_batches,
            in_flight_records=0 if in_flight is None else in_flight.num_records,
            last_batch_seconds=self._last_batch_seconds,
        )

    async def run(self) -> IngestProgress:
        """Ingest until ``stop()``; raises what ``handle_batch`` raised (uncommitted)."""
        if self._pattern is not None:
            self._consumer.subscribe(pattern=self._pattern, listener=self._listener)
        else:
            self._consumer.subscribe(topics=self._topics, listener=self._listener)
        self._started_at = time.monotonic()
        loop = asyncio.get_running_loop()
        collector: asyncio.Task[_Prepared | None] | None = None
        try:
            prepared = await self._collect_and_prepare()
            while prepared is not None:
                ready = await self._ready(prepared)
                if ready is None:  # a revocation dropped every record of it
                    prepared = await self._collect_and_prepare()
                    continue
                # Handed over synchronously (nothing awaited since _ready checked what
                # was dropped): from here on a revocation finds the batch in flight.
                info, done = self._start_batch(*ready)
                if self._stop.is_set():
                    await self._finish_batch(info, done)
                    break
                # The next batch is collected, and its DataFrame built, while Spark
                # works on this one: decoding (this loop), the next batch's trip into
                # the JVM (the preparing thread) and this batch's job overlap.
                collector = loop.create_task(self._collect_and_prepare())
                await self._finish_batch(info, done)
                if self._stop.is_set():
                    break  # records collected meanwhile stay uncommitted: redelivered
                prepared = await collector
                collector = None
        finally:
            if collector is not None:
                collector.cancel()
                await asyncio.gather(collector, return_exceptions=True)
            self._pending = []
            self._prepared = None
            self._executor.shutdown(wait=False)
            self._preparer.shutdown(wait=False)
        return self.progress()

    # -- the loop --------------------------------------------------------------------------

    async def _collect(self) -> None:
        """Add records to ``_pending`` until max_records, max_interval after the first one,
        or stop().  A revocation meanwhile drops the revoked partitions' records from it.
        """
        loop = asyncio.get_running_loop()
        count = sum(b.num_rows for b in self._pending)
        deadline: float | None = None
        while count < self._max_records and not self._stop.is_set():
            now = loop.time()
            if deadline is not None and now >= deadline:
                break
            # Wait in short slices so stop() is noticed even on an idle topic.
            wait = min(self._max_interval, 0.5) if deadline is None else deadline - now
            chunk = await self._consumer.getmany_arrow(
                timeout_ms=max(1, int(wait * 1000)), max_records=self._max_records - count
            )
            if chunk is None or chunk.num_rows == 0:
                continue
            if deadline is None:
                deadline = loop.time() + self._max_interval
            self._pending.append(conform(chunk))
            count = sum(b.num_rows for b in self._pending)

    async def _collect_and_prepare(self) -> _Prepared | None:
        """Collect a batch and start building its DataFrame; None once stopped."""
        while not self._pending and not self._stop.is_set():
            await self._collect()
        table = _table_for_spark(self._pending)
        self._pending = []
        return None if table is None else self._prepare(table)

    def _prepare(self, table: pa.Table) -> _Prepared:
        loop = asyncio.get_running_loop()
        frame = loop.run_in_executor(self._preparer, self._spark.createDataFrame, table)
        self._prepared = _Prepared(table, _ranges(table), frame)
        return self._prepared

    async def _ready(
        self, prepared: _Prepared
    ) -> tuple[Any, int, dict[TopicPartition, tuple[int, int]]] | None:
        """The batch's DataFrame, built without whatever a revocation dropped meanwhile.

        Returns with nothing left to await: the caller hands the batch over at once, so
        no revocation can slip in between the check of ``dropped`` and the hand-over.
        None if nothing is left of the batch (``_table_for_spark``: no zero-row frame).
        """
        while True:
            try:
                frame = await prepared.frame
            finally:
                if self._prepared is prepared:
                    self._prepared = None
            kept = prepared.kept
            if kept is None:
                return frame, prepared.table.num_rows, prepared.ranges
            if kept.num_rows == 0:
                return None
            prepared = self._prepare(kept)

    def _start_batch(
        self, frame: Any, num_records: int, ranges: dict[TopicPartition, tuple[int, int]]
    ) -> tuple[BatchInfo, asyncio.Future[Any]]:
        """Hand ``frame`` to the worker thread; the batch is in flight from this call."""
        info = BatchInfo(batch_id=self._batches, ranges=ranges, num_records=num_records)
        info.release_counts = {tp: self._releases.get(tp, 0) for tp in info.ranges}
        loop = asyncio.get_running_loop()
        self._batch_started = loop.time()
        self._in_flight = info
        done = loop.run_in_executor(self._executor, self._handle_batch, frame, info)
        self._in_flight_done = done
        return info, done

    async def _finish_batch(self, info: BatchInfo, done: asyncio.Future[Any]) -> None:
        """Wait for the batch function, commit, and report progress."""
        loop = asyncio.get_running_loop()
        try:
            # Shielded: cancelling run() must not pretend the thread stopped; the batch
            # is simply left uncommitted.
            await asyncio.shield(done)
            await self._commit(info, set(info.ranges))
        finally:
            self._in_flight = None
            self._in_flight_done = None
        self._batches += 1
        self._records += info.num_records
        if info.abandoned_partitions:
            self._abandoned_batches += 1
        self._last_batch_seconds = loop.time() - self._batch_started
        progress = self.progress()
        log.info(
            "batch %d: %d records in %.2fs, %.0f records/s overall, lag %d",
            info.batch_id,
            info.num_records,
            self._last_batch_seconds,
            progress.records_per_second,
            progress.total_lag,
        )
        if self._on_progress is not None:
            self._on_progress(progress)

    async def _commit(
        self, info: BatchInfo, tps: set[TopicPartition], *, releasing: bool = False
    ) -> None:
        async with self._commit_lock:
            owned = self._consumer.assignment()
            offsets = {
                tp: info.ranges[tp][1]
                for tp in tps
                if tp in owned
                and tp not in info.abandoned_partitions
                and tp not in info.committed_partitions
                # Released since the batch was handed over (and perhaps assigned here
                # again, starting over from the committed offset): only the release
                # path, which waited for this very batch, may commit it.
                and (releasing or self._releases.get(tp, 0) == info.release_counts.get(tp, 0))
            }
            if not offsets:
                return
            try:
                await self._consumer.commit(offsets)
            except KafkaError as exc:
                # The partitions moved on (rebalance, fencing): their records will be
                # delivered again to the next owner - at-least-once, never lost.
                log.warning("batch %d: commit of %s failed: %r", info.batch_id, offsets, exc)
                return
            info.committed_partitions |= set(offsets)
            self._committed.update(offsets)

    async def _release(self, partitions: set[TopicPartition], *, lost: bool) -> None:
        """Runs in the rebalance listener, before ``partitions`` leave this member."""
        # Records collected but not yet handed over (the next batch, collected while
        # Spark writes the current one): dropped, never committed.  Their partitions
        # restart from the committed offset wherever they go next (here too, after an
        # eager rebalance: the consumer forgets a revoked partition's position).
        released = frozenset(partitions)
        dropped = self._drop_collected(released)
        info, done = self._in_flight, self._in_flight_done
        counts = {tp: self._releases.get(tp, 0) for tp in released}
        for tp in released:
            self._releases[tp] = counts[tp] + 1
            self._committed.pop(tp, None)
        touched = set() if info is None else released & set(info.ranges)
        log.info(
            "%s %s: dropped %d collected records; batch in flight %s touches %s",
            "lost" if lost else "revoked",
            sorted(released),
            dropped,
            None if info is None else info.batch_id,
            sorted(touched),
        )
        if info is None or done is None or not touched:
            return
        if lost or self._on_revoke == "abandon":
            info.abandoned_partitions |= touched
            info.abandoned.set()
            log.info("batch %d: abandoning %s", info.batch_id, sorted(touched))
            return
        log.info("batch %d: finishing before releasing %s", info.batch_id, sorted(touched))
        try:
            await asyncio.shield(done)
        except Exception:
            return  # the loop re-raises the function's error; nothing to commit
        # Only partitions whose batch was handed over before this release began.
        still = {tp for tp in touched if info.release_counts.get(tp, 0) == counts[tp]}
        await self._commit(info, still, releasing=True)
        # Whatever a read returned while we waited is dropped as well (a read can only
        # return records of partitions still being fetched, but say so in code).
        self._drop_collected(released)

    def _drop_collected(self, partitions: frozenset[TopicPartition]) -> int:
        """Drop ``partitions`` from what is collected but not handed over; how many rows."""
        before = sum(b.num_rows for b in self._pending)
        # A batch emptied here is dropped: see _table_for_spark for why it must go, and
        # ``while not self._pending`` takes an empty list to mean nothing collected.
        kept = (_without(b, partitions) for b in self._pending)
        self._pending = [b for b in kept if b.num_rows]
        dropped = int(before - sum(b.num_rows for b in self._pending))
        prepared = self._prepared
        if prepared is not None:
            touched = (partitions & prepared.ranges.keys()) - prepared.dropped
            if touched:
                # Its DataFrame is (being) built: _ready builds it again without them.
                current = prepared.table if prepared.kept is None else prepared.kept
                prepared.kept = _without(current, touched)
                dropped += current.num_rows - prepared.kept.num_rows
                prepared.dropped |= touched
        return dropped


async def ingest(
    consumer: Any,
    spark: Any,
    handle_batch: BatchFunction,
    *,
    topics: Iterable[str] | None = None,
    pattern: str | None = None,
    listener: object | None = None,
    max_records: int = 10_000,
    max_interval: float = 1.0,
    on_revoke: OnRevoke = "finish",
    on_progress: Callable[[IngestProgress], Any] | None = None,
    stop: asyncio.Event | None = None,
) -> IngestProgress:
    """Run :class:`SparkIngest` until ``stop`` is set (or the task is cancelled).

    ``handle_batch(df, info)`` runs in a worker thread with a Spark DataFrame of the
    batch (built from Arrow, columns as Spark's Kafka source) and its
    :class:`BatchInfo`; the batch's offsets are committed after it returns.
    """
    runner = SparkIngest(
        consumer,
        spark,
        handle_batch,
        topics=topics,
        pattern=pattern,
        listener=listener,
        max_records=max_records,
        max_interval=max_interval,
        on_revoke=on_revoke,
        on_progress=on_progress,
    )
    if stop is None:
        return await runner.run()

    async def relay() -> None:
        await stop.wait()
        runner.stop()

    relay_task = asyncio.get_running_loop().create_task(relay())
    try:
        return await runner.run()
    finally:
        relay_task.cancel()
