"""Fetch on the wire: the request, each partition's parsed result, and what an error code means.

aiokafka decodes a Fetch response into positional tuples whose layout changes with
the API version; ``parse_fetch_response`` turns them into ``PartitionResult`` once,
so nothing else indexes into a tuple.  ``FETCH_REACTIONS`` is the whole error policy
of the fetch path: one row per code, and every code not listed is reported to the
application (its partition backs off, so a fatal error is not asked again at once).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.errors import OffsetOutOfRangeError
from aiokafka.protocol.fetch import FetchRequest

from aiogroup.errors import RETRIABLE_CODES, STALE_METADATA_CODES
from aiogroup.structs import TopicPartition

__all__ = [
    "FETCH_REACTIONS",
    "PartitionResult",
    "Reaction",
    "build_fetch_request",
    "parse_fetch_response",
    "reaction_for",
]

READ_UNCOMMITTED = 0
READ_COMMITTED = 1


class Reaction(enum.Enum):
    """What the fetcher does with one partition's answer."""

    #: Buffer the records and update the partition's watermarks.
    DELIVER = "deliver"
    #: The offset is outside the log: reset the position (or report, strategy none).
    RESET_POSITION = "reset position"
    #: Metadata is stale: refresh it and retry the partition after a backoff.
    REFRESH_METADATA = "refresh metadata"
    #: A passing condition: retry the partition after a backoff.
    RETRY = "retry"
    #: Raise to the application; retry the partition after a backoff.
    REPORT = "report"


FETCH_REACTIONS: Mapping[int, Reaction] = {
    0: Reaction.DELIVER,
    OffsetOutOfRangeError.errno: Reaction.RESET_POSITION,
    **dict.fromkeys(sorted(STALE_METADATA_CODES), Reaction.REFRESH_METADATA),
    **dict.fromkeys(sorted(RETRIABLE_CODES - STALE_METADATA_CODES), Reaction.RETRY),
}


def reaction_for(code: int) -> Reaction:
    return FETCH_REACTIONS.get(code, Reaction.REPORT)


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """One partition of a Fetch response, whatever the API version."""

    tp: TopicPartition
    error_code: int
    highwater: int
    #: -1 when the broker did not say (versions before 4).
    last_stable_offset: int
    #: -1 when the broker did not say (versions before 5).
    log_start_offset: int
    #: (producer_id, first_offset) of aborted transactions; None before version 4,
    #: where the broker cannot filter by transaction.
    aborted: list[tuple[int, int]] | None
    records: bytes
    #: The replica the leader wants this consumer to fetch from (KIP-392); -1 when
    #: none is named (versions before 11, followers, a leader preferring itself).
    preferred_read_replica: int = -1


def parse_fetch_response(response: Any) -> Iterator[PartitionResult]:
    version = response.API_VERSION
    for topic, partitions in response.topics:
        for p in partitions:
            yield PartitionResult(
                tp=TopicPartition(topic, p[0]),
                error_code=p[1],
                highwater=p[2],
                last_stable_offset=p[3] if version >= 4 else -1,
                log_start_offset=p[4] if version >= 5 else -1,
                aborted=((p[5] if version >= 5 else p[4]) or []) if version >= 4 else None,
                records=p[-1] or b"",
                preferred_read_replica=p[6] if version >= 11 else -1,
            )


def build_fetch_request(
    partitions: Sequence[tuple[TopicPartition, int]],
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    partition_bytes: int,
    read_committed: bool,
    rack_id: str = "",
) -> FetchRequest:
    """One Fetch for (partition, offset) pairs, all with the same per-partition limit.

    ``rack_id`` (KIP-392) is sent from version 11 on, the highest aiokafka speaks, so
    a broker that knows it (Kafka 2.4+) gets it; older versions leave it out.
    """
    by_topic: dict[str, list[tuple[int, int, int]]] = {}
    for tp, offset in partitions:
        by_topic.setdefault(tp.topic, []).append((tp.partition, offset, partition_bytes))
    return FetchRequest(
        max_wait_ms,
        min_bytes,
        max_bytes,
        READ_COMMITTED if read_committed else READ_UNCOMMITTED,
        list(by_topic.items()),
        rack_id=rack_id,
    )
