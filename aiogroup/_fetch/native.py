"""The optional native decoder (``aiogroup_native``, the Rust crate in ``native/``).

Why: on the Arrow path the remaining cost was per-record Python work (aiokafka
building a record object per record, then keys and values copied into lists and
the lists into Arrow).  The native decoder reads a whole v2 record batch from the
fetched bytes (CRC-32C, codec, varints) straight into the buffers of the Arrow
columns; this module wraps those buffers into a ``pyarrow.RecordBatch`` without
copying them.

The record path uses it too (``native_records``): a whole v2 batch becomes its
``ConsumerRecord`` objects in one call, without aiokafka's record objects and without
the dataclass's Python ``__init__`` per record (``aiogroup._fetch.walker.RecordSink``).

It is optional: without the module (no Rust toolchain at install time), or with
``AIOGROUP_NATIVE=0`` in the environment, every batch takes the pure-Python path,
which gives the same RecordBatch and the same records.
"""

from __future__ import annotations

import importlib
import os
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from aiogroup.structs import ConsumerRecord, TopicPartition

if TYPE_CHECKING:
    import pyarrow

__all__ = [
    "NativeDecoder",
    "NativeRecords",
    "native_crc",
    "native_decoder",
    "native_error",
    "native_gc_tracking",
    "native_key_value_bytes",
    "native_records",
    "native_records_sized",
    "native_share_records",
    "record_batch",
    "record_template",
]


class NativeDecoder(Protocol):
    """``aiogroup_native.BatchDecoder``: rows of Arrow columns from whole v2 batches."""

    def __len__(self) -> int: ...

    def add_batch(
        self, data: bytes, start: int, end: int, topic: str, partition: int, check_crc: bool = True
    ) -> int:
        """Append every record of ``data[start:end]``; raises ``DecodeError`` (nothing kept)."""
        ...

    def finish(self) -> dict[str, Any]:
        """The columns so far as buffers; the decoder is empty again."""
        ...


_module: Any = None
_tried = False


def _load() -> Any:
    global _module, _tried
    if not _tried:
        _tried = True
        try:
            _module = importlib.import_module("aiogroup_native")
        except ImportError:
            _module = None
    return _module


def native_decoder() -> NativeDecoder | None:
    """A new native decoder, or None (module not installed, or ``AIOGROUP_NATIVE=0``)."""
    mod = _enabled()
    if mod is None:
        return None
    decoder: NativeDecoder = mod.BatchDecoder()
    return decoder


def _enabled() -> Any:
    if os.environ.get("AIOGROUP_NATIVE", "1") == "0":
        return None
    return _load()


def native_crc() -> Callable[[bytes, int, int], bool] | None:
    """``crc_ok(data, start, end)``: whether a v2 batch holds its CRC-32C, or None.

    The native CRC-32C uses the CPU's instruction where there is one (several times
    faster than aiokafka's), and reads the batch in place.
    """
    mod = _enabled()
    return None if mod is None else mod.crc_ok


class NativeRecords(Protocol):
    """``aiogroup_native.consumer_records``: a whole v2 batch as ``ConsumerRecord`` objects."""

    def __call__(
        self,
        data: bytes,
        start: int,
        end: int,
        cls: type[ConsumerRecord[Any, Any]],
        template: dict[str, Any],
        key_deserializer: Callable[[bytes], Any] | None = None,
        value_deserializer: Callable[[bytes], Any] | None = None,
        check_crc: bool = False,
    ) -> tuple[list[ConsumerRecord[Any, Any]], bool]:
        """The records of ``data[start:end]`` and whether a deserializer stopped it.

        Stopped: the records before the refused one (the caller reads that one again
        through the Python path).  Raises ``DecodeError`` on a malformed batch, having
        built nothing.
        """
        ...


