"""Bad input to GroupConsumer raises at once, naming the problem, with no broker needed."""

from __future__ import annotations

import pytest

from aiogroup import (
    ConfigurationError,
    ConsumerStoppedError,
    GroupConsumer,
    IllegalStateError,
    InvalidTopicNameError,
    TopicPartition,
)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "fragment"),
    [
        (("bad topic",), {"group_id": "g"}, InvalidTopicNameError, "may contain only"),
        (("t",), {"group_id": "g", "pattern": "t.*"}, ConfigurationError, "not both"),
        (("t",), {}, ConfigurationError, "needs group_id"),
        ((), {"partition_assignment_strategy": ("fastest",)}, ConfigurationError, "fastest"),
        (
            (),
            {"heartbeat_interval_ms": 5000, "session_timeout_ms": 5000},
            ConfigurationError,
            "heartbeat_interval_ms",
        ),
        ((), {"fetch_max_bytes": -1}, ConfigurationError, "fetch_max_bytes"),
        ((), {"no_such_option": 1}, ConfigurationError, "no_such_option"),
        ((), {"sesion_timeout_ms": 1}, ConfigurationError, "did you mean 'session_timeout_ms'"),
        ((), {"session_timeout_ms": "10000"}, ConfigurationError, "session_timeout_ms.*'10000'"),
        ((), {"enable_auto_commit": "false"}, ConfigurationError, "enable_auto_commit.*'false'"),
        ((), {"listener": object()}, TypeError, "on_partitions_revoked"),
    ],
)
def test_constructor_rejects(
    args: tuple[str, ...], kwargs: dict[str, object], error: type[Exception], fragment: str
) -> None:
    with pytest.raises(error, match=fragment):
        GroupConsumer(*args, **kwargs)  # type: ignore[arg-type]


async def test_use_before_start_says_so() -> None:
    consumer = GroupConsumer(group_id="g")
    with pytest.raises(IllegalStateError, match="not started"):
        await consumer.getmany()
    with pytest.raises(IllegalStateError, match="not started"):
        await consumer.commit()


def test_subscribe_and_assign_before_start_are_kept_as_aiokafka_does() -> None:
    consumer = GroupConsumer(group_id="g")
    consumer.subscribe(["t"])
    assert consumer.subscription() == frozenset({"t"})
    with pytest.raises(IllegalStateError, match="assign\\(\\) after subscribe"):
        consumer.assign([TopicPartition("t", 0)])
    consumer.unsubscribe()
    assert consumer.subscription() == frozenset()
    consumer.assign([TopicPartition("t", 0)])
    with pytest.raises(IllegalStateError, match="subscribe\\(\\) after assign"):
        consumer.subscribe(["t"])
    with pytest.raises(InvalidTopicNameError):
        GroupConsumer(group_id="g").subscribe(["bad topic"])
    with pytest.raises(ConfigurationError, match="needs group_id"):
        GroupConsumer().subscribe(["t"])


async def test_stop_before_start_then_use_raises_stopped() -> None:
    consumer = GroupConsumer(group_id="g")
    await consumer.stop()
    await consumer.stop()  # idempotent
    with pytest.raises(ConsumerStoppedError):
        await consumer.getone()
    with pytest.raises(ConsumerStoppedError):
        await consumer.start()


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("security_protocol", "TLS"),
        ("sasl_mechanism", "SCRAM"),
        ("sasl_plain_username", 7),
    ],
)
def test_security_options_are_checked_in_the_constructor(option: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=option):
        GroupConsumer(**{option: value})  # type: ignore[arg-type]


def test_security_options_reach_the_client_config() -> None:
    consumer = GroupConsumer(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512")
    assert consumer.config.client_options == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
    }
