"""Message layouts as data, turned into aiokafka struct classes for every version.

Kafka describes each API once, field by field, with the versions each field
exists in; every wire version is a projection of that one description.  We keep
that shape: a message is a tuple of :class:`Field` with Kafka-style version
ranges, and :func:`define_api` projects it into one aiokafka ``RequestStruct`` /
``Response`` class per version.  Writing out sixty near-identical classes by hand
is how fields end up in the wrong place; a table reviewed against the spec once
is not.

Flexible versions (KIP-482) change the encoding, not the fields: strings, bytes
and arrays become compact and every struct, nested ones included, ends in a
tagged-field section.  We never send tagged fields and ignore the ones we receive.
"""

from __future__ import annotations

import enum
import functools
import types
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from aiokafka.protocol.api import RequestStruct, Response
from aiokafka.protocol.types import (
    AbstractType,
    Array,
    Boolean,
    Bytes,
    CompactArray,
    CompactBytes,
    CompactString,
    Int8,
    Int16,
    Int32,
    Int64,
    Schema,
    String,
    TaggedFields,
)

__all__ = ["TAGS", "ApiStructs", "Field", "Kind", "define_api", "struct_to_dict", "struct_values"]

#: Name of the tagged-field section that ends every struct of a flexible version.
TAGS = "_tagged_fields"


class Kind(enum.Enum):
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    BOOL = "bool"
    STRING = "string"
    BYTES = "bytes"
    #: 16 bytes on the wire; a :class:`uuid.UUID` in Python (KIP-516 topic ids).
    UUID = "uuid"


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message, as Kafka's message specs describe it.

    ``versions`` uses the spec's notation: ``"3+"``, ``"0-2"`` or ``"1"``.  A field
    is either a scalar ``kind``, an array of a scalar (``array=True``), or an array
    of structs (``fields`` given), or - with ``single=True`` - one struct (the spec's
    ``"type": "Assignment"``), nullable unless ``nullable=False``.
    """

    name: str
    kind: Kind | None = None
    versions: str = "0+"
    array: bool = False
    fields: tuple[Field, ...] = ()
    single: bool = False
    nullable: bool = True

    def __post_init__(self) -> None:
        if (self.kind is None) == (not self.fields):
            raise ValueError(f"field {self.name!r} needs exactly one of kind or fields")
        if self.single and not self.fields:
            raise ValueError(f"field {self.name!r}: single=True needs fields")
        _parse_versions(self.versions)

    def present_in(self, version: int) -> bool:
        low, high = _parse_versions(self.versions)
        return low <= version and (high is None or version <= high)


def _parse_versions(spec: str) -> tuple[int, int | None]:
    try:
        if spec.endswith("+"):
            return int(spec[:-1]), None
        if "-" in spec:
            low, high = spec.split("-")
            return int(low), int(high)
        return int(spec), int(spec)
    except ValueError:
        raise ValueError(f"bad version range {spec!r}") from None


class Uuid(AbstractType[uuid.UUID]):  # type: ignore[misc]  # aiokafka ships no stubs
    """Kafka's ``uuid`` type: 16 raw bytes (aiokafka has no such type)."""

    @classmethod
    def encode(cls, value: uuid.UUID) -> bytes:
        return value.bytes

    @classmethod
    def decode(cls, data: BytesIO) -> uuid.UUID:
        raw = data.read(16)
        if len(raw) != 16:
            raise ValueError("truncated uuid")
        return uuid.UUID(bytes=raw)


class NullableStruct:
    """One nested struct that may be null: an int8 marker (-1 null, 1 present), then it.

    Kafka encodes a nullable struct field this way in every version (flexible or
    not); ConsumerGroupHeartbeat's ``Assignment`` is the first such field we need.
    """

    def __init__(self, schema: Schema) -> None:
        self.schema = schema

    def encode(self, value: Any) -> bytes:
        if value is None:
            return bytes(Int8.encode(-1))
        return bytes(Int8.encode(1)) + bytes(self.schema.encode(value))

    def decode(self, data: BytesIO) -> Any:
        if Int8.decode(data) < 0:
            return None
        return self.schema.decode(data)

    def repr(self, value: Any) -> str:
        return "None" if value is None else self.schema.repr(value)


_FIXED: dict[Kind, Any] = {
    Kind.UUID: Uuid,
    Kind.INT8: Int8,
    Kind.INT16: Int16,
    Kind.INT32: Int32,
    Kind.INT64: Int64,
    Kind.BOOL: Boolean,
}


def _scalar(kind: Kind, flexible: bool) -> Any:
    if kind in _FIXED:
        return _FIXED[kind]
    if kind is Kind.STRING:
        return CompactString("utf-8") if flexible else String("utf-8")
    return CompactBytes if flexible else Bytes


def _schema(fields: tuple[Field, ...], version: int, flexible: bool) -> Schema:
    parts: list[tuple[str, Any]] = []
    array_type = CompactArray if flexible else Array
    for spec in fields:
        if not spec.present_in(version):
            continue
        if spec.single:
            inner = _schema(spec.fields, version, flexible)
            parts.append((spec.name, NullableStruct(inner) if spec.nullable else inner))
        elif spec.fields:
            parts.append((spec.name, array_type(_schema(spec.fields, version, flexible))))
        else:
            assert spec.kind is not None
            item = _scalar(spec.kind, flexible)
            parts.append((spec.name, array_type(item) if spec.array else item))
    if flexible:
        parts.append((TAGS, TaggedFields))
    return Schema(*parts)


