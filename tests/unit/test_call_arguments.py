"""call_arguments: each check of GroupConsumer's call arguments, accepting and refusing."""

from __future__ import annotations

import re
from typing import Any

import pytest

from aiogroup._support.call_arguments import (
    check_partition,
    check_poll_limits,
    check_seek_offset,
    check_timestamps,
    check_topics_or_pattern,
    compile_pattern,
    topic_list,
)
from aiogroup.errors import ConfigurationError, InvalidTopicNameError
from aiogroup.structs import TopicPartition

TP = TopicPartition("t", 0)


@pytest.mark.parametrize("tp", [TP, TopicPartition("a.b-c_1", 7)])
def test_a_partition_is_accepted(tp: TopicPartition) -> None:
    check_partition(tp)


@pytest.mark.parametrize(
    ("tp", "error", "fragment"),
    [
        (("t", 0), TypeError, "assign() takes TopicPartition objects, got ('t', 0)"),
        ("t", TypeError, "assign() takes TopicPartition objects, got 't'"),
        (TopicPartition("t", -1), ValueError, "partition numbers are >= 0, got"),
        (TopicPartition("bad topic", 0), InvalidTopicNameError, "may contain only"),
        (TopicPartition("", 0), InvalidTopicNameError, ""),
    ],
)
def test_what_is_not_a_partition_is_refused(tp: Any, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as info:
        check_partition(tp)
    assert fragment in str(info.value)


@pytest.mark.parametrize(("timeout_ms", "max_records"), [(0, None), (0, 1), (10_000, 500)])
def test_poll_limits_accepted(timeout_ms: int, max_records: int | None) -> None:
    check_poll_limits(timeout_ms, max_records)


@pytest.mark.parametrize(
    ("timeout_ms", "max_records", "message"),
    [
        (-1, None, "timeout_ms must be >= 0, got -1"),
        (-1, 0, "timeout_ms must be >= 0, got -1"),  # the first problem is named
        (0, 0, "max_records must be > 0 or None, got 0"),
        (0, -3, "max_records must be > 0 or None, got -3"),
    ],
)
def test_poll_limits_refused(timeout_ms: int, max_records: int | None, message: str) -> None:
    with pytest.raises(ValueError) as info:
        check_poll_limits(timeout_ms, max_records)
    assert str(info.value) == message


@pytest.mark.parametrize("offset", [0, 1, 2**63 - 1])
def test_seek_offsets_accepted(offset: int) -> None:
    check_seek_offset(offset)


@pytest.mark.parametrize("offset", [-1, True, False, 1.0, "1", None])
def test_seek_offsets_refused(offset: object) -> None:
    with pytest.raises(ValueError) as info:
        check_seek_offset(offset)
    assert str(info.value) == f"seek() offset must be an int >= 0, got {offset!r}"


def test_timestamps() -> None:
    check_timestamps({})
    check_timestamps({TP: 0, TopicPartition("t", 1): 1_700_000_000_000})
    with pytest.raises(ValueError) as info:
        check_timestamps({TP: 5, TopicPartition("t", 1): -2})
    assert str(info.value).endswith("partition=1) must be >= 0, got -2")


@pytest.mark.parametrize(
    ("given", "expected"),
    [("t", ["t"]), (["a", "b"], ["a", "b"]), (("a",), ["a"]), (iter(["x"]), ["x"]), ((), [])],
)
def test_topic_list(given: Any, expected: list[str]) -> None:
    assert topic_list(given) == expected


@pytest.mark.parametrize(("topics", "pattern"), [(["t"], None), ([], "t.*"), ([], "")])
def test_topics_or_a_pattern_accepted(topics: list[str], pattern: str | None) -> None:
    check_topics_or_pattern(topics, pattern)


@pytest.mark.parametrize(
    ("topics", "pattern", "message"),
    [
        (["t"], "t.*", "subscribe() takes topics or pattern, not both"),
        ([], None, "subscribe() needs topics or a pattern"),
    ],
)
def test_topics_and_pattern_both_or_neither_refused(
    topics: list[str], pattern: str | None, message: str
) -> None:
    with pytest.raises(ConfigurationError) as info:
        check_topics_or_pattern(topics, pattern)
    assert str(info.value).endswith(message)  # aiokafka's errors prefix their class name


def test_compile_pattern() -> None:
    assert compile_pattern("^t-[0-9]+$").fullmatch("t-12")
    with pytest.raises(ConfigurationError, match=re.escape("invalid subscription pattern '(':")):
        compile_pattern("(")
