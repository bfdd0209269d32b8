"""The commit metadata that lists records finished beyond the committed offset.

The committed offset of a partition is its first unfinished record, but records
after it may be finished already (other keys, other lanes).  They are written
into the commit's metadata string so the next owner (this member after a restart,
or another one after a rebalance) skips them rather than processing them again.

Format: ``ag1:`` then runs of finished offsets, each ``gap.length`` in base 36,
comma-separated; the first gap counts from ``committed + 1`` (the committed offset
itself is unfinished, or it would not be the committed offset), every later gap
from the end of the previous run.  ``ag1:2.3,a.1`` at offset 100 says 103, 104, 105
and 116 are finished.  Runs cost a few bytes each, and there is at most one run
per unfinished record (the window the processor bounds).

Kafka refuses metadata longer than ``offset.metadata.max.bytes`` (4096 by default)
with OFFSET_METADATA_TOO_LARGE, so :func:`encode` drops the farthest runs to stay
under ``max_bytes``; records in dropped runs are processed again by the next owner
(at least once still holds, only the saving is lost).  Metadata that is not ours
(another tool's, or malformed) decodes to nothing skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

__all__ = ["DEFAULT_MAX_BYTES", "PREFIX", "decode", "encode"]

PREFIX = "ag1:"
#: Below Kafka's default offset.metadata.max.bytes (4096), with room to spare.
DEFAULT_MAX_BYTES = 4000

_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def _b36(n: int) -> str:
    if n == 0:
        return "0"
    out = []
    while n:
        n, r = divmod(n, 36)
        out.append(_DIGITS[r])
    return "".join(reversed(out))


def encode(
    committed: int, finished: Iterable[tuple[int, int]], max_bytes: int = DEFAULT_MAX_BYTES
) -> str:
    """Metadata for ``committed`` listing the half-open ``finished`` runs beyond it.

    ``finished`` must be sorted, disjoint, non-empty runs all above ``committed``;
    adjacent runs are merged.  Returns "" when there is nothing to list.
    """
    if max_bytes < len(PREFIX) + 3:
        raise ValueError(f"max_bytes must leave room for one run, got {max_bytes}")
    parts: list[str] = []
    size = len(PREFIX)
    cursor = committed + 1
    merged: list[tuple[int, int]] = []
    for start, end in finished:
        if end <= start:
            raise ValueError(f"empty or reversed run [{start}, {end})")
        if start < cursor or (merged and start < merged[-1][1]):
            raise ValueError(f"run [{start}, {end}) is not sorted above {committed}")
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    for start, end in merged:
        part = f"{_b36(start - cursor)}.{_b36(end - start)}"
        extra = len(part) + (1 if parts else 0)
        if size + extra > max_bytes:
            break
        parts.append(part)
        size += extra
        cursor = end
    if not parts:
        return ""
    return PREFIX + ",".join(parts)


def decode(committed: int, metadata: str | None) -> list[tuple[int, int]]:
    """The finished runs ``encode(committed, ...)`` wrote; [] for anything else."""
    if not metadata or not metadata.startswith(PREFIX):
        return []
    runs: list[tuple[int, int]] = []
    cursor = committed + 1
    try:
        for part in metadata[len(PREFIX) :].split(","):
            gap_text, length_text = part.split(".")
            gap, length = int(gap_text, 36), int(length_text, 36)
            if gap < 0 or length <= 0:
                return []
            start = cursor + gap
            runs.append((start, start + length))
            cursor = start + length
    except ValueError:
        return []
    return runs


def runs_of(offsets: Sequence[int]) -> list[tuple[int, int]]:
    """Sorted distinct offsets as half-open runs (a helper for tests and the tracker)."""
    runs: list[tuple[int, int]] = []
    for o in offsets:
        if runs and runs[-1][1] == o:
            runs[-1] = (runs[-1][0], o + 1)
        else:
            runs.append((o, o + 1))
    return runs
