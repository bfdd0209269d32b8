"""Summaries of repeated measurements: the numbers the report tables are made of.

Kept free of I/O and of any client so that it can be unit-tested on its own.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Summary:
    """Median, min and max of one metric over the repetitions of one measurement."""

    median: float
    min: float
    max: float
    n: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(values: Iterable[float]) -> Summary:
    """Summarize repetitions; an empty input is a harness bug, so it raises."""
    data = [float(v) for v in values]
    if not data:
        raise ValueError("summarize() needs at least one value")
    if any(math.isnan(v) for v in data):
        raise ValueError("summarize() got NaN; a failed repetition must be reported, not averaged")
    return Summary(median=statistics.median(data), min=min(data), max=max(data), n=len(data))


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks.

    The same definition as numpy's default, so p50 of an even-sized sample is the
    mean of the two middle values and p100 is the maximum.
    """
    if not values:
        raise ValueError("percentile() of an empty sample")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    data = sorted(values)
    pos = (len(data) - 1) * q / 100
    lo = math.floor(pos)
    hi = math.ceil(pos)
    if lo == hi:
        return data[lo]
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def ratio(value: float | None, reference: float | None) -> float | None:
    """value / reference, or None when either side is missing or the reference is zero."""
    if value is None or reference is None or reference == 0:
        return None
    return value / reference


def longest_gap(timestamps: Iterable[float], start: float, end: float) -> float:
    """Longest stretch within [start, end] with no timestamp, the edges counting as events.

    Used for "longest pause in a member's delivery" during a rebalance: the window
    is the rebalance, the timestamps are the member's non-empty polls.
    """
    if end < start:
        raise ValueError(f"window end {end} is before its start {start}")
    points = sorted(t for t in timestamps if start <= t <= end)
    edges = [start, *points, end]
    return max(b - a for a, b in itertools.pairwise(edges))
