"""group_protocol="consumer" options: the classic-only ones are refused by name (as Java does)."""

from __future__ import annotations

import pytest

from aiogroup import GroupConsumer
from aiogroup._coordination.consumer_protocol_routine import ConsumerGroupCoordinator
from aiogroup.config import ConsumerConfig
from aiogroup.errors import ConfigurationError


@pytest.mark.parametrize(
    "option",
    [
        {"partition_assignment_strategy": ("cooperative-sticky",)},
        {"session_timeout_ms": 6_000},
        {"heartbeat_interval_ms": 1_000},
    ],
)
def test_classic_only_options_are_refused_with_the_consumer_protocol(
    option: dict[str, object],
) -> None:
    (name,) = option
    with pytest.raises(
        ConfigurationError, match=f"{name} cannot be used with group_protocol='consumer'"
    ):
        GroupConsumer("t", group_id="g", group_protocol="consumer", **option)
    # The same option is fine with the classic protocol.
    GroupConsumer("t", group_id="g", **option)


def test_remote_assignor_values() -> None:
    # Any name is passed through (the broker judges it, as with Java's client): a broker
    # may be configured with assignors of its own beyond the two Kafka ships.
    for name in ("uniform", "range", "my.custom"):
        cfg = ConsumerConfig(group_id="g", group_protocol="consumer", group_remote_assignor=name)
        assert cfg.group_remote_assignor == name
    for empty in ("", "  "):
        with pytest.raises(ConfigurationError, match="must name a server-side assignor"):
            ConsumerConfig(group_id="g", group_protocol="consumer", group_remote_assignor=empty)
    with pytest.raises(
        ConfigurationError, match="group_remote_assignor needs group_protocol='consumer'"
    ):
        ConsumerConfig(group_id="g", group_remote_assignor="uniform")


def test_group_protocol_values() -> None:
    assert ConsumerConfig().group_protocol == "classic"
    with pytest.raises(ConfigurationError, match="'classic' or 'consumer', got 'CONSUMER'"):
        ConsumerConfig(group_protocol="CONSUMER")


def test_consumer_protocol_coordinator_needs_a_group() -> None:
    with pytest.raises(ConfigurationError, match="group_id"):
        ConsumerGroupCoordinator(None, None, ConsumerConfig())  # type: ignore[arg-type]


def test_classic_options_left_at_their_defaults_are_accepted() -> None:
    """The constructor's keyword defaults cannot be told from "not given"; they pass."""
    consumer = GroupConsumer(
        "t", group_id="g", group_protocol="consumer", session_timeout_ms=10_000
    )
    assert consumer.config.group_protocol == "consumer"
