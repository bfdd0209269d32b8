"""Consumer configuration: aiokafka's option names, checked once, at construction.

Validation lives here so that a bad option fails in ``GroupConsumer(...)`` with a
message naming it, not seconds later inside a background task.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiogroup.errors import ConfigurationError, InvalidTopicNameError
from aiogroup.structs import OffsetResetStrategy

__all__ = ["REMOTE_ASSIGNORS", "ConsumerConfig", "validate_topic_name"]

#: The consumer protocol's server-side assignors (Kafka 4's group.consumer.assignors).
REMOTE_ASSIGNORS = ("uniform", "range")

_TOPIC_CHARS = re.compile(r"^[a-zA-Z0-9._-]+$")
_MAX_TOPIC_LENGTH = 249


def validate_topic_name(topic: object) -> str:
    """Apply Kafka's topic-name rules; raise InvalidTopicNameError naming the broken one."""
    if not isinstance(topic, str):
        raise InvalidTopicNameError(f"topic name must be a str, got {type(topic).__name__}")
    if not topic:
        raise InvalidTopicNameError("topic name is empty")
    if topic in (".", ".."):
        raise InvalidTopicNameError(f"topic name cannot be {topic!r}")
    if len(topic) > _MAX_TOPIC_LENGTH:
        raise InvalidTopicNameError(
            f"topic name {topic[:20]!r}... is {len(topic)} characters; the limit is "
            f"{_MAX_TOPIC_LENGTH}"
        )
    if not _TOPIC_CHARS.match(topic):
        raise InvalidTopicNameError(
            f"topic name {topic!r} may contain only ASCII letters, digits, '.', '_' and '-'"
        )
    return topic


def validate_topics(topics: Iterable[str]) -> frozenset[str]:
    if isinstance(topics, str):
        topics = [topics]
    result = frozenset(validate_topic_name(t) for t in topics)
    if not result:
        raise ConfigurationError("subscribe() needs at least one topic (or a pattern)")
    return result


_NON_NEGATIVE = (
    "fetch_max_wait_ms",
    "fetch_min_bytes",
    "fetch_max_bytes",
    "max_partition_fetch_bytes",
    "request_timeout_ms",
    "retry_backoff_ms",
    "auto_commit_interval_ms",
    "metadata_max_age_ms",
    "max_buffered_bytes",
)
_POSITIVE = (
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "max_poll_interval_ms",
    "fetch_max_bytes",
    "max_partition_fetch_bytes",
    "request_timeout_ms",
)


@dataclass
class ConsumerConfig:
    """Every option of ``GroupConsumer``; names and defaults follow aiokafka."""

    bootstrap_servers: str | list[str] = "localhost:9092"
    client_id: str = "aiogroup"
    group_id: str | None = None
    group_instance_id: str | None = None
    session_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    rebalance_timeout_ms: int | None = None
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    partition_assignment_strategy: tuple[Any, ...] = ("range",)
    isolation_level: str = "read_uncommitted"
    client_rack: str | None = None
    fetch_max_wait_ms: int = 500
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    max_partition_fetch_bytes: int = 1_048_576
    #: Upper bound on decoded-but-undelivered bytes the fetcher keeps (read-ahead).
    max_buffered_bytes: int = 64 * 1_048_576
    max_poll_records: int | None = None
    check_crcs: bool = True
    request_timeout_ms: int = 40_000
    retry_backoff_ms: int = 100
    metadata_max_age_ms: int = 300_000
    exclude_internal_topics: bool = True
    connections_max_idle_ms: int = 540_000
    key_deserializer: Any = None
    value_deserializer: Any = None
    #: "classic" (JoinGroup/SyncGroup) or "consumer" (KIP-848, Apache Kafka 4+).
    group_protocol: str = "classic"
    #: group_protocol="consumer" only: the broker's assignor (None: the broker's default).
    group_remote_assignor: str | None = None
    #: Passed through to aiokafka's client: security_protocol, ssl_context, sasl_*.
    client_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in _NON_NEGATIVE:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigurationError(f"{name} must be a non-negative int, got {value!r}")
        for name in _POSITIVE:
            if getattr(self, name) <= 0:
                raise ConfigurationError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigurationError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be lower than "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        if self.rebalance_timeout_ms is not None and self.rebalance_timeout_ms <= 0:
            raise ConfigurationError(
                f"rebalance_timeout_ms must be > 0, got {self.rebalance_timeout_ms!r}"
            )
        if self.max_poll_records is not None and self.max_poll_records <= 0:
            raise ConfigurationError(
                f"max_poll_records must be > 0 or None, got {self.max_poll_records!r}"
            )
        try:
            OffsetResetStrategy(str(self.auto_offset_reset).lower())
        except ValueError:
            raise ConfigurationError(
                f"auto_offset_reset must be 'earliest', 'latest' or 'none', got "
                f"{self.auto_offset_reset!r}"
            ) from None
        if self.isolation_level not in ("read_uncommitted", "read_committed"):
            raise ConfigurationError(
                f"isolation_level must be 'read_uncommitted' or 'read_committed', got "
                f"{self.isolation_level!r}"
            )
        if self.group_instance_id is not None and self.group_id is None:
            raise ConfigurationError("group_instance_id needs a group_id (static membership)")
        if self.group_instance_id is not None and not self.group_instance_id:
            raise ConfigurationError("group_instance_id must be a non-empty string or None")
        if isinstance(self.partition_assignment_strategy, (str, bytes)) or not isinstance(
            self.partition_assignment_strategy, Iterable
        ):
            self.partition_assignment_strategy = (self.partition_assignment_strategy,)
        self.partition_assignment_strategy = tuple(self.partition_assignment_strategy)
        if not self.partition_assignment_strategy:
            raise ConfigurationError(
                "partition_assignment_strategy must name at least one assignor"
            )
        self._check_group_protocol()
        if self.max_buffered_bytes and self.max_buffered_bytes < self.max_partition_fetch_bytes:
            raise ConfigurationError(
                f"max_buffered_bytes ({self.max_buffered_bytes}) must be at least "
                f"max_partition_fetch_bytes ({self.max_partition_fetch_bytes})"
            )

    def _check_group_protocol(self) -> None:
        if self.group_protocol not in ("classic", "consumer"):
            raise ConfigurationError(
                f"group_protocol must be 'classic' or 'consumer', got {self.group_protocol!r}"
            )
        if self.group_remote_assignor is None:
            return
        if self.group_protocol != "consumer":
            raise ConfigurationError(
                "group_remote_assignor needs group_protocol='consumer' (the classic protocol "
                "assigns in the client: partition_assignment_strategy)"
            )
        if self.group_remote_assignor not in REMOTE_ASSIGNORS:
            raise ConfigurationError(
                f"group_remote_assignor must be one of {', '.join(REMOTE_ASSIGNORS)}, got "
                f"{self.group_remote_assignor!r}"
            )

    @property
    def reset_strategy(self) -> OffsetResetStrategy:
        return OffsetResetStrategy(str(self.auto_offset_reset).lower())

    @property
    def effective_rebalance_timeout_ms(self) -> int:
        """Java's default: the rebalance timeout is max.poll.interval.ms."""
        if self.rebalance_timeout_ms is not None:
            return self.rebalance_timeout_ms
        return self.max_poll_interval_ms

    @property
    def read_committed(self) -> bool:
        return self.isolation_level == "read_committed"
