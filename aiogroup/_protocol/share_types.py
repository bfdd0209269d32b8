"""The share APIs' value types, with no wire code: acknowledge types, acquire modes and
acknowledgement batches.

Why apart from :mod:`aiogroup._protocol.share`: the pure pieces of the share consumer
(the acknowledgement tracker, the share session) speak these types and must stay free
of aiokafka (whose protocol classes ``share`` builds on), so they can be replayed in
unit tests without a loop or a socket, as the membership machines are.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["AckBatch", "AcknowledgeType", "AcquireMode"]


class AcknowledgeType(enum.IntEnum):
    """How a record is settled (KIP-932; RENEW is KIP-1222).

    GAP (0) marks an offset with no record (compacted away, a transaction marker)
    inside an acknowledged range; the others are the application's choices.
    """

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class AcquireMode(enum.IntEnum):
    """ShareFetch v2's ``share_acquire_mode`` (KIP-1206)."""

    #: The broker may hand out whole batches, exceeding ``max_records``.
    BATCH_OPTIMIZED = 0
    #: ``max_records`` is a strict limit on the records acquired.
    RECORD_LIMIT = 1


@dataclass(frozen=True, slots=True)
class AckBatch:
    """Acknowledgements of the offsets ``first..last`` (inclusive).

    ``types`` holds one type for the whole range, or one per offset (the wire's two
    shapes).
    """

    first_offset: int
    last_offset: int
    types: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.first_offset < 0 or self.last_offset < self.first_offset:
            raise ValueError(
                f"acknowledgement range {self.first_offset}..{self.last_offset} is not a range"
            )
        count = self.last_offset - self.first_offset + 1
        if len(self.types) not in (1, count):
            raise ValueError(
                f"acknowledgement range {self.first_offset}..{self.last_offset} needs 1 or "
                f"{count} types, got {len(self.types)}"
            )
        for t in self.types:
            AcknowledgeType(t)

    def type_at(self, offset: int) -> int:
        return self.types[0] if len(self.types) == 1 else self.types[offset - self.first_offset]