def native_records() -> NativeRecords | None:
    """The native record builder, or None (no module, an older build, ``AIOGROUP_NATIVE=0``).

    It makes instances of ``ConsumerRecord`` with the class's ``object.__new__`` and
    stores the eleven fields with the generic ``__setattr__``, as ``__init__`` would, so
    the class must not define ``__new__`` or ``__setattr__`` (nor a base but object)
    and must keep its attributes in a ``__dict__``: true of aiokafka's dataclass;
    checked here, so that another aiokafka cannot be mis-built silently.
    """
    mod = _enabled()
    build = getattr(mod, "consumer_records", None)
    if build is None or not _plain_class(ConsumerRecord):
        return None
    records: NativeRecords = build
    return records


class NativeSizedRecords(Protocol):
    """``aiogroup_native.consumer_records_sized``: ``NativeRecords`` with the bytes counted."""

    def __call__(
        self,
        data: bytes,
        start: int,
        end: int,
        cls: type[ConsumerRecord[Any, Any]],
        template: dict[str, Any],
        key_deserializer: Callable[[bytes], Any] | None = None,
        value_deserializer: Callable[[bytes], Any] | None = None,
        check_crc: bool = False,
        prefix: bool = False,
    ) -> tuple[list[ConsumerRecord[Any, Any]], bool, int, bytes | None]:
        """``(records, stopped, total, prefix)``: as ``NativeRecords``, and the records'
        key + value bytes (a missing one counts 0); with ``prefix=True`` also their
        running sums, ``len(records) + 1`` native int64s (``memoryview(p).cast("q")``)."""
        ...


def native_records_sized() -> NativeSizedRecords | None:
    """The native record builder that also counts the key + value bytes, or None.

    Why: the consumer's delivered-bytes metric read each record's two size attributes
    back (``key_value_bytes``, about 7 % of getmany's instructions) although the
    builder had the sizes in hand; ``consumer_records_sized`` returns their sum per
    batch, and for a batch read in part their running sums, so that each slice handed
    out is counted in O(1).  An older build without it but with ``consumer_records``
    gets the same answers from a wrapper that sums them afterwards (slower).
    """
    mod = _enabled()
    if mod is None or not _plain_class(ConsumerRecord):
        return None
    sized: NativeSizedRecords | None = getattr(mod, "consumer_records_sized", None)
    if sized is not None:
        return sized
    build = getattr(mod, "consumer_records", None)
    count = getattr(mod, "key_value_bytes", None)
    if build is None or count is None:
        return None
    return _sized_by_wrapper(build, count)


def _sized_by_wrapper(
    build: NativeRecords, count: Callable[[list[Any]], int]
) -> NativeSizedRecords:
    """``consumer_records_sized`` for a build that lacks it (pre-delivbytes)."""

    def sized(
        data: bytes,
        start: int,
        end: int,
        cls: type[ConsumerRecord[Any, Any]],
        template: dict[str, Any],
        key_deserializer: Callable[[bytes], Any] | None = None,
        value_deserializer: Callable[[bytes], Any] | None = None,
        check_crc: bool = False,
        prefix: bool = False,
    ) -> tuple[list[ConsumerRecord[Any, Any]], bool, int, bytes | None]:
        recs, stopped = build(
            data, start, end, cls, template, key_deserializer, value_deserializer, check_crc
        )
        sums: bytes | None = None
        if prefix:
            running = [0]
            for r in recs:
                running.append(running[-1] + count([r]))
            sums = array("q", running).tobytes()
        return recs, stopped, count(recs), sums

    return sized


def native_key_value_bytes() -> Callable[[list[ConsumerRecord[Any, Any]]], int] | None:
    """``key_value_bytes(records)``: their key + value bytes (a -1 size counts 0), or None."""
    fn: Callable[[list[ConsumerRecord[Any, Any]]], int] | None = getattr(
        _enabled(), "key_value_bytes", None
    )
    return fn


def native_share_records() -> Callable[..., list[Any]] | None:
    """``aiogroup_native.share_records``: a whole v2 batch as ``ShareRecord`` tuples
    (issue 28; :func:`aiogroup._fetch.share_records.acquired_records` decides which
    batches), or None (no module, an older build, ``AIOGROUP_NATIVE=0``)."""
    fn: Callable[..., list[Any]] | None = getattr(_enabled(), "share_records", None)
    return fn


