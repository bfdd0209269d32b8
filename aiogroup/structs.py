"""Value types shared by every layer.

TopicPartition, OffsetAndMetadata and ConsumerRecord are aiokafka's own classes so
that applications can pass them between aiokafka and aiogroup freely.  The rest are
small enums of ours; nothing here does I/O.
"""

from __future__ import annotations

import enum

from aiokafka.structs import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

__all__ = [
    "ConsumerRecord",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "OffsetResetStrategy",
    "RebalanceProtocol",
    "TopicPartition",
]


class RebalanceProtocol(enum.Enum):
    """How partitions move between members (KIP-429)."""

    EAGER = "eager"
    COOPERATIVE = "cooperative"


class OffsetResetStrategy(enum.Enum):
    """What to do when a partition has no committed offset or its offset is out of range."""

    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"

    @property
    def list_offsets_timestamp(self) -> int:
        """The ListOffsets timestamp that asks for this position (-2 earliest, -1 latest)."""
        if self is OffsetResetStrategy.EARLIEST:
            return -2
        if self is OffsetResetStrategy.LATEST:
            return -1
        raise ValueError("OffsetResetStrategy.NONE has no ListOffsets timestamp")
