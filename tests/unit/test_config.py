"""Bad configuration fails at construction with a message naming the option."""

from __future__ import annotations

import pytest

from aiogroup.config import ConsumerConfig, validate_topic_name, validate_topics
from aiogroup.errors import ConfigurationError, InvalidTopicNameError
from aiogroup.structs import OffsetResetStrategy


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("", "empty"),
        (".", "cannot be"),
        ("..", "cannot be"),
        ("a" * 250, "limit is 249"),
        ("has space", "may contain only"),
        ("slash/topic", "may contain only"),
        ("ünïcode", "may contain only"),
        (42, "must be a str"),
    ],
)
def test_invalid_topic_names(name: object, fragment: str) -> None:
    with pytest.raises(InvalidTopicNameError, match=fragment):
        validate_topic_name(name)


@pytest.mark.parametrize("name", ["a", "A-b_c.d", "x" * 249, "__consumer_offsets", "0"])
def test_valid_topic_names(name: str) -> None:
    assert validate_topic_name(name) == name


def test_validate_topics_accepts_a_single_string_and_rejects_none() -> None:
    assert validate_topics("orders") == frozenset({"orders"})
    with pytest.raises(ConfigurationError, match="at least one topic"):
        validate_topics([])


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"heartbeat_interval_ms": 10_000, "session_timeout_ms": 10_000}, "must be lower than"),
        ({"heartbeat_interval_ms": 20_000, "session_timeout_ms": 10_000}, "must be lower than"),
        ({"fetch_max_bytes": -1}, "fetch_max_bytes"),
        ({"max_partition_fetch_bytes": -5}, "max_partition_fetch_bytes"),
        ({"fetch_min_bytes": -1}, "fetch_min_bytes"),
        ({"session_timeout_ms": 0}, "session_timeout_ms"),
        ({"auto_offset_reset": "middle"}, "auto_offset_reset"),
        ({"isolation_level": "serializable"}, "isolation_level"),
        ({"group_instance_id": "static-1"}, "needs a group_id"),
        ({"group_id": "g", "group_instance_id": ""}, "non-empty"),
        ({"partition_assignment_strategy": ()}, "at least one assignor"),
        ({"max_poll_records": 0}, "max_poll_records"),
        ({"rebalance_timeout_ms": 0}, "rebalance_timeout_ms"),
        ({"max_buffered_bytes": 10, "max_partition_fetch_bytes": 100}, "max_buffered_bytes"),
        ({"request_timeout_ms": True}, "request_timeout_ms"),
    ],
)
def test_bad_options_name_the_problem(options: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigurationError, match=fragment):
        ConsumerConfig(**options)  # type: ignore[arg-type]


def test_defaults_follow_the_java_client() -> None:
    cfg = ConsumerConfig(group_id="g", max_poll_interval_ms=1234)
    assert cfg.effective_rebalance_timeout_ms == 1234
    assert cfg.reset_strategy is OffsetResetStrategy.LATEST
    assert ConsumerConfig(auto_offset_reset="EARLIEST").reset_strategy is (
        OffsetResetStrategy.EARLIEST
    )
    assert ConsumerConfig(partition_assignment_strategy="range").partition_assignment_strategy == (
        "range",
    )
