"""Option parsing of format("aiogroup"): Spark-Kafka names, failures name the option."""

from __future__ import annotations

import pickle

import pyarrow  # noqa: F401  (the spark extra: a missing install fails here)
import pytest

from aiogroup.errors import ConfigurationError
from aiogroup.spark.options import parse_options
from aiogroup.structs import TopicPartition

BASE = {"kafka.bootstrap.servers": "localhost:9092", "kafka.group.id": "g"}


def opts(**extra: str) -> dict[str, str]:
    return {**BASE, **{k.replace("__", "."): v for k, v in extra.items()}}


def test_subscribe_list_and_defaults() -> None:
    parsed = parse_options(opts(subscribe="a, b,a"))
    assert parsed.topics == ("a", "b")
    assert parsed.pattern is None
    assert parsed.starting_offsets == "latest"
    assert parsed.max_offsets_per_trigger is None
    assert parsed.group_id == "g"
    kwargs = parsed.group_consumer_kwargs()
    assert kwargs["enable_auto_commit"] is False
    assert kwargs["group_id"] == "g"
    assert kwargs["partition_assignment_strategy"] == ("cooperative-sticky",)
    reader = parsed.reader_consumer_kwargs()
    assert reader["group_id"] is None


def test_option_names_are_case_insensitive() -> None:
    parsed = parse_options({**BASE, "SUBSCRIBEPATTERN": "t-.*", "StartingOffsets": "EARLIEST"})
    assert parsed.pattern == "t-.*"
    assert parsed.starting_offsets == "earliest"


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({}, "subscribe"),
        ({"subscribe": "a", "subscribePattern": "b.*"}, "subscribePattern"),
        ({"subscribe": "a", "startingOffsets": "beginning"}, "startingOffsets"),
        ({"subscribe": "a", "startingOffsets": "{bad json"}, "startingOffsets"),
        ({"subscribe": "a", "startingOffsets": '{"b": {"0": 1}}'}, "startingOffsets"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"subscribe": "a", "maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger"),
        ({"subscribe": "a", "assign": '{"a": [0]}'}, "assign"),
        ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "kafka.auto.offset.reset"),
        ({"subscribe": "a", "kafka.no.such.thing": "1"}, "kafka.no.such.thing"),
        ({"subscribe": "a", "kafka.session.timeout.ms": "abc"}, "kafka.session.timeout.ms"),
        ({"subscribe": "a", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"subscribe": "a", "subscrbe": "x"}, "subscrbe"),
        ({"subscribePattern": "("}, "subscribePattern"),
        ({"subscribe": "bad topic!"}, "bad topic!"),
    ],
)
def test_bad_options_fail_naming_the_option(extra: dict[str, str], named: str) -> None:
    with pytest.raises((ConfigurationError, ValueError)) as info:
        parse_options({**BASE, **extra})
    assert named.lower() in str(info.value).lower()


@pytest.mark.parametrize("missing", ["kafka.bootstrap.servers", "kafka.group.id"])
def test_required_connection_options(missing: str) -> None:
    options = {**BASE, "subscribe": "a"}
    del options[missing]
    with pytest.raises(ConfigurationError, match=missing.replace(".", r"\.")):
        parse_options(options)


def test_starting_offsets_json() -> None:
    parsed = parse_options(opts(subscribe="a", startingOffsets='{"a": {"0": 23, "1": -2}}'))
    assert parsed.starting_offsets == {TopicPartition("a", 0): 23, TopicPartition("a", 1): -2}


def test_kafka_options_become_consumer_arguments() -> None:
    parsed = parse_options(
        opts(
            subscribe="a",
            kafka__session__timeout__ms="6000",
            kafka__heartbeat__interval__ms="1000",
            kafka__isolation__level="read_committed",
            kafka__partition__assignment__strategy="range, roundrobin",
        )
    )
    kwargs = parsed.group_consumer_kwargs()
    assert kwargs["session_timeout_ms"] == 6000
    assert kwargs["heartbeat_interval_ms"] == 1000
    assert kwargs["partition_assignment_strategy"] == ("range", "roundrobin")
    assert parsed.read_committed
    # Group-only settings stay out of the executors' group-less consumers.
    assert "session_timeout_ms" not in parsed.reader_consumer_kwargs()
    assert parsed.reader_consumer_kwargs()["isolation_level"] == "read_committed"


def test_heartbeat_not_below_session_fails_at_parse_time() -> None:
    with pytest.raises(ConfigurationError, match="heartbeat_interval_ms"):
        parse_options(
            opts(
                subscribe="a",
                kafka__session__timeout__ms="1000",
                kafka__heartbeat__interval__ms="2000",
            )
        )


def test_limit_aliases_must_agree() -> None:
    assert parse_options(opts(subscribe="a", maxRecordsPerBatch="7")).max_offsets_per_trigger == 7
    with pytest.raises(ConfigurationError, match="disagree"):
        parse_options(opts(subscribe="a", maxRecordsPerBatch="7", maxOffsetsPerTrigger="8"))


def test_fail_on_data_loss_picks_the_executor_reset_policy() -> None:
    strict = parse_options(opts(subscribe="a"))
    lenient = parse_options(opts(subscribe="a", failOnDataLoss="false"))
    assert strict.reader_consumer_kwargs()["auto_offset_reset"] == "none"
    assert lenient.reader_consumer_kwargs()["auto_offset_reset"] == "earliest"


def test_options_survive_pickling() -> None:
    parsed = parse_options(opts(subscribe="a", startingOffsets='{"a": {"0": 5}}'))
    assert pickle.loads(pickle.dumps(parsed)) == parsed