def struct_values(
    fields: tuple[Field, ...], version: int, flexible: bool, values: Mapping[str, Any]
) -> list[Any]:
    """Order ``values`` (a superset: every field of every version) for one version.

    Nested struct arrays are given as sequences of mappings and come out as tuples,
    the shape aiokafka's decoder produces, so an encoded-then-decoded struct
    compares equal to the one we built.
    """
    return _ordered(_projection(fields, version), flexible, values)


_Projection = tuple[tuple[str, "_Projection | None", bool], ...]


@functools.cache
def _projection(fields: tuple[Field, ...], version: int) -> _Projection:
    """The fields ``version`` carries, nested ones included, computed once per version.

    A commit of a hundred partitions orders a hundred rows; deciding for each row
    afresh which fields exist in this version was most of the request's build time.
    """
    return tuple(
        (spec.name, _projection(spec.fields, version) if spec.fields else None, spec.single)
        for spec in fields
        if spec.present_in(version)
    )


def _ordered(projection: _Projection, flexible: bool, values: Mapping[str, Any]) -> list[Any]:
    out: list[Any] = []
    for name, nested, single in projection:
        value = values[name]
        if nested is not None and value is not None:
            if single:
                value = tuple(_ordered(nested, flexible, value))
            else:
                value = [tuple(_ordered(nested, flexible, row)) for row in value]
        out.append(value)
    if flexible:
        out.append({})
    return out


def struct_to_dict(struct: Any) -> dict[str, Any]:
    """Any aiokafka struct (ours or aiokafka's) as nested dicts keyed by field name.

    aiokafka's own ``to_object`` cannot represent a null array of structs, which
    flexible versions use (OffsetFetch's "all topics"); this one keeps it as None.
    """
    return _schema_to_dict(struct.SCHEMA, [getattr(struct, name) for name in struct.SCHEMA.names])


def _schema_to_dict(schema: Schema, values: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, nested, value in zip(schema.names, _struct_arrays(schema), values, strict=True):
        if nested is not None and value is not None:
            if isinstance(nested, _Single):
                value = _schema_to_dict(nested.schema, value)
            else:
                value = [_schema_to_dict(nested, row) for row in value]
        out[name] = value
    return out


@dataclass(frozen=True)
class _Single:
    schema: Schema


@functools.cache
def _struct_arrays(schema: Schema) -> tuple[Schema | _Single | None, ...]:
    """For each field of ``schema``, the schema of its rows if it is an array of structs
    (or, wrapped in ``_Single``, of the one struct a nullable struct field holds).

    Computed once per schema (there are a few dozen, one per API version), so
    decoding a response of many partitions does not re-inspect the types per row.
    """
    return tuple(
        _Single(kind.schema)
        if isinstance(kind, NullableStruct)
        else _Single(kind)
        if isinstance(kind, Schema)
        else kind.array_of
        if isinstance(kind, Array) and isinstance(kind.array_of, Schema)
        else None
        for kind in schema.fields
    )


@dataclass(frozen=True, slots=True)
class ApiStructs:
    """Every version of one API: request and response struct classes, keyed by version."""

    name: str
    api_key: int
    flexible_from: int
    request_fields: tuple[Field, ...]
    response_fields: tuple[Field, ...]
    requests: Mapping[int, type[Any]]
    responses: Mapping[int, type[Any]]

    @property
    def max_version(self) -> int:
        return max(self.requests)

    def is_flexible(self, version: int) -> bool:
        return version >= self.flexible_from

    def request(self, version: int, values: Mapping[str, Any]) -> Any:
        """The request struct of ``version`` holding those of ``values`` it has room for."""
        cls = self.requests[version]
        flexible = self.is_flexible(version)
        return cls(*struct_values(self.request_fields, version, flexible, values))

    def response(self, version: int, values: Mapping[str, Any]) -> Any:
        cls = self.responses[version]
        flexible = self.is_flexible(version)
        return cls(*struct_values(self.response_fields, version, flexible, values))


def _new_class(name: str, base: type[Any], namespace: dict[str, Any]) -> type[Any]:
    # types.new_class honours the ABCMeta metaclass of aiokafka's bases.
    cls = types.new_class(name, (base,), exec_body=lambda ns: ns.update(namespace))
    cls.__module__ = __name__.rsplit(".", 1)[0] + ".messages"
    return cls


def define_api(
    name: str,
    api_key: int,
    versions: range,
    flexible_from: int,
    request_fields: tuple[Field, ...],
    response_fields: tuple[Field, ...],
) -> ApiStructs:
    """Build the struct classes of ``versions`` of one API (``name`` like ``"JoinGroup"``)."""
    requests: dict[int, type[Any]] = {}
    responses: dict[int, type[Any]] = {}
    for version in versions:
        flexible = version >= flexible_from
        response_cls = _new_class(
            f"{name}Response_v{version}",
            Response,
            {
                "API_KEY": api_key,
                "API_VERSION": version,
                "SCHEMA": _schema(response_fields, version, flexible),
            },
        )
        requests[version] = _new_class(
            f"{name}Request_v{version}",
            RequestStruct,
            {
                "API_KEY": api_key,
                "API_VERSION": version,
                "FLEXIBLE_VERSION": flexible,
                "RESPONSE_TYPE": response_cls,
                "SCHEMA": _schema(request_fields, version, flexible),
            },
        )
        responses[version] = response_cls
    return ApiStructs(
        name=name,
        api_key=api_key,
        flexible_from=flexible_from,
        request_fields=request_fields,
        response_fields=response_fields,
        requests=types.MappingProxyType(requests),
        responses=types.MappingProxyType(responses),
    )
