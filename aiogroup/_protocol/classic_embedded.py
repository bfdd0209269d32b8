"""The bytes a consumer group member puts in JoinGroup and reads from SyncGroup.

The broker treats subscription and assignment metadata as opaque; only members parse
it, so a leader running another client (Java, librdkafka, kafka-python) may send any
version.  Kafka's rule for this protocol is that a reader accepts every version: it
reads the fields it knows and ignores whatever a newer writer appended.  That is why
decoding is driven by the schema of the highest version we know rather than the
version in the header, and why trailing bytes are not an error.

The schemas are aiokafka protocol types.  Decoding walks those same schemas field by
field instead of calling ``Struct.decode`` so that bytes from a misbehaving peer fail
with a message naming the field and byte offset, and so that lengths aiokafka would
quietly accept (an array of -5 elements, a null topic name) are rejected.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from aiokafka.protocol.struct import Struct
from aiokafka.protocol.types import Array, Bytes, Int16, Int32, Schema, String

from aiogroup.errors import MalformedProtocolDataError
from aiogroup.structs import TopicPartition

__all__ = [
    "LATEST_ASSIGNMENT_VERSION",
    "LATEST_SUBSCRIPTION_VERSION",
    "ConsumerAssignment",
    "ConsumerSubscription",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

LATEST_SUBSCRIPTION_VERSION = 3
LATEST_ASSIGNMENT_VERSION = 3

_INT16_MAX = 2**15 - 1
_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ConsumerSubscription:
    """What a member asks for when it joins (Kafka's ConsumerProtocolSubscription).

    ``owned_partitions`` and ``generation_id`` let the leader's assignor keep partitions
    where they are (sticky/cooperative); ``version`` is the version the bytes were
    decoded from, or the default version to encode at.
    """

    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    version: int = LATEST_SUBSCRIPTION_VERSION


@dataclass(frozen=True, slots=True)
class ConsumerAssignment:
    """What the leader gave a member (Kafka's ConsumerProtocolAssignment)."""

    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None
    version: int = LATEST_ASSIGNMENT_VERSION


_TOPIC_PARTITIONS = Array(("topic", String("utf-8")), ("partitions", Array(Int32)))


_VERSION = ("version", Int16)
_TOPICS = ("topics", Array(String("utf-8")))
_USER_DATA = ("user_data", Bytes)
_OWNED = ("owned_partitions", _TOPIC_PARTITIONS)
_GENERATION = ("generation_id", Int32)
_RACK = ("rack_id", String("utf-8"))

# aiokafka is untyped, so mypy sees Struct as Any.


class _SubscriptionV0(Struct):  # type: ignore[misc]
    SCHEMA = Schema(_VERSION, _TOPICS, _USER_DATA)


class _SubscriptionV1(Struct):  # type: ignore[misc]
    SCHEMA = Schema(_VERSION, _TOPICS, _USER_DATA, _OWNED)


class _SubscriptionV2(Struct):  # type: ignore[misc]
    SCHEMA = Schema(_VERSION, _TOPICS, _USER_DATA, _OWNED, _GENERATION)


class _SubscriptionV3(Struct):  # type: ignore[misc]
    SCHEMA = Schema(_VERSION, _TOPICS, _USER_DATA, _OWNED, _GENERATION, _RACK)


class _Assignment(Struct):  # type: ignore[misc]
    """Versions 0 to 3 share this layout."""

    SCHEMA = Schema(_VERSION, ("assigned_partitions", _TOPIC_PARTITIONS), _USER_DATA)


_SUBSCRIPTION_STRUCTS: tuple[type[Struct], ...] = (
    _SubscriptionV0,
    _SubscriptionV1,
    _SubscriptionV2,
    _SubscriptionV3,
)

# Only these may carry the wire's null (length -1); every other string or array must not.
_NULLABLE_FIELDS = frozenset({"user_data", "rack_id"})


def _min_size(typ: Any) -> int:
    """The fewest bytes one value of ``typ`` can take on the wire."""
    if isinstance(typ, Schema):
        return sum(_min_size(field) for field in typ.fields)
    if isinstance(typ, String) or typ is Int16:
        return 2
    return 4  # Int32, Bytes and Array all start with an int32


class _Reader:
    """Decodes one schema from a buffer, reporting failures by field path and offset."""

    def __init__(self, data: bytes, what: str) -> None:
        self._buf = BytesIO(data)
        self._total = len(data)
        self._what = what

    def _fail(self, pos: int, problem: str, path: str) -> MalformedProtocolDataError:
        return MalformedProtocolDataError(
            f"{self._what} bytes ({self._total} long) invalid at byte {pos} "
            f"while reading {path}: {problem}"
        )

    def _truncated(self, pos: int, path: str) -> MalformedProtocolDataError:
        return MalformedProtocolDataError(
            f"{self._what} bytes truncated at byte {pos} of {self._total} while reading {path}"
        )

    def _remaining(self) -> int:
        return self._total - self._buf.tell()

    def _leaf(self, typ: Any, path: str) -> Any:
        pos = self._buf.tell()
        try:
            return typ.decode(self._buf)
        except UnicodeDecodeError as exc:
            raise self._fail(pos, f"not valid UTF-8 ({exc.reason})", path) from None
        except (ValueError, struct.error):
            raise self._truncated(pos, path) from None

    def _length(self, width: type[Int16] | type[Int32], path: str, nullable: bool) -> int:
        """Peek a length prefix so bad values are reported before aiokafka reads on."""
        pos = self._buf.tell()
        length: int = self._leaf(width, path)
        self._buf.seek(pos)
        if length == -1 and nullable:
            return length
        if length < 0:
            raise self._fail(pos, f"negative length {length}", path)
        return length

    def read(self, typ: Any, path: str, nullable: bool = False) -> Any:
        if isinstance(typ, Schema):
            return tuple(
                self.read(field, f"{path}.{name}" if path else name, name in _NULLABLE_FIELDS)
                for name, field in zip(typ.names, typ.fields, strict=True)
            )
        if isinstance(typ, Array):
            pos = self._buf.tell()
            count = self._length(Int32, path, nullable=False)
            self._leaf(Int32, path)
            # Checking the count against the bytes left stops a garbage count from
            # making us build a huge list before running out of data.
            need = count * _min_size(typ.array_of)
            if need > self._remaining():
                raise MalformedProtocolDataError(
                    f"{self._what} bytes truncated: {path} at byte {pos} declares {count} "
                    f"elements needing at least {need} bytes but only {self._remaining()} "
                    f"of {self._total} remain"
                )
            return [self.read(typ.array_of, f"{path}[{i}]") for i in range(count)]
        if isinstance(typ, String):
            self._length(Int16, path, nullable)
        elif typ is Bytes:
            self._length(Int32, path, nullable)
        return self._leaf(typ, path)

    def read_fields(self, schema: Schema) -> dict[str, Any]:
        """Read every field after the version header, by name."""
        return {
            name: self.read(field, name, name in _NULLABLE_FIELDS)
            for name, field in zip(schema.names[1:], schema.fields[1:], strict=True)
        }

    def read_version(self) -> int:
        version: int = self.read(Int16, "version")
        if version < 0:
            raise self._fail(0, f"negative version {version}", "version")
        return version


def _group_by_topic(partitions: Iterable[TopicPartition]) -> list[tuple[str, list[int]]]:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return list(by_topic.items())


def _flatten(entries: Iterable[tuple[str, list[int]]]) -> tuple[TopicPartition, ...]:
    return tuple(TopicPartition(topic, p) for topic, parts in entries for p in parts)


def _check_version(version: int, latest: int, what: str) -> int:
    if not isinstance(version, int) or isinstance(version, bool):
        raise TypeError(f"{what} version must be an int, got {type(version).__name__}")
    if not 0 <= version <= _INT16_MAX:
        raise ValueError(f"{what} version must be between 0 and {_INT16_MAX}, got {version}")
    if version > latest:
        raise ValueError(f"cannot encode {what} version {version}: the newest known is {latest}")
    return version


def _check_partitions(partitions: Iterable[TopicPartition], what: str) -> None:
    for tp in partitions:
        if not isinstance(tp, TopicPartition) or not isinstance(tp.topic, str):
            raise TypeError(f"{what} must hold TopicPartition values, got {tp!r}")
        if not _INT32_MIN <= tp.partition <= _INT32_MAX:
            raise ValueError(f"{what} partition number out of int32 range: {tp!r}")


def encode_subscription(sub: ConsumerSubscription, version: int | None = None) -> bytes:
    """Encode ``sub`` at ``version`` (default ``sub.version``).

    Fields the chosen version cannot carry are left out: an older version is chosen
    precisely so that older leaders can read it.
    """
    v = _check_version(sub.version if version is None else version, 3, "subscription")
    if isinstance(sub.topics, str):
        raise TypeError("subscription topics must be a sequence of names, not one string")
    for topic in sub.topics:
        if not isinstance(topic, str):
            raise TypeError(f"subscription topics must be str, got {topic!r}")
    _check_partitions(sub.owned_partitions, "subscription owned_partitions")
    if not _INT32_MIN <= sub.generation_id <= _INT32_MAX:
        raise ValueError(f"subscription generation_id out of int32 range: {sub.generation_id}")
    fields: list[Any] = [v, list(sub.topics), sub.user_data]
    if v >= 1:
        fields.append(_group_by_topic(sub.owned_partitions))
    if v >= 2:
        fields.append(sub.generation_id)
    if v >= 3:
        fields.append(sub.rack_id)
    encoded: bytes = _SUBSCRIPTION_STRUCTS[v](*fields).encode()
    return encoded


def decode_subscription(data: bytes) -> ConsumerSubscription:
    """Decode subscription bytes of any version; raise MalformedProtocolDataError if bad."""
    reader = _Reader(bytes(data), "subscription")
    version = reader.read_version()
    schema = _SUBSCRIPTION_STRUCTS[min(version, LATEST_SUBSCRIPTION_VERSION)].SCHEMA
    values = reader.read_fields(schema)
    return ConsumerSubscription(
        topics=tuple(values["topics"]),
        user_data=values["user_data"],
        owned_partitions=_flatten(values.get("owned_partitions", ())),
        generation_id=values.get("generation_id", -1),
        rack_id=values.get("rack_id"),
        version=version,
    )


def encode_assignment(asg: ConsumerAssignment, version: int | None = None) -> bytes:
    """Encode ``asg`` at ``version`` (default ``asg.version``); all versions share a layout."""
    v = _check_version(asg.version if version is None else version, 3, "assignment")
    _check_partitions(asg.partitions, "assignment partitions")
    encoded: bytes = _Assignment(v, _group_by_topic(asg.partitions), asg.user_data).encode()
    return encoded


def decode_assignment(data: bytes) -> ConsumerAssignment:
    """Decode assignment bytes of any version; ``b""`` means no partitions.

    Brokers send empty bytes to members the leader gave nothing (or when the leader
    sent no entry for them), so that is a valid, empty assignment.
    """
    if not data:
        return ConsumerAssignment(partitions=())
    reader = _Reader(bytes(data), "assignment")
    version = reader.read_version()
    values = reader.read_fields(_Assignment.SCHEMA)
    return ConsumerAssignment(
        partitions=_flatten(values["assigned_partitions"]),
        user_data=values["user_data"],
        version=version,
    )
