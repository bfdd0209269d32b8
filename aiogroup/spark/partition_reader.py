"""Executor side: read exactly one planned offset range and hand it to Spark as Arrow.

Each Spark task reads one ``[from, until)`` range of one partition with a group-less,
assign-mode consumer.  Nothing here depends on group membership, which is why a batch
replayed after a restart (Spark re-plans it from the checkpoint) reads the very same
records.  The range is fixed, so the reader stops at ``until`` even if more records
arrived since the batch was planned.

One consumer per Python worker, not per task
    Spark reuses its Python worker processes across tasks
    (``spark.python.worker.reuse``, on by default), and a worker runs one task at a
    time.  Building a consumer for every range repeated the bootstrap, the metadata
    request and the connection for every partition of every micro-batch, and threw
    away the read-ahead: a 250,000-record range spent 20-180 ms before its first
    record.  So each worker process keeps one started consumer (per distinct set of
    consumer options) on an event loop in a daemon thread of its own.  A range
    assigns its partition (a no-op when it is already the assignment) and seeks to
    ``from`` - unless the previous range this worker read was the same partition and
    ended exactly at ``from``: then the consumer's position already is ``from``.
    Which records a range yields still depends on nothing but the range.  A read
    that fails, or is closed before its end, leaves the consumer's position unknown,
    so the next range seeks; a read that raises drops the consumer altogether.

The loop runs between tasks too, with the partition paused
    The loop used to run only while a task pulled a batch.  A Fetch sent just before
    a task ended then stayed unanswered until the worker's next task, perhaps minutes
    later, and the consumer reported the broker as unreachable ("no request has
    succeeded for 31.8s") on every idle executor.  Now the loop keeps running, and a
    range pauses its partition when it ends (resumed by the next range), so an idle
    worker neither leaves a request hanging nor polls the log end every
    ``fetch_max_wait_ms``.  Pausing drops what was read ahead; the position stays.
    The thread also lets the next Arrow batch be built while Spark takes the
    previous one (``_RangeSteps``).

Memory
    The consumer's read-ahead is bounded by its ``max_buffered_bytes``
    (``kafka.max.buffered.bytes``; plus, as Kafka allows, one record batch larger
    than the limit), and it holds one range at a time.  An Arrow batch is at most
    ``_MAX_RECORDS_PER_CHUNK`` records and, after the first one, at most about
    ``_TARGET_CHUNK_BYTES`` of decoded keys and values, plus less than one Kafka
    record batch: the reader asks for whole batches (``getmany_arrow(...,
    whole_batches=True)``), as a batch cut in two is decoded record by record in
    Python and then copied.  A worker holds two Arrow batches at most, the one Spark
    is taking and the next one.  See docs/spark.md, "Memory".
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import logging
from collections.abc import AsyncGenerator, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
from aiokafka.errors import OffsetOutOfRangeError

from aiogroup.consumer import GroupConsumer
from aiogroup.spark._consumers import new_consumer
from aiogroup.spark._loop_thread import LoopThread
from aiogroup.spark.options import SourceOptions
from aiogroup.spark.ranges import OffsetRange
from aiogroup.spark.schema import conform
from aiogroup.structs import TopicPartition

__all__ = ["ReadStats", "last_read_stats", "read_range"]

log = logging.getLogger("aiogroup.spark")

#: Records per Arrow batch handed to Spark, at most.  Big batches amortise the
#: per-batch work on both sides of the Python worker's Arrow stream.
_MAX_RECORDS_PER_CHUNK = 100_000
#: Decoded key + value bytes per Arrow batch the reader aims for once it has seen
#: how big the records of the range are.
_TARGET_CHUNK_BYTES = 16 * 1_048_576
_MIN_RECORDS_PER_CHUNK = 1_000
_POLL_MS = 1_000
#: How long closing a reader (its generator, or the consumer) may take.
_CLOSE_TIMEOUT_S = 10.0
#: Beyond the range's own no-progress deadline, how long one step may take (the first
#: step starts the consumer: bootstrap and metadata, each under request_timeout_ms).
_STEP_GRACE_S = 60.0

_T = TypeVar("_T")


@dataclass
class ReadStats:
    """What the last ``read_range`` in this process did (for tests and benchmarks)."""

    rng: OffsetRange
    rows: int = 0
    chunks: int = 0
    #: Largest Arrow batch handed to Spark, in bytes (``RecordBatch.nbytes``).
    max_chunk_bytes: int = 0
    #: Highest read-ahead the consumer held (buffered + reserved raw bytes).
    peak_fetch_bytes: int = 0
    #: The consumer's ``max_buffered_bytes``.
    fetch_budget: int = 0
    reused_consumer: bool = False
    seeked: bool = True


class _PooledConsumer:
    """One started group-less consumer, the event loop it lives on, and its position.

    The loop runs in a daemon thread for the life of the worker process, not only
    while a task pulls a batch: fetches in flight complete, and the next Arrow batch
    is built, while Spark is still taking the previous one.  Everything that touches
    the consumer runs on that loop; the worker's main thread only waits for results.
    """

    def __init__(
        self, key: tuple[Any, ...], options: SourceOptions, kwargs: dict[str, Any]
    ) -> None:
        self.key = key
        self.consumer: GroupConsumer = new_consumer(options, **kwargs)
        self.started = False
        #: (partition, offset) when the consumer's position is exactly that.
        self.position: tuple[TopicPartition, int] | None = None
        self._loop_thread = LoopThread("aiogroup-spark-reader")

    def submit(self, coro: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        return self._loop_thread.submit(coro)

    def run(self, coro: Coroutine[Any, Any, _T], timeout: float, what: str) -> _T:
        return self._loop_thread.call(coro, timeout, what)

    def close(self) -> None:
        try:
            if self.started and self._loop_thread.alive:
                self.run(self.consumer.stop(), _CLOSE_TIMEOUT_S, "closing a reader consumer")
        except BaseException as exc:  # closing after a failure: report, do not mask
            log.debug("aiogroup source: closing a reader consumer failed: %r", exc)
        finally:
            self._loop_thread.stop(_CLOSE_TIMEOUT_S)


class _RangeSteps:
    """Drives one range's chunk generator on the consumer's loop, one step ahead.

    ``start()`` begins building the next chunk at once; the caller hands the previous
    one to Spark meanwhile and collects the new one with ``result()``.  ``finish()``
    cancels a step still running and closes the generator, on the loop, so the
    generator is never closed while a step of it runs.
    """

    def __init__(self, pooled: _PooledConsumer, chunks: AsyncGenerator[pa.RecordBatch, None]):
        self._pooled = pooled
        self._chunks = chunks
        self._task: asyncio.Task[Any] | None = None
        self._future: concurrent.futures.Future[pa.RecordBatch | None] | None = None

    async def _step(self) -> pa.RecordBatch | None:
        self._task = asyncio.current_task()
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            return None

    def start(self) -> None:
        self._future = self._pooled.submit(self._step())

    def result(self, timeout: float) -> pa.RecordBatch | None:
        assert self._future is not None
        future, self._future = self._future, None
        return future.result(timeout)

    async def _finish(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        await self._chunks.aclose()

    def finish(self) -> None:
        self._pooled.run(self._finish(), _CLOSE_TIMEOUT_S, "closing a range's reader")


_pooled: _PooledConsumer | None = None
_last_stats: ReadStats | None = None


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)


def _checkout(options: SourceOptions) -> tuple[_PooledConsumer, bool]:
    """This process's consumer for ``options``; (consumer, reused)."""
    global _pooled
    kwargs = options.reader_consumer_kwargs()
    # The TLS files, not a context: a context built per task never compares equal.
    key = (_freeze(kwargs), options.tls)
    pooled = _pooled
    if pooled is not None and pooled.key == key:
        _pooled = None  # checked out: a read that dies half-way never returns it
        return pooled, True
    if pooled is not None:
        _pooled = None
        pooled.close()
    return _PooledConsumer(key, options, kwargs), False