#: ``untrack(records, cls)``, ``retrack_shared(records, cls)`` (how many each acted on)
#: and ``keep_shared(records, cls)`` (a new list): see ``native_gc_tracking``.
GcTracking = tuple[
    Callable[[list[Any], type], int],
    Callable[[list[Any], type], int],
    Callable[[list[Any], type], list[Any]],
]


def native_gc_tracking() -> GcTracking | None:
    """``(untrack, retrack_shared, keep_shared)`` of the native module, or None (no
    module, an older build, ``AIOGROUP_NATIVE=0``): the records built natively are kept
    out of the cyclic collector while the fetcher holds them
    (``aiogroup._fetch.young_records``)."""
    mod = _enabled()
    untrack = getattr(mod, "untrack", None)
    retrack = getattr(mod, "retrack_shared", None)
    keep = getattr(mod, "keep_shared", None)
    if untrack is None or retrack is None or keep is None:
        return None
    return untrack, retrack, keep


def _plain_class(cls: type) -> bool:
    own = cls.__mro__[:-1]  # everything but object
    return (
        all("__new__" not in c.__dict__ and "__setattr__" not in c.__dict__ for c in own)
        and "__slots__" not in cls.__dict__
        and "__dict__" in cls.__dict__
    )


def record_template(tp: TopicPartition) -> dict[str, Any]:
    """What every record of partition ``tp`` shares, for ``consumer_records``: the topic
    and partition objects (one of each for all the records, as on the pure path)."""
    return {"topic": tp.topic, "partition": tp.partition}


def native_error() -> type[Exception]:
    """The exception the native decoder raises on a malformed batch."""
    mod = _load()
    err: type[Exception] = mod.DecodeError if mod is not None else ValueError
    return err


def _buf(pa: Any, b: Any) -> Any:
    """A pyarrow Buffer over a native Buffer's memory (no copy; ``b`` stays its base)."""
    return None if b is None else pa.foreign_buffer(b.address, b.size, base=b)


def _binary(pa: Any, typ: Any, col: list[Any]) -> Any:
    validity, offsets, data, n, nulls = col
    return pa.Array.from_buffers(
        typ, n, [_buf(pa, validity), _buf(pa, offsets), _buf(pa, data)], null_count=nulls
    )


def record_batch(columns: dict[str, Any], schema: pyarrow.Schema) -> pyarrow.RecordBatch:
    """The RecordBatch of ``NativeDecoder.finish()``'s columns, in ``schema``."""
    import pyarrow as pa

    n = columns["rows"]

    def fixed(typ: Any, name: str) -> Any:
        return pa.Array.from_buffers(typ, n, [None, _buf(pa, columns[name])], null_count=0)

    header_type = schema.field("headers").type
    entry = header_type.value_type
    entries = pa.StructArray.from_arrays(
        [
            _binary(pa, pa.string(), columns["header_key"]),
            _binary(pa, pa.binary(), columns["header_value"]),
        ],
        fields=list(entry),
    )
    headers = pa.Array.from_buffers(
        header_type,
        n,
        [None, _buf(pa, columns["header_offsets"])],
        null_count=0,
        children=[entries],
    )
    topic = pa.DictionaryArray.from_arrays(
        fixed(pa.int32(), "topic_index"), pa.array(columns["topics"], pa.string())
    )
    return pa.RecordBatch.from_arrays(
        [
            _binary(pa, pa.binary(), columns["key"]),
            _binary(pa, pa.binary(), columns["value"]),
            topic,
            fixed(pa.int32(), "partition"),
            fixed(pa.int64(), "offset"),
            fixed(pa.timestamp("ms"), "timestamp"),
            fixed(pa.int32(), "timestamp_type"),
            headers,
        ],
        schema=schema,
    )
