"""Pure helpers of the benchmark harness: statistics, batch walking, delivery analysis."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest

from benchmarks.group import Member, delivery_counts, settled
from benchmarks.harness import Outcome, Plan
from benchmarks.rawfetch import walk_batches
from benchmarks.stats import longest_gap, percentile, ratio, summarize


def test_summarize_reports_median_min_max_and_count() -> None:
    s = summarize([3.0, 1.0, 10.0, 2.0])
    assert (s.median, s.min, s.max, s.n) == (2.5, 1.0, 10.0, 4)


def test_summarize_rejects_empty_and_nan() -> None:
    with pytest.raises(ValueError, match="at least one"):
        summarize([])
    with pytest.raises(ValueError, match="NaN"):
        summarize([1.0, math.nan])


@pytest.mark.parametrize(
    ("q", "expected"), [(0, 1.0), (50, 2.5), (100, 4.0), (25, 1.75), (99, 3.97)]
)
def test_percentile_interpolates_between_ranks(q: float, expected: float) -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], q) == pytest.approx(expected)


def test_percentile_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def test_ratio_is_none_when_a_side_is_missing() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(None, 2.0) is None
    assert ratio(1.0, 0.0) is None


def test_longest_gap_counts_window_edges_and_ignores_outside_points() -> None:
    assert longest_gap([1.0, 2.0, 2.5, 9.0], start=0.5, end=4.0) == pytest.approx(1.5)
    assert longest_gap([], start=1.0, end=3.0) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        longest_gap([], start=3.0, end=1.0)


def _batch(base: int, count: int, body: int = 20) -> bytes:
    """A v2 record batch header with the fields walk_batches reads, plus filler."""
    header = bytearray(61)
    length = 61 - 12 + body
    struct.pack_into(">qi", header, 0, base, length)
    header[16] = 2  # magic
    struct.pack_into(">i", header, 23, count - 1)  # lastOffsetDelta
    struct.pack_into(">i", header, 57, count)
    return bytes(header) + b"\0" * body


def test_walk_batches_counts_records_and_next_offset() -> None:
    data = _batch(100, 5) + _batch(105, 3)
    assert walk_batches(data) == (8, 108)


def test_walk_batches_ignores_a_truncated_trailing_batch() -> None:
    data = _batch(0, 4) + _batch(4, 6)[:-5]
    assert walk_batches(data) == (4, 4)
    assert walk_batches(b"") == (0, None)


def _member(events: list[dict[str, Any]], owned: set[int]) -> Member:
    m = Member("M", proc=None)  # type: ignore[arg-type]  # analysis only, no process
    m.events = events
    m.owned = owned
    return m


def test_delivery_counts_finds_overlapping_offsets_across_members() -> None:
    a = _member([{"t": 1, "ev": "batch", "r": {"0": [0, 9], "1": [0, 4]}}], set())
    b = _member([{"t": 2, "ev": "batch", "r": {"0": [5, 14]}}], set())
    total, distinct = delivery_counts([a, b])
    assert (total, distinct) == (25, 20)


def test_settled_needs_every_partition_once_and_delivery_after_assignment() -> None:
    a = _member(
        [{"t": 1, "ev": "assigned", "p": [0, 1]}, {"t": 2, "ev": "batch", "r": {"0": [0, 0]}}],
        {0, 1},
    )
    b = _member([{"t": 3, "ev": "assigned", "p": [2, 3]}], {2, 3})
    assert not settled([a, b], 4)  # b has not delivered since its assignment
    b.events.append({"t": 4, "ev": "batch", "r": {"2": [0, 0]}})
    assert settled([a, b], 4)
    assert not settled([a, b], 5)  # partition 4 has no owner
    b.owned = {1, 2, 3}
    assert not settled([a, b], 4)  # partition 1 owned twice


def test_outcome_marks_unavailable_and_keeps_no_numbers() -> None:
    o = Outcome()
    o.record({"ok": False, "unavailable": True, "error": "not written yet"})
    o.summarize({"x": lambda r: r["x"]})
    assert o.status == "unavailable" and o.summary == {}


def test_outcome_summary_skips_runs_where_a_metric_does_not_apply() -> None:
    o = Outcome()
    for v in (1.0, math.nan, 3.0):
        o.record({"ok": True, "x": v})
    o.summarize({"x": lambda r: r["x"]})
    assert (o.summary["x"].median, o.summary["x"].n) == (2.0, 2)


def test_plan_refuses_fewer_than_three_repetitions() -> None:
    with pytest.raises(ValueError, match=">= 3"):
        Plan.make(quick=True, reps=2)
    assert Plan.make(quick=True).reps >= 3


def test_a_variants_environment_reaches_its_worker_and_only_its_worker() -> None:
    from benchmarks.harness import _variant_env, worker_env

    fixed = _variant_env({"client": "aiogroup", "variant": "mmap128k"})
    assert fixed == {"MALLOC_MMAP_THRESHOLD_": "131072"}
    assert worker_env(fixed)["MALLOC_MMAP_THRESHOLD_"] == "131072"
    assert _variant_env({"client": "aiogroup", "variant": "defaults"}) == {}
    assert _variant_env({"client": "nobody", "variant": "defaults"}) == {}
    assert _variant_env({"task": "raw"}) == {}
