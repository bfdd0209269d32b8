"""End offsets read from Fetch responses, for deciding where a micro-batch ends.

A batch's end must be the true log end: on Kafka, ListOffsets(latest) returns it, but
some Kafka-compatible brokers (Tansu among them) answer with the base offset of the
last record batch, which would leave the last batch's records unread until more data
arrives - and a bounded (availableNow) run would never read them.  A Fetch response
carries the high watermark (and the last stable offset) on every broker, so this
module asks ListOffsets for a valid offset near the end, fetches one tiny slice there
with no wait, and takes the larger of the two.  Two short round trips per leader.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Collection
from typing import Any

from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError
from aiokafka.protocol.fetch import FetchRequest

from aiogroup import offsets as _offsets
from aiogroup._timeouts import wait_for
from aiogroup.errors import error_for_code
from aiogroup.structs import TopicPartition

__all__ = ["end_offsets"]

_RETRIABLE_CODES = frozenset({3, 5, 6, 7, 56, 74, 75, 78})
# The broker still returns at least the first record batch (KIP-74); asking for one
# byte only keeps that slice as small as the broker allows.
_SLICE_BYTES = 1
# Not 0: some brokers answer a zero-wait fetch with no partitions at all.  With
# min_bytes=1 a fetch below the high watermark returns at once anyway.
_MAX_WAIT_MS = 1


async def end_offsets(
    client: Any,
    partitions: Collection[TopicPartition],
    *,
    read_committed: bool,
    timeout: float,
) -> dict[TopicPartition, int]:
    """The offset after the last readable record of each partition."""
    if not partitions:
        return {}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    listed = await _offsets.end_offsets(
        client, partitions, read_committed=read_committed, timeout=timeout
    )
    result: dict[TopicPartition, int] = {}
    pending = dict(listed)
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
                    *(
                        _probe(client, node, parts, read_committed)
                        for node, parts in by_node.items()
                    )
                ),
                remaining,
            )
        except (KafkaConnectionError, NodeNotReadyError):
            answers, retry = [], True
        except (asyncio.TimeoutError, TimeoutError):
            continue
        for found, again in answers:
            for tp, end in found.items():
                result[tp] = max(end, pending.pop(tp))
            retry = retry or again
        if pending and retry:
            refresh = client.force_metadata_update()
            try:
                await wait_for(asyncio.shield(refresh), max(0.001, min(0.1, remaining)))
            except (asyncio.TimeoutError, TimeoutError):
                pass
    return result


async def _probe(
    client: Any, node: int, parts: dict[TopicPartition, int], read_committed: bool
) -> tuple[dict[TopicPartition, int], bool]:
    by_topic: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for tp, offset in parts.items():
        by_topic[tp.topic].append((tp.partition, offset, _SLICE_BYTES))
    request = FetchRequest(
        max_wait_time=_MAX_WAIT_MS,
        min_bytes=1,
        max_bytes=_SLICE_BYTES,
        isolation_level=1 if read_committed else 0,
        topics=list(by_topic.items()),
    )
    response = await client.send(node, request)
    # Read the partition tuples positionally, as the fetcher does: to_object() fails
    # on responses whose nullable arrays are null (aborted_transactions on Apache
    # Kafka), and only the leading fields are needed.
    version = response.API_VERSION
    found: dict[TopicPartition, int] = {}
    retry = False
    for topic, partitions in response.topics:
        for entry in partitions:
            tp = TopicPartition(topic, entry[0])
            if tp not in parts:
                continue
            code = entry[1]
            if code in _RETRIABLE_CODES:
                retry = True
                continue
            if code != 0:
                raise error_for_code(code)(f"Fetch (high watermark) for {tp.topic}-{tp.partition}")
            highwater = entry[2]
            stable = entry[3] if version >= 4 else -1
            # Brokers before v4 semantics have no LSO: fall back to the high watermark.
            found[tp] = stable if read_committed and stable >= 0 else highwater
    return found, retry
