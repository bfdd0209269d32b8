"""ListOffsets lookups: earliest, latest and by-timestamp offsets of partitions.

Shared by the fetcher (position resets) and the facade (``beginning_offsets``,
``end_offsets``, ``offsets_for_times``).  One request goes to each partition
leader; partitions whose leader moved or is unknown are retried after a
metadata refresh, until the caller's ``timeout`` runs out, at which point a
``KafkaTimeoutError`` names the partitions still unanswered.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Collection, Mapping
from typing import Any

from aiokafka.errors import KafkaTimeoutError
from aiokafka.protocol.offset import OffsetRequest

from aiogroup._timeouts import wait_for
from aiogroup.errors import RETRIABLE_CODES, TRANSPORT_ERRORS, error_for_code
from aiogroup.structs import OffsetAndTimestamp, TopicPartition

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "beginning_offsets",
    "end_offsets",
    "list_offsets",
    "offsets_for_times",
]

log = logging.getLogger(__name__)

#: The ListOffsets timestamps that ask for the log start and the log end (or, for
#: read_committed, the last stable offset).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


def _check_partitions(partitions: Collection[Any]) -> None:
    for tp in partitions:
        if not isinstance(tp, TopicPartition):
            raise TypeError(f"expected TopicPartition, got {tp!r}")


async def list_offsets(
    client: Any,
    timestamps: Mapping[TopicPartition, int],
    *,
    read_committed: bool,
    timeout: float,
) -> dict[TopicPartition, OffsetAndTimestamp | None]:
    """Ask each leader for the first offset at/after each timestamp (or -1 / -2).

    The value is None when the log holds no record at or after a timestamp.
    """
    _check_partitions(timestamps)
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0, got {timeout}")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pending = dict(timestamps)
    result: dict[TopicPartition, OffsetAndTimestamp | None] = {}
    backoff = client._retry_backoff if hasattr(client, "_retry_backoff") else 0.1
    while pending:
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        by_node: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
        stale = False
        for tp, ts in pending.items():
            leader = client.cluster.leader_for_partition(tp)
            if leader is None or leader == -1:
                if leader is None:
                    client.add_topic(tp.topic)
                stale = True
                continue
            by_node[leader][tp] = ts
        if by_node:
            try:
                answers = await wait_for(
                    asyncio.gather(
                        *(
                            _ask_node(client, node, parts, read_committed)
                            for node, parts in by_node.items()
                        ),
                        return_exceptions=True,
                    ),
                    remaining,
                )
            except (asyncio.TimeoutError, TimeoutError):
                break
            for answer in answers:
                if isinstance(answer, BaseException):
                    if isinstance(answer, TRANSPORT_ERRORS):
                        stale = True
                        continue
                    raise answer
                found, retry = answer
                for tp, value in found.items():
                    result[tp] = value
                    pending.pop(tp, None)
                if retry:
                    stale = True
        if pending and stale:
            wait = min(backoff, max(0.0, deadline - loop.time()))
            refresh = client.force_metadata_update()
            try:
                await wait_for(asyncio.shield(refresh), wait + 0.001)
            except (asyncio.TimeoutError, TimeoutError):
                pass
            await asyncio.sleep(0)
    if pending:
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(pending))
        raise KafkaTimeoutError(f"ListOffsets timed out after {timeout:.3f}s for {names}")
    return result


async def _ask_node(
    client: Any, node: int, parts: Mapping[TopicPartition, int], read_committed: bool
) -> tuple[dict[TopicPartition, OffsetAndTimestamp | None], bool]:
    """One ListOffsets round trip: (answered partitions, whether some need a retry)."""
    by_topic: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for tp, ts in parts.items():
        by_topic[tp.topic].append((tp.partition, ts))
    request = OffsetRequest(-1, 1 if read_committed else 0, list(by_topic.items()))
    response = await client.send(node, request)
    version = response.API_VERSION
    found: dict[TopicPartition, OffsetAndTimestamp | None] = {}
    retry = False
    for topic, partitions in response.topics:
        for entry in partitions:
            partition, code = entry[0], entry[1]
            tp = TopicPartition(topic, partition)
            if tp not in parts:
                continue
            if code in RETRIABLE_CODES:
                log.debug("ListOffsets for %s: retriable error %d", tp, code)
                retry = True
                continue
            if code != 0:
                raise error_for_code(code)(f"ListOffsets for {tp.topic}-{tp.partition}")
            if version == 0:
                offsets = entry[2]
                found[tp] = OffsetAndTimestamp(offsets[0], -1) if offsets else None
            else:
                timestamp, offset = entry[2], entry[3]
                found[tp] = None if offset < 0 else OffsetAndTimestamp(offset, timestamp)
    return found, retry


async def beginning_offsets(
    client: Any, partitions: Collection[TopicPartition], *, timeout: float
) -> dict[TopicPartition, int]:
    """The log start offset of each partition."""
    found = await list_offsets(
        client, dict.fromkeys(partitions, EARLIEST_TIMESTAMP), read_committed=False, timeout=timeout
    )
    return {tp: (v.offset if v is not None else 0) for tp, v in found.items()}


async def end_offsets(
    client: Any,
    partitions: Collection[TopicPartition],
    *,
    read_committed: bool,
    timeout: float,
) -> dict[TopicPartition, int]:
    """The offset the next produced record gets (the last stable offset when read_committed)."""
    found = await list_offsets(
        client,
        dict.fromkeys(partitions, LATEST_TIMESTAMP),
        read_committed=read_committed,
        timeout=timeout,
    )
    return {tp: (v.offset if v is not None else 0) for tp, v in found.items()}


async def offsets_for_times(
    client: Any,
    timestamps: Mapping[TopicPartition, int],
    *,
    read_committed: bool,
    timeout: float,
) -> dict[TopicPartition, OffsetAndTimestamp | None]:
    """The first offset whose timestamp is >= the given one (None if there is none)."""
    for tp, ts in timestamps.items():
        if not isinstance(ts, int) or ts < 0:
            raise ValueError(f"timestamp for {tp} must be an int >= 0, got {ts!r}")
    return await list_offsets(client, timestamps, read_committed=read_committed, timeout=timeout)
