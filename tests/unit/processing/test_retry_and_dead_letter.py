"""The retry policy as data; the dead-letter headers."""

from __future__ import annotations

import pytest
from aiokafka.structs import ConsumerRecord

from aiogroup.processing.dead_letter import HEADER_PREFIX, DeadLetter, as_bytes, dead_letter_headers
from aiogroup.processing.retry import RetryPolicy


def test_backoff_doubles_up_to_the_cap_then_gives_up() -> None:
    policy = RetryPolicy(attempts=5, backoff_ms=100, max_backoff_ms=300)
    assert [policy.delay_after(n) for n in range(1, 6)] == [0.1, 0.2, 0.3, 0.3, None]
    assert RetryPolicy(attempts=1).delay_after(1) is None
    assert RetryPolicy(attempts=100, backoff_ms=1, max_backoff_ms=10).delay_after(99) == 0.01


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"attempts": 0}, "attempts"),
        ({"backoff_ms": -1}, "backoff_ms"),
        ({"backoff_ms": 10, "max_backoff_ms": 5}, "max_backoff_ms"),
        ({"attempts": 1.5}, "attempts"),
    ],
)
def test_bad_policies_are_named(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def test_headers_name_origin_and_failure() -> None:
    record = ConsumerRecord("orders", 3, 42, 0, 0, b"k", b"v", None, 1, 1, [("trace", b"x")])
    headers = dict(dead_letter_headers(record, ValueError("bad amount"), 3))
    assert headers["trace"] == b"x"
    assert headers[HEADER_PREFIX + "topic"] == b"orders"
    assert headers[HEADER_PREFIX + "partition"] == b"3"
    assert headers[HEADER_PREFIX + "offset"] == b"42"
    assert headers[HEADER_PREFIX + "exception"] == b"ValueError"
    assert headers[HEADER_PREFIX + "message"] == b"bad amount"
    assert headers[HEADER_PREFIX + "attempts"] == b"3"


def test_values_and_topic() -> None:
    assert as_bytes("é") == "é".encode()
    assert as_bytes(None) is None
    with pytest.raises(TypeError, match="deserialised dict"):
        as_bytes({"a": 1})
    with pytest.raises(ValueError, match="topic"):
        DeadLetter(topic="")
