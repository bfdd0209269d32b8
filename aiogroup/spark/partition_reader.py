"""Executor side: read exactly one planned offset range and hand it to Spark as Arrow.

Each Spark task reads one ``[from, until)`` range of one partition with a group-less,
assign-mode consumer.  Nothing here depends on group membership, which is why a batch
replayed after a restart (Spark re-plans it from the checkpoint) reads the very same
records.  The range is fixed, so the reader stops at ``until`` even if more records
arrived since the batch was planned.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from aiokafka.errors import OffsetOutOfRangeError

from aiogroup.spark._consumers import new_consumer
from aiogroup.spark.options import SourceOptions
from aiogroup.spark.ranges import OffsetRange
from aiogroup.spark.schema import conform

__all__ = ["read_range"]

_MAX_RECORDS_PER_CHUNK = 10_000
_POLL_MS = 1_000


async def _chunks(options: SourceOptions, rng: OffsetRange) -> AsyncGenerator[pa.RecordBatch, None]:
    consumer = new_consumer(**options.reader_consumer_kwargs())
    await consumer.start()
    try:
        consumer.assign([rng.tp])
        consumer.seek(rng.tp, rng.from_offset)
        next_offset = rng.from_offset
        loop = asyncio.get_running_loop()
        last_progress = loop.time()
        while next_offset < rng.until_offset:
            wanted = min(_MAX_RECORDS_PER_CHUNK, rng.until_offset - next_offset)
            try:
                chunk = await consumer.getmany_arrow(
                    rng.tp, timeout_ms=_POLL_MS, max_records=wanted
                )
            except OffsetOutOfRangeError as exc:
                raise OffsetOutOfRangeError(
                    f"aiogroup source: records of {rng.topic}-{rng.partition} from offset "
                    f"{next_offset} are gone (deleted by retention?); set failOnDataLoss=false "
                    f"to read what is left"
                ) from exc
            if chunk is not None and chunk.num_rows:
                chunk = conform(chunk)
                keep = pc.less(chunk.column("offset"), pa.scalar(rng.until_offset, pa.int64()))
                inside = chunk.filter(keep)
                if inside.num_rows:
                    yield inside
                    next_offset = int(pc.max(inside.column("offset")).as_py()) + 1
                    last_progress = loop.time()
                if inside.num_rows < chunk.num_rows:
                    return  # read past the range: nothing more of it exists
                continue
            # No record: gaps (compaction, transaction markers) can end a range early.
            if await consumer.position(rng.tp) >= rng.until_offset:
                return
            if loop.time() - last_progress > options.poll_timeout_s:
                raise TimeoutError(
                    f"aiogroup source: no record of {rng.topic}-{rng.partition} "
                    f"[{next_offset}, {rng.until_offset}) arrived within "
                    f"{options.poll_timeout_s:.0f}s (kafkaConsumer.pollTimeoutMs)"
                )
    finally:
        await consumer.stop()


def read_range(options: SourceOptions, rng: OffsetRange) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` as Arrow record batches, in offset order.

    Spark pulls from a plain iterator, so a private loop drives the async reader one
    chunk at a time; closing the iterator early stops the consumer.  Raises
    TimeoutError when no record of the range arrives for ``poll_timeout_s``.
    """
    if rng.size <= 0:
        return
    loop = asyncio.new_event_loop()
    chunks = _chunks(options, rng)
    try:
        while True:
            try:
                yield loop.run_until_complete(chunks.__anext__())
            except StopAsyncIteration:
                return
    finally:
        try:
            loop.run_until_complete(chunks.aclose())
        finally:
            loop.close()
