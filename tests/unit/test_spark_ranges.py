"""Micro-batch offsets: JSON round trips, range planning, proportional read limits."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiogroup.spark.ranges import FROM_KEY, BatchOffset, OffsetRange, advance, cap, plan_ranges
from aiogroup.structs import TopicPartition

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_json_is_spark_kafka_shaped_and_round_trips() -> None:
    offset = BatchOffset({A0: 5, A1: 7, B0: 1}, {B0: 0})
    encoded = offset.to_json()
    assert encoded["a"] == {"0": 5, "1": 7}
    assert encoded[FROM_KEY] == {"b": {"0": 0}}
    assert BatchOffset.from_json(json.loads(json.dumps(encoded))) == offset


def test_no_from_key_without_jumps() -> None:
    assert BatchOffset({A0: 5}).to_json() == {"a": {"0": 5}}


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"a": [1]},
        {"a": {"0": -1}},
        {"a": {"0": "x"}},
        {"a": {"0": 1}, FROM_KEY: {"b": {"0": 0}}},
    ],
)
def test_malformed_offsets_are_rejected(bad: object) -> None:
    with pytest.raises(ValueError):
        BatchOffset.from_json(bad)


def test_plan_ranges_uses_start_positions_and_explicit_starts() -> None:
    start = BatchOffset({A0: 10, A1: 3})
    end = BatchOffset({A0: 15, A1: 3, B0: 40}, {B0: 30})
    assert plan_ranges(start, end) == [OffsetRange("a", 0, 10, 15), OffsetRange("b", 0, 30, 40)]


def test_plan_ranges_rejects_unknown_start_and_backward_ranges() -> None:
    with pytest.raises(ValueError, match="where from"):
        plan_ranges(BatchOffset(), BatchOffset({A0: 3}))
    with pytest.raises(ValueError, match="backwards"):
        plan_ranges(BatchOffset({A0: 5}), BatchOffset({A0: 3}))


def test_advance_returns_start_itself_when_nothing_is_new() -> None:
    start = BatchOffset({A0: 5, A1: 9})
    assert advance(start, {A0: 5}, {A0: 5}) is start


def test_advance_keeps_unowned_partitions_and_marks_jumps() -> None:
    start = BatchOffset({A0: 5, A1: 9})
    # A1 is no longer owned; B0 was gained at the group's committed offset 20.
    end = advance(start, {A0: 5, B0: 20}, {A0: 8, B0: 25})
    assert end.positions == {A0: 8, A1: 9, B0: 25}
    assert end.starts == {B0: 20}
    assert plan_ranges(start, end) == [OffsetRange("a", 0, 5, 8), OffsetRange("b", 0, 20, 25)]


def test_advance_jump_without_new_records_still_moves_the_position() -> None:
    start = BatchOffset({A0: 5})
    end = advance(start, {A0: 50}, {A0: 50})
    assert end.positions == {A0: 50}
    assert plan_ranges(start, end) == []


def test_cap_is_proportional() -> None:
    result = cap({A0: (0, 300), A1: (0, 100)}, 100)
    assert result == {A0: 75, A1: 25}


@given(
    st.dictionaries(
        st.builds(TopicPartition, st.sampled_from("abc"), st.integers(0, 5)),
        st.tuples(st.integers(0, 1000), st.integers(0, 1000)),
        max_size=8,
    ),
    st.one_of(st.none(), st.integers(1, 3000)),
)
def test_cap_never_exceeds_the_limit_or_the_backlog(
    available: dict[TopicPartition, tuple[int, int]], limit: int | None
) -> None:
    available = {tp: (lo, lo + n) for tp, (lo, n) in available.items()}
    result = cap(available, limit)
    total = sum(result[tp] - lo for tp, (lo, _) in available.items())
    backlog = sum(hi - lo for lo, hi in available.values())
    for tp, (lo, hi) in available.items():
        assert lo <= result[tp] <= hi
    assert total == (backlog if limit is None else min(limit, backlog))
