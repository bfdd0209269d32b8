"""What a ``commit()`` call asks for: the application's offsets, checked and normalized.

Pure: the facade hands in what the application passed and what the member owns,
and gets back the offsets to send or an error naming the problem.  Kept out of
``consumer.py`` so that every refusal (a key that is not a TopicPartition, an
offset of the wrong type or below zero, a partition the member does not own) is
unit-tested exhaustively, without a started consumer.

Ownership follows the subscription: under group management only the partitions
the group assigned may be committed (the broker would fence the others, or worse,
accept them for a member that does not own them); under ``assign()`` only the
assigned ones (aiokafka raises ``IllegalStateError`` there; ``CommitFailedError``
is what the group-managed case raises, and both are KafkaErrors); with neither,
nothing is checked (a group-less tool committing for a group it is not part of).
The subscription comes in as two flags, not ``SubscriptionType``: the state board
uses asyncio, and a pure module imports no I/O (tests/unit/membership/test_purity.py).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from aiogroup.errors import CommitFailedError
from aiogroup.structs import OffsetAndMetadata, TopicPartition

__all__ = ["check_owned", "normalize_offsets"]


def normalize_offsets(
    offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
) -> dict[TopicPartition, OffsetAndMetadata]:
    """``offsets`` as OffsetAndMetadata; raises on the first bad key or value.

    An int becomes ``OffsetAndMetadata(offset, "")``.  A bool is refused although it
    is an int: ``{tp: True}`` is a bug, not offset 1.
    """
    result: dict[TopicPartition, OffsetAndMetadata] = {}
    for tp, value in offsets.items():
        if not isinstance(tp, TopicPartition):
            raise TypeError(f"commit() keys must be TopicPartition, got {tp!r}")
        if isinstance(value, OffsetAndMetadata):
            oam = value
        elif isinstance(value, int) and not isinstance(value, bool):
            oam = OffsetAndMetadata(value, "")
        else:
            raise TypeError(f"commit() offset for {tp} must be int or OffsetAndMetadata")
        if oam.offset < 0:
            raise ValueError(f"commit() offset for {tp} must be >= 0, got {oam.offset}")
        result[tp] = oam
    return result


def check_owned(
    partitions: Collection[TopicPartition],
    owned: Collection[TopicPartition],
    *,
    group_managed: bool,
    user_assigned: bool,
) -> None:
    """Raise ``CommitFailedError`` naming the partitions this member may not commit.

    ``group_managed``: subscribed (topics or pattern); ``user_assigned``: ``assign()``.
    A subscription is at most one of them; with neither, nothing is checked.
    """
    if not (group_managed or user_assigned):
        return
    unassigned = sorted(set(partitions) - set(owned))
    if not unassigned:
        return
    if group_managed:
        raise CommitFailedError(
            f"cannot commit partitions not assigned to this member: {unassigned}"
        )
    raise CommitFailedError(
        f"cannot commit partitions not in this consumer's assign(): {unassigned}; "
        "assign() them first"
    )
