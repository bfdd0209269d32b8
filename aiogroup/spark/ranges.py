"""Micro-batch offsets: what Spark checkpoints, and the per-partition ranges they imply.

Spark stores each batch's end offset as JSON and replays a batch from its (start, end)
pair alone, so everything needed to re-read a batch must be in those two values.  The
JSON is the one Spark's Kafka source writes - ``{"topic": {"0": 42}}``, the next offset
to read per partition - plus, when a partition's range does not begin where the
previous batch left it (a partition gained from another group member begins at the
group's committed offset), that beginning under the key ``"@from"``.  ``@`` cannot occur
in a topic name, so the key cannot collide with one.

Everything here is pure: no Kafka, no Spark.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiogroup.structs import TopicPartition

__all__ = ["FROM_KEY", "BatchOffset", "OffsetRange", "advance", "cap", "plan_ranges"]

FROM_KEY = "@from"


def _nested(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    nested: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        nested.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return nested


def _flat(nested: Any, what: str) -> dict[TopicPartition, int]:
    if not isinstance(nested, dict):
        raise ValueError(f"{what} must be a JSON object of topics, got {nested!r}")
    flat: dict[TopicPartition, int] = {}
    for topic, partitions in nested.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"{what}: topic {topic!r} must map partitions to offsets")
        for partition, offset in partitions.items():
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise ValueError(f"{what}: offset of {topic}-{partition} is {offset!r}")
            flat[TopicPartition(topic, int(partition))] = offset
    return flat


@dataclass(frozen=True)
class BatchOffset:
    """A batch boundary: the next offset per partition, and where gained ranges begin."""

    positions: Mapping[TopicPartition, int] = field(default_factory=dict)
    starts: Mapping[TopicPartition, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        result: dict[str, Any] = dict(_nested(self.positions))
        if self.starts:
            result[FROM_KEY] = _nested(self.starts)
        return result

    @classmethod
    def from_json(cls, value: Any) -> BatchOffset:
        if not isinstance(value, dict):
            raise ValueError(f"source offset must be a JSON object, got {value!r}")
        body = {k: v for k, v in value.items() if k != FROM_KEY}
        starts = _flat(value.get(FROM_KEY, {}), FROM_KEY)
        positions = _flat(body, "source offset")
        stray = set(starts) - set(positions)
        if stray:
            raise ValueError(f"source offset has {FROM_KEY} entries without a position: {stray}")
        return cls(positions, starts)


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records ``[from_offset, until_offset)`` of one partition: one Spark input partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def plan_ranges(start: BatchOffset, end: BatchOffset) -> list[OffsetRange]:
    """The non-empty ranges a batch from ``start`` to ``end`` reads, one per partition."""
    ranges = []
    for tp, until in sorted(end.positions.items()):
        begin = end.starts.get(tp, start.positions.get(tp))
        if begin is None:
            raise ValueError(f"batch end names {tp} but neither it nor the start says where from")
        if until < begin:
            raise ValueError(f"batch range of {tp} runs backwards: {begin} -> {until}")
        if until > begin:
            ranges.append(OffsetRange(tp.topic, tp.partition, begin, until))
    return ranges


def cap(
    available: Mapping[TopicPartition, tuple[int, int]], max_rows: int | None
) -> dict[TopicPartition, int]:
    """End offset per partition so that at most ``max_rows`` records are read in total.

    Each partition gets a share proportional to its backlog (Spark's Kafka source does
    the same), so a busy partition cannot starve the others; the remainder of the
    integer division goes one record at a time to the largest leftovers.
    """
    sizes = {tp: max(0, end - begin) for tp, (begin, end) in available.items()}
    total = sum(sizes.values())
    if max_rows is None or total <= max_rows:
        return {tp: begin + sizes[tp] for tp, (begin, _end) in available.items()}
    shares = {tp: size * max_rows // total for tp, size in sizes.items()}
    leftover = max_rows - sum(shares.values())
    by_remainder = sorted(sizes, key=lambda tp: (-(sizes[tp] - shares[tp]), tp))
    for tp in by_remainder[:leftover]:
        shares[tp] += 1
    return {tp: begin + shares[tp] for tp, (begin, _end) in available.items()}


def advance(
    start: BatchOffset,
    begins: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    max_rows: int | None = None,
) -> BatchOffset:
    """The next batch end for the owned partitions; ``start`` itself when nothing is new.

    ``begins`` is where each owned partition's next range starts (normally its position
    in ``start``); ``ends`` the highest offset it may read to.  Partitions in ``start``
    that this member does not own keep their positions, so the checkpoint remembers them
    should they come back.
    """
    available = {tp: (begin, max(begin, ends.get(tp, begin))) for tp, begin in begins.items()}
    untils = cap(available, max_rows)
    positions = dict(start.positions)
    starts = {}
    for tp, begin in begins.items():
        positions[tp] = untils[tp]
        if start.positions.get(tp) != begin:
            starts[tp] = begin
    if not starts and positions == dict(start.positions):
        return start
    return BatchOffset(positions, starts)
