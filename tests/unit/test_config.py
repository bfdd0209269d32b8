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


#: A value of the wrong type for each option, chosen so that Python would not
#: notice it by itself (a str where an int is due, a truthy str for a bool).
WRONG_TYPE: dict[str, object] = {
    "group_protocol": 7,
    "group_remote_assignor": 7,
    "bootstrap_servers": 9092,
    "client_id": 7,
    "group_id": 7,
    "group_instance_id": 7,
    "session_timeout_ms": "10000",
    "heartbeat_interval_ms": 3000.0,
    "max_poll_interval_ms": "300000",
    "rebalance_timeout_ms": "1",
    "auto_offset_reset": 1,
    "enable_auto_commit": "false",
    "auto_commit_interval_ms": "5000",
    "partition_assignment_strategy": (),
    "isolation_level": None,
    "client_rack": 3,
    "fetch_max_wait_ms": "500",
    "fetch_min_bytes": 1.5,
    "fetch_max_bytes": "1",
    "max_partition_fetch_bytes": None,
    "max_buffered_bytes": "0",
    "max_poll_records": "10",
    "check_crcs": "no",
    "request_timeout_ms": "40000",
    "retry_backoff_ms": -1,
    "metadata_max_age_ms": "1",
    "exclude_internal_topics": 0,
    "connections_max_idle_ms": "1",
    "consumer_timeout_ms": "200",
    "api_version": (0, 10),
    "key_deserializer": "json",
    "value_deserializer": b"x",
    "client_options": ["ssl"],
}


def test_every_option_has_a_wrong_type_case() -> None:
    assert set(WRONG_TYPE) == set(ConsumerConfig.__dataclass_fields__)


@pytest.mark.parametrize(("name", "value"), sorted(WRONG_TYPE.items()))
def test_every_option_checks_its_type(name: str, value: object) -> None:
    options: dict[str, object] = {name: value}
    if name == "group_instance_id":
        options["group_id"] = "g"
    with pytest.raises(ConfigurationError, match=name) as caught:
        ConsumerConfig(**options)  # type: ignore[arg-type]
    if name not in ("partition_assignment_strategy",):
        assert repr(value) in str(caught.value), "the message shows the bad value"


@pytest.mark.parametrize(
    "servers", ["", "host:notaport", "host:70000", [], ["a:9092", ""], "a:9092,,b:9092"]
)
def test_bad_bootstrap_servers(servers: object) -> None:
    with pytest.raises(ConfigurationError, match="bootstrap_servers"):
        ConsumerConfig(bootstrap_servers=servers)  # type: ignore[arg-type]


@pytest.mark.parametrize("servers", ["localhost", "a:9092,b:9093", ["a:1", "b"], "[::1]:9092"])
def test_good_bootstrap_servers(servers: str | list[str]) -> None:
    assert ConsumerConfig(bootstrap_servers=servers).bootstrap_servers == servers


def test_group_consumer_takes_every_option_as_a_typed_keyword() -> None:
    """IDE completion and mypy on user code need explicit, annotated parameters."""
    import inspect

    from aiogroup import GroupConsumer

    params = inspect.signature(GroupConsumer.__init__).parameters
    for name in set(ConsumerConfig.__dataclass_fields__) - {"client_options"}:
        assert name in params, name
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY, name
        assert params[name].annotation is not inspect.Parameter.empty, name
        field_default = ConsumerConfig.__dataclass_fields__[name].default
        assert params[name].default == field_default, name