def _checkin(pooled: _PooledConsumer) -> None:
    global _pooled
    previous, _pooled = _pooled, pooled
    if previous is not None and previous is not pooled:
        previous.close()


@atexit.register
def _close_pool() -> None:
    global _pooled
    pooled, _pooled = _pooled, None
    if pooled is not None:
        pooled.close()


def last_read_stats() -> ReadStats | None:
    """Statistics of the last range read in this process (None before the first)."""
    return _last_stats


def _chunk_records(stats: ReadStats, remaining: int) -> int:
    wanted = _MAX_RECORDS_PER_CHUNK
    if stats.rows:
        per_record = max(1, stats.max_chunk_bytes // max(1, stats.rows // max(1, stats.chunks)))
        wanted = max(_MIN_RECORDS_PER_CHUNK, min(wanted, _TARGET_CHUNK_BYTES // per_record))
    return max(1, min(wanted, remaining))


async def _chunks(
    pooled: _PooledConsumer, options: SourceOptions, rng: OffsetRange, stats: ReadStats
) -> AsyncGenerator[pa.RecordBatch, None]:
    consumer = pooled.consumer
    if not pooled.started:
        await consumer.start()
        pooled.started = True
    tp = rng.tp
    if consumer.assignment() != {tp}:
        consumer.assign([tp])
        pooled.position = None
    if pooled.position == (tp, rng.from_offset):
        stats.seeked = False  # the position is from_offset already
    else:
        consumer.seek(tp, rng.from_offset)
    pooled.position = None
    consumer.resume(tp)
    try:
        fetcher = consumer._fetcher
        stats.fetch_budget = consumer.config.max_buffered_bytes
        next_offset = rng.from_offset
        loop = asyncio.get_running_loop()
        last_progress = loop.time()
        while next_offset < rng.until_offset:
            wanted = _chunk_records(stats, rng.until_offset - next_offset)
            try:
                chunk = await consumer.getmany_arrow(
                    tp, timeout_ms=_POLL_MS, max_records=wanted, whole_batches=True
                )
            except OffsetOutOfRangeError as exc:
                raise OffsetOutOfRangeError(
                    f"aiogroup source: records of {rng.topic}-{rng.partition} from offset "
                    f"{next_offset} are gone (deleted by retention?); set failOnDataLoss=false "
                    f"to read what is left"
                ) from exc
            if fetcher is not None:
                stats.peak_fetch_bytes = max(stats.peak_fetch_bytes, fetcher.peak_bytes)
            if chunk is not None and chunk.num_rows:
                offsets = chunk.column("offset")
                last = offsets[-1].as_py()
                inside = chunk
                if last >= rng.until_offset:
                    # Offsets ascend within a partition: the range ends inside this chunk.
                    keep = int(_count_below(offsets, rng.until_offset))
                    inside = chunk.slice(0, keep)
                if inside.num_rows:
                    inside = conform(inside)
                    stats.rows += inside.num_rows
                    stats.chunks += 1
                    stats.max_chunk_bytes = max(stats.max_chunk_bytes, inside.nbytes)
                    next_offset = int(inside.column("offset")[-1].as_py()) + 1
                    last_progress = loop.time()
                    yield inside
                if inside.num_rows < chunk.num_rows:
                    # Read past the range (a whole batch taken across its end): nothing
                    # more of it exists.  Step the position back to the range's end so
                    # that the next range of this partition continues from here.
                    consumer.seek(tp, rng.until_offset)
                    pooled.position = (tp, rng.until_offset)
                    return
                if next_offset == rng.until_offset:
                    pooled.position = (tp, next_offset)
                continue
            # No record: gaps (compaction, transaction markers) can end a range early.
            if await consumer.position(tp) >= rng.until_offset:
                return
            if loop.time() - last_progress > options.poll_timeout_s:
                raise TimeoutError(
                    f"aiogroup source: no record of {rng.topic}-{rng.partition} "
                    f"[{next_offset}, {rng.until_offset}) arrived within "
                    f"{options.poll_timeout_s:.0f}s (kafkaConsumer.pollTimeoutMs)"
                )
    finally:
        # The loop keeps running between tasks: a paused partition is not fetched, so
        # an idle worker does not poll the log end every fetch_max_wait_ms.  (Pausing
        # drops what was read ahead; the position stays, so the next range of this
        # partition still continues without a seek.)
        if tp in consumer.assignment():
            consumer.pause(tp)


def _count_below(offsets: Any, until: int) -> int:
    import pyarrow.compute as pc

    return int(pc.sum(pc.less(offsets, pa.scalar(until, pa.int64()))).as_py() or 0)


def read_range(options: SourceOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow record batches, in offset order.

    Spark pulls from a plain iterator on the worker's main thread; the chunks are
    built on the consumer's loop thread, one ahead of what Spark has taken.  Raises
    TimeoutError when no record of the range arrives for ``poll_timeout_s``.
    """
    global _last_stats
    if rng.size <= 0:
        return
    pooled, reused = _checkout(options)
    stats = _last_stats = ReadStats(rng, reused_consumer=reused)
    steps = _RangeSteps(pooled, _chunks(pooled, options, rng, stats))
    step_timeout = options.poll_timeout_s + _STEP_GRACE_S
    keep = True
    try:
        steps.start()
        while True:
            try:
                batch = steps.result(step_timeout)
            except concurrent.futures.TimeoutError:
                raise TimeoutError(
                    f"aiogroup source: reading {rng.topic}-{rng.partition} "
                    f"[{rng.from_offset}, {rng.until_offset}) made no step in "
                    f"{step_timeout:.0f}s"
                ) from None
            if batch is None:
                return
            steps.start()  # build the next chunk while Spark takes this one
            yield batch
    except GeneratorExit:
        raise  # closed early by Spark: the consumer is fine, its position unknown
    except BaseException:
        keep = False  # an error leaves the consumer in an unknown state: drop it
        raise
    finally:
        try:
            steps.finish()
        except BaseException:
            keep = False
        if keep:
            _checkin(pooled)
        else:
            pooled.close()
