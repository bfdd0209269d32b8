"""Offset lookups: earliest, latest and by-timestamp offsets, and the true log end.

Shared by the fetcher (position resets), the facade (``beginning_offsets``,
``end_offsets``, ``offsets_for_times``) and the Spark source (where a micro-batch
ends).  One request goes to each partition leader; partitions whose leader moved or
is unknown are retried after a metadata refresh, until the caller's ``timeout`` runs
out, at which point a ``KafkaTimeoutError`` names the partitions still unanswered.

``end_offsets`` is the one answer to "where does the log end": on Kafka,
ListOffsets(latest) says so, but some Kafka-compatible brokers (Tansu among them)
answer with the base offset of the last record batch, which would leave that
batch's records unread and make lag negative.  A Fetch response carries the high
watermark (and the last stable offset) on every broker, so after ListOffsets one
tiny fetch at that offset confirms the end, and the larger of the two is the
answer: two short round trips per leader, the same value on Kafka.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Collection, Mapping
from typing import Any

from aiokafka.errors import KafkaTimeoutError
from aiokafka.protocol.offset import OffsetRequest

from aiogroup._fetch.responses import build_fetch_request, parse_fetch_response
from aiogroup._support.timeouts import wait_for
from aiogroup.errors import RETRIABLE_CODES, TRANSPORT_ERRORS, error_for_code
from aiogroup.structs import OffsetAndTimestamp, TopicPartition

__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "beginning_offsets",
    "end_offsets",
    "high_watermarks",
    "list_offsets",
    "offsets_for_times",
]

log = logging.getLogger("aiogroup.offsets")

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
    """The offset after the last readable record (the last stable offset when read_committed).

    ListOffsets(latest), confirmed by the high watermark of a Fetch at that offset.
    """
    if not partitions:
        return {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    found = await list_offsets(
        client,
        dict.fromkeys(partitions, LATEST_TIMESTAMP),
        read_committed=read_committed,
        timeout=timeout,
    )
    listed = {tp: (v.offset if v is not None else 0) for tp, v in found.items()}
    remaining = deadline - loop.time()
    if remaining <= 0:
        names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(listed))
        raise KafkaTimeoutError(f"high watermark fetch timed out for {names}")
    marks = await high_watermarks(client, listed, read_committed=read_committed, timeout=remaining)
    return {tp: max(offset, marks[tp]) for tp, offset in listed.items()}


#: The broker still returns at least the first record batch (KIP-74); asking for one
#: byte keeps that slice as small as the broker allows.
_SLICE_BYTES = 1
#: Not 0: some brokers answer a zero-wait fetch with no partitions at all.  With
#: min_bytes=1 a fetch below the high watermark returns at once anyway.
_PROBE_MAX_WAIT_MS = 1


async def high_watermarks(
    client: Any,
    offsets: Mapping[TopicPartition, int],
    *,
    read_committed: bool,
    timeout: float,
) -> dict[TopicPartition, int]:
    """The high watermark (last stable offset when read_committed) from a Fetch at each offset."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    result: dict[TopicPartition, int] = {}
    pending = dict(offsets)
    while pending:
        remaining = deadline - loop.time()
        if remaining <= 0:
            names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(pending))
            raise KafkaTimeoutError(f"high watermark fetch timed out for {names}")
        by_node: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
        for tp, offset in pending.items():
            leader = client.cluster.leader_for_partition(tp)
            if leader is not None and leader >= 0:
                by_node[leader][tp] = offset
        retry = len(by_node) == 0
        try:
            answers = await wait_for(
                asyncio.gather(
                    *(_probe(client, node, ps, read_committed) for node, ps in by_node.items())
                ),
                remaining,
            )
        except TRANSPORT_ERRORS:
            answers, retry = [], True
        except (asyncio.TimeoutError, TimeoutError):
            continue
        for found, again in answers:
            for tp, end in found.items():
                result[tp] = end
                pending.pop(tp)
            retry = retry or again
        if pending and retry:
            refresh = client.force_metadata_update()
            try:
                await wait_for(asyncio.shield(refresh), max(0.001, min(0.1, remaining)))
            except (asyncio.TimeoutError, TimeoutError):
                pass
    return result


async def _probe(
    client: Any, node: int, parts: Mapping[TopicPartition, int], read_committed: bool
) -> tuple[dict[TopicPartition, int], bool]:
    """One tiny Fetch: (high watermark per answered partition, whether some need a retry)."""
    request = build_fetch_request(
        list(parts.items()),
        max_wait_ms=_PROBE_MAX_WAIT_MS,
        min_bytes=1,
        max_bytes=_SLICE_BYTES,
        partition_bytes=_SLICE_BYTES,
        read_committed=read_committed,
    )
    response = await client.send(node, request)
    found: dict[TopicPartition, int] = {}
    retry = False
    for result in parse_fetch_response(response):
        tp, code = result.tp, result.error_code
        if tp not in parts:
            continue
        if code in RETRIABLE_CODES:
            retry = True
            continue
        if code != 0:
            raise error_for_code(code)(f"Fetch (high watermark) for {tp.topic}-{tp.partition}")
        end = result.highwater
        if read_committed and result.last_stable_offset >= 0:
            end = result.last_stable_offset
        found[tp] = end
    return found, retry


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
