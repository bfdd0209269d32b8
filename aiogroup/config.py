"""Consumer configuration: aiokafka's option names, checked once, at construction.

Validation lives here so that a bad option fails in ``GroupConsumer(...)`` with a
message naming it, not seconds later inside a background task.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiogroup._support.redaction import redact
from aiogroup.errors import ConfigurationError, InvalidTopicNameError
from aiogroup.structs import OffsetResetStrategy

__all__ = ["REMOTE_ASSIGNORS", "ConsumerConfig", "check_bootstrap_servers", "validate_topic_name"]

#: The server-side assignors Apache Kafka ships (its default group.consumer.assignors).
#: Not a whitelist: a broker may be configured with others, so the name is passed
#: through as the Java client does and the broker judges it (UNSUPPORTED_ASSIGNOR).
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


# -- the option table -------------------------------------------------------------------
#
# One row per option that needs a type or range check beyond its dataclass field.
# Kept as plain tuples of names so another option is a one-line addition.

#: ints >= 0
_NON_NEGATIVE_INTS = (
    "fetch_max_wait_ms",
    "fetch_min_bytes",
    "retry_backoff_ms",
    "auto_commit_interval_ms",
    "metadata_max_age_ms",
    "max_buffered_bytes",
    "connections_max_idle_ms",
    "consumer_timeout_ms",
)
#: ints > 0
_POSITIVE_INTS = (
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "max_poll_interval_ms",
    "fetch_max_bytes",
    "max_partition_fetch_bytes",
    "request_timeout_ms",
)
#: ints > 0 or None
_OPTIONAL_POSITIVE_INTS = ("rebalance_timeout_ms", "max_poll_records")
#: real bools (a string "false" is truthy: refusing it is the point)
_BOOLS = ("enable_auto_commit", "check_crcs", "exclude_internal_topics")
#: non-empty strings
_STRINGS = ("client_id",)
#: non-empty strings or None
_OPTIONAL_STRINGS = ("group_id", "group_instance_id", "client_rack")
#: callables or None
_OPTIONAL_CALLABLES = ("key_deserializer", "value_deserializer")
#: option -> allowed values (compared after str.lower() where noted in the message)
_CHOICES: dict[str, tuple[str, ...]] = {
    "auto_offset_reset": ("earliest", "latest", "none"),
    "isolation_level": ("read_uncommitted", "read_committed"),
}


#: aiokafka client options checked here, so a typo fails in the constructor rather
#: than in start().
_CLIENT_CHOICES: dict[str, tuple[str, ...]] = {
    "security_protocol": ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    "sasl_mechanism": ("PLAIN", "GSSAPI", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
}


def _bad(name: str, value: object, wanted: str) -> ConfigurationError:
    return ConfigurationError(
        f"{name} must be {wanted}, got {redact(name, value)} ({type(value).__name__})"
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_bootstrap_servers(value: object) -> None:
    """A "host:port[,host:port]" string or a non-empty list of such strings."""
    name = "bootstrap_servers"
    if isinstance(value, str):
        hosts = [h.strip() for h in value.split(",")]
    elif isinstance(value, (list, tuple)) and value:
        if not all(isinstance(h, str) for h in value):
            raise _bad(name, value, "a 'host:port' string or a list of them")
        hosts = [h.strip() for h in value]
    else:
        raise _bad(name, value, "a 'host:port' string or a non-empty list of them")
    for host in hosts:
        if not host:
            raise ConfigurationError(f"bootstrap_servers has an empty entry: {value!r}")
        port = host.rsplit(":", 1)[1] if ":" in host else "9092"
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigurationError(f"bootstrap_servers entry {host!r} has an invalid port")


@dataclass(repr=False)
class ConsumerConfig:
    """Every option of ``GroupConsumer``; names and defaults follow aiokafka.

    ``GroupConsumer.__init__`` lists the same options as typed keyword parameters;
    this dataclass is where they are checked, once, at construction.
    """

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
    #: aiogroup.assignors.DEFAULT_ASSIGNORS (range first, roundrobin for aiokafka peers).
    partition_assignment_strategy: tuple[Any, ...] = ("range", "roundrobin")
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
    #: Accepted for aiokafka compatibility; a no-op (the fetcher is event-driven:
    #: it never polls on a timer, so there is no wait to bound).
    consumer_timeout_ms: int = 200
    #: Accepted for aiokafka compatibility; a no-op (versions are negotiated with
    #: ApiVersions, as in aiokafka >= 0.13, which deprecated the option).
    api_version: str | None = None
    key_deserializer: Any = None
    value_deserializer: Any = None
    #: "classic" (JoinGroup/SyncGroup) or "consumer" (KIP-848, Apache Kafka 4+).
    group_protocol: str = "classic"
    #: group_protocol="consumer" only: the broker's assignor (None: the broker's default).
    group_remote_assignor: str | None = None
    #: Passed through to aiokafka's client: security_protocol, ssl_context, sasl_*.
    client_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._check_types()
        self._check_combinations()

    def __repr__(self) -> str:
        """Every option, with secrets (:data:`SECRET_OPTIONS`) redacted."""
        parts = []
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if name == "client_options":
                inner = ", ".join(f"{k!r}: {redact(k, v)}" for k, v in value.items())
                parts.append(f"client_options={{{inner}}}")
            else:
                parts.append(f"{name}={redact(name, value)}")
        return f"ConsumerConfig({', '.join(parts)})"

    def _check_types(self) -> None:
        check_bootstrap_servers(self.bootstrap_servers)
        for name in _NON_NEGATIVE_INTS:
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise _bad(name, value, "an int >= 0")
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if not _is_int(value) or value <= 0:
                raise _bad(name, value, "an int > 0")
        for name in _OPTIONAL_POSITIVE_INTS:
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value <= 0):
                raise _bad(name, value, "an int > 0 or None")
        for name in _BOOLS:
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise _bad(name, value, "True or False")
        for name in _STRINGS:
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise _bad(name, value, "a non-empty str")
        for name in _OPTIONAL_STRINGS:
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise _bad(name, value, "a non-empty str or None")
        for name in _OPTIONAL_CALLABLES:
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise _bad(name, value, "a callable (bytes -> value) or None")
        for name, choices in _CHOICES.items():
            value = getattr(self, name)
            if not isinstance(value, str) or value.lower() not in choices:
                raise _bad(name, value, " or ".join(repr(c) for c in choices))
        if self.api_version is not None and not isinstance(self.api_version, str):
            raise _bad("api_version", self.api_version, "'auto', a version string or None")
        if not isinstance(self.client_options, dict):
            raise _bad("client_options", self.client_options, "a dict")
        for name, choices in _CLIENT_CHOICES.items():
            if name in self.client_options and self.client_options[name] not in choices:
                raise _bad(name, self.client_options[name], " or ".join(map(repr, choices)))
        for name in ("sasl_plain_username", "sasl_plain_password", "sasl_kerberos_domain_name"):
            value = self.client_options.get(name)
            if value is not None and not isinstance(value, str):
                raise _bad(name, value, "a str or None")

    def _check_combinations(self) -> None:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ConfigurationError(
                f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be lower than "
                f"session_timeout_ms ({self.session_timeout_ms})"
            )
        if self.group_instance_id is not None and self.group_id is None:
            raise ConfigurationError("group_instance_id needs a group_id (static membership)")
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
        if self.group_remote_assignor is not None and not isinstance(
            self.group_remote_assignor, str
        ):
            raise _bad("group_remote_assignor", self.group_remote_assignor, "a str or None")
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
        if not self.group_remote_assignor.strip():
            raise ConfigurationError(
                "group_remote_assignor must name a server-side assignor (Apache Kafka ships "
                f"{', '.join(REMOTE_ASSIGNORS)}), got {self.group_remote_assignor!r}"
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
