"""The commit-metadata format: round trips, the size bound, foreign metadata."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiogroup.processing.offset_metadata import DEFAULT_MAX_BYTES, PREFIX, decode, encode, runs_of


@st.composite
def committed_and_runs(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]]]:
    committed = draw(st.integers(0, 2**40))
    sizes = draw(st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 5000)), max_size=60))
    runs = []
    cursor = committed + 1
    for gap, length in sizes:
        start = cursor + gap
        runs.append((start, start + length))
        cursor = start + length + 1  # keep runs apart so none merge
    return committed, runs


@given(committed_and_runs())
def test_round_trip(case: tuple[int, list[tuple[int, int]]]) -> None:
    committed, runs = case
    text = encode(committed, runs, max_bytes=1_000_000)
    assert decode(committed, text) == runs
    assert text == "" if not runs else text.startswith(PREFIX)


@given(committed_and_runs(), st.integers(10, 300))
def test_size_bound_keeps_the_nearest_runs(
    case: tuple[int, list[tuple[int, int]]], max_bytes: int
) -> None:
    committed, runs = case
    text = encode(committed, runs, max_bytes=max_bytes)
    assert len(text.encode()) <= max_bytes
    decoded = decode(committed, text)
    assert decoded == runs[: len(decoded)]  # a prefix: the farthest runs are dropped


def test_worst_case_window_fits_kafkas_default() -> None:
    # 10,000 unfinished records alternating with finished ones: far more runs than
    # fit; the encoding stays under Kafka's offset.metadata.max.bytes (4096).
    runs = [(1000 + 2 * i + 1, 1000 + 2 * i + 2) for i in range(10_000)]
    text = encode(1000, runs)
    assert len(text.encode()) <= DEFAULT_MAX_BYTES < 4096
    assert len(decode(1000, text)) > 500


def test_adjacent_runs_merge_and_example() -> None:
    assert encode(100, [(103, 105), (105, 106), (116, 117)]) == "ag1:2.3,a.1"
    assert decode(100, "ag1:2.3,a.1") == [(103, 106), (116, 117)]


@pytest.mark.parametrize(
    "text", ["", None, "hello", "ag1:", "ag1:x", "ag1:1.0", "ag1:-1.2", "ag1:1.2,", "ag1:1.2.3"]
)
def test_foreign_or_malformed_metadata_skips_nothing(text: str | None) -> None:
    assert decode(5, text) == []


@pytest.mark.parametrize("runs", [[(5, 7)], [(7, 7)], [(8, 9), (7, 8)], [(8, 10), (9, 11)]])
def test_encode_rejects_runs_not_sorted_above_the_offset(runs: list[tuple[int, int]]) -> None:
    with pytest.raises(ValueError):
        encode(5, runs)


def test_runs_of() -> None:
    assert runs_of([1, 2, 3, 5, 7, 8]) == [(1, 4), (5, 6), (7, 9)]
    assert runs_of([]) == []


def test_the_cli_counts_finished_records_ahead_of_the_commit_within_the_log() -> None:
    """``aiogroup lag``'s progress column: runs listed in the metadata, cut at the log end."""
    from aiogroup.cli import finished_ahead

    metadata = encode(5, [(6, 10), (12, 20)])
    assert finished_ahead(5, metadata, 20) == 12
    assert finished_ahead(5, metadata, 15) == 7  # a run past the high watermark is cut
    assert finished_ahead(5, metadata, None) == 12
    assert finished_ahead(5, "", 20) == 0  # a plain commit
    assert finished_ahead(5, "written by another client", 20) == 0
