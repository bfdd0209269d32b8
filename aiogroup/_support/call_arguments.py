"""Checks of the arguments the application passes to ``GroupConsumer``'s calls.

Pure functions of the arguments alone (no consumer state): each raises the error
aiokafka code expects (``ValueError``, ``TypeError``, ``ConfigurationError``) with a
message naming the argument and the value, or returns the argument in the form the
facade uses.  They live here, not in ``consumer.py``, so that every refusal is
unit-tested exhaustively and the facade's methods only wire; what depends on the
consumer's state (started or not, subscribed or assigned) stays in the facade.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from aiogroup.config import validate_topic_name
from aiogroup.errors import ConfigurationError
from aiogroup.structs import TopicPartition

__all__ = [
    "check_partition",
    "check_poll_limits",
    "check_seek_offset",
    "check_timestamps",
    "check_topics_or_pattern",
    "compile_pattern",
    "topic_list",
]


def check_partition(tp: object) -> None:
    """A partition ``assign()`` can take: a TopicPartition, a valid topic, index >= 0."""
    if not isinstance(tp, TopicPartition):
        raise TypeError(f"assign() takes TopicPartition objects, got {tp!r}")
    validate_topic_name(tp.topic)
    if tp.partition < 0:
        raise ValueError(f"partition numbers are >= 0, got {tp}")


def check_poll_limits(timeout_ms: int, max_records: int | None) -> None:
    """``getmany``'s bounds: a wait of zero or more ms, and a positive record limit."""
    if timeout_ms < 0:
        raise ValueError(f"timeout_ms must be >= 0, got {timeout_ms}")
    if max_records is not None and max_records <= 0:
        raise ValueError(f"max_records must be > 0 or None, got {max_records}")


def check_seek_offset(offset: object) -> None:
    """An offset ``seek()`` can go to: an int >= 0 (a bool is a bug, not 0 or 1)."""
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValueError(f"seek() offset must be an int >= 0, got {offset!r}")


def check_timestamps(timestamps: Mapping[TopicPartition, int]) -> None:
    """``offsets_for_times`` looks up ms since the epoch; the negative ones are
    ListOffsets' special values (earliest, latest), not timestamps."""
    for tp, ts in timestamps.items():
        if ts < 0:
            raise ValueError(f"timestamp for {tp} must be >= 0, got {ts}")


def topic_list(topics: Iterable[str]) -> list[str]:
    """``subscribe("t")`` means the topic ``t``, not the topics ``t`` and its letters."""
    return [topics] if isinstance(topics, str) else list(topics)


def check_topics_or_pattern(topics: list[str], pattern: str | None) -> None:
    """``subscribe()`` takes topics or a pattern: exactly one of them."""
    if topics and pattern is not None:
        raise ConfigurationError("subscribe() takes topics or pattern, not both")
    if not topics and pattern is None:
        raise ConfigurationError("subscribe() needs topics or a pattern")


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The subscription regex, compiled; an invalid one is a ``ConfigurationError``
    naming it, raised by ``subscribe()`` rather than at the next metadata update."""
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigurationError(f"invalid subscription pattern {pattern!r}: {exc}") from exc
