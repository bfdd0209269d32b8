"""The ceiling: Fetch requests in a loop, record bytes discarded without decoding.

No consumer can deliver records faster than the broker hands out their bytes over
one connection, so this loop - aiokafka's client sending ``FetchRequest`` and
reading only the fixed-size batch headers to learn the next offset - measures what
this broker and machine allow.  A client's rate divided by this one says how much
of the ceiling the client's own decoding and bookkeeping cost.
"""

from __future__ import annotations

import struct
import time
from typing import Any

_BATCH_HEADER = struct.Struct(">qi")  # base offset, batch length
_LAST_DELTA = struct.Struct(">i")  # lastOffsetDelta at byte 23 of a v2 batch
_COUNT = struct.Struct(">i")  # record count at byte 57 of a v2 batch


def walk_batches(data: bytes) -> tuple[int, int | None]:
    """(records, next offset) from the complete v2 batches in ``data``; a trailing partial
    batch (the broker may cut one off at the size limit) is ignored."""
    pos = 0
    records = 0
    next_offset: int | None = None
    view = memoryview(data)
    end = len(data)
    while pos + 61 <= end:
        base, length = _BATCH_HEADER.unpack_from(view, pos)
        if pos + 12 + length > end:
            break
        (delta,) = _LAST_DELTA.unpack_from(view, pos + 23)
        (count,) = _COUNT.unpack_from(view, pos + 57)
        records += count
        next_offset = base + delta + 1
        pos += 12 + length
    return records, next_offset


async def drain(
    bootstrap_servers: str,
    topic: str,
    partitions: list[int],
    records: int,
    timeout: float,
    *,
    max_partition_bytes: int = 8 * 1024 * 1024,
) -> tuple[int, int, float]:
    """Fetch ``records`` from offset 0; returns (records, record-set bytes, seconds)."""
    from aiokafka.client import AIOKafkaClient
    from aiokafka.protocol.fetch import FetchRequest
    from aiokafka.structs import TopicPartition

    client = AIOKafkaClient(bootstrap_servers=bootstrap_servers)
    await client.bootstrap()
    try:
        await client._wait_on_metadata(topic)
        leader = client.cluster.leader_for_partition(TopicPartition(topic, partitions[0]))
        positions = dict.fromkeys(partitions, 0)
        count = nbytes = 0
        started = time.monotonic()
        deadline = started + timeout
        while count < records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"raw fetch: {count}/{records} after {timeout}s")
            request: Any = FetchRequest(
                500,
                1,
                64 * 1024 * 1024,
                0,
                [(topic, [(p, positions[p], max_partition_bytes) for p in partitions])],
            )
            response = await client.send(leader, request)
            for _topic, parts in response.topics:
                for partition, error_code, _hw, *rest in parts:
                    if error_code != 0:
                        raise RuntimeError(f"raw fetch: partition {partition} error {error_code}")
                    data = rest[-1]
                    if not data:
                        continue
                    got, next_offset = walk_batches(data)
                    count += got
                    nbytes += len(data)
                    if next_offset is not None:
                        positions[partition] = next_offset
        return count, nbytes, time.monotonic() - started
    finally:
        await client.close()
