"""RecordDeserializationError is also the deserializer's own exception (issue 31).

aiokafka lets a deserializer's exception out of ``getmany()`` unchanged, so aiokafka
code catches ``json.JSONDecodeError`` or ``ValueError`` around its reads.  aiogroup
raises RecordDeserializationError (Java's KIP-334 rule: the good records first, the
position kept on the bad one); it must still be caught by those clauses.
"""

from __future__ import annotations

import json
import pickle
import struct

import pytest
from aiokafka.errors import KafkaError

from aiogroup.errors import RecordDeserializationError
from aiogroup.structs import TopicPartition

TP = TopicPartition("orders", 3)


def raised(fn: object) -> BaseException:
    try:
        fn()  # type: ignore[operator]
    except Exception as exc:
        return exc
    raise AssertionError("did not raise")


def test_a_json_error_is_caught_by_json_value_and_kafka_clauses() -> None:
    cause = raised(lambda: json.loads("{oops"))
    err = RecordDeserializationError(TP, 7, "value", cause)
    for clause in (json.JSONDecodeError, ValueError, RecordDeserializationError, KafkaError):
        assert isinstance(err, clause), clause
    # The cause's attributes, for handlers that read them.
    assert isinstance(cause, json.JSONDecodeError)
    assert (err.msg, err.pos, err.lineno) == (cause.msg, cause.pos, cause.lineno)
    assert (err.tp, err.offset, err.origin, err.__cause__) == (TP, 7, "value", cause)
    assert str(err).startswith("RecordDeserializationError: the value deserializer rejected")
    assert "orders-3" in str(err) and "seek(orders-3, 8)" in str(err)
    with pytest.raises(ValueError, match="offset 7"):
        raise err


def test_c_level_causes_keep_their_fields_and_the_message() -> None:
    cause = raised(lambda: b"\xff".decode())
    err = RecordDeserializationError(TP, 1, "key", cause)
    assert isinstance(err, UnicodeDecodeError)
    assert (err.start, err.reason) == (0, "invalid start byte")
    assert "the key deserializer rejected" in str(err)
    err = RecordDeserializationError(TP, 1, "key", raised(lambda: struct.unpack(">i", b"1")))
    assert isinstance(err, struct.error)
    err = RecordDeserializationError(TP, 1, "key", FileNotFoundError(2, "gone"))
    assert isinstance(err, FileNotFoundError) and "the key deserializer" in str(err)


def test_one_class_per_cause_class_and_pickles() -> None:
    a = RecordDeserializationError(TP, 1, "value", ValueError("a"))
    b = RecordDeserializationError(TP, 2, "value", ValueError("b"))
    assert type(a) is type(b) and type(a).cause_type is ValueError
    back = pickle.loads(pickle.dumps(a))
    assert type(back) is type(a) and (back.tp, back.offset) == (TP, 1)


def test_causes_that_add_nothing_or_cannot_be_combined_give_the_plain_class() -> None:
    class Fatal(BaseException):
        pass

    assert type(RecordDeserializationError(TP, 1, "value", Fatal())) is RecordDeserializationError
    err = RecordDeserializationError(TP, 1, "value", KafkaError("already one"))
    assert type(err) is RecordDeserializationError
    assert type(RecordDeserializationError(TP, 1, "value", Exception("x"))) is (
        RecordDeserializationError
    )
