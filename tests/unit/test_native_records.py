"""The record path with the native module against the pure-Python path: equal records.

Differential: the same fetched bytes walked into a ``RecordSink`` with the native
module (``aiogroup_native.consumer_records``) and with ``AIOGROUP_NATIVE=0`` (aiokafka's
records and the Python comprehension) give equal ``ConsumerRecord`` lists, walk by
walk, with the same counts and positions - for every codec, headers, null and empty
keys and values, log-append time, compacted gaps, control batches, aborted
transactions (read_committed), a fetch starting inside a batch, an end offset inside
one (the last stable offset), limits that cut batches, deserializers (plain and
refusing), legacy message sets and malformed batches.  Then what the native objects
are: real ``ConsumerRecord`` instances that behave like the pure path's.

The pure path stays covered with the module installed: every comparison here runs
it, and ``AIOGROUP_NATIVE=0`` is how the rest of the suite can be run on it.
"""

from __future__ import annotations

import copy
import dataclasses
import pickle
import random
import shutil
import struct
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given
from hypothesis import strategies as st

from aiogroup._fetch.decoding import Chunk, split_batches
from aiogroup._fetch.walker import RecordSink, walk
from aiogroup._state.subscription import PartitionState, SubscriptionState
from aiogroup.errors import RecordDeserializationError
from aiogroup.structs import ConsumerRecord, TopicPartition
from tests.unit import chunks

if shutil.which("cargo") is None:
    native = pytest.importorskip(
        "aiogroup_native", reason="the native decoder is not built (make install needs cargo)"
    )
else:
    try:
        import aiogroup_native as native
    except ImportError as exc:  # make install builds it wherever cargo is: a missing step
        pytest.fail(
            f"cargo is on PATH but aiogroup_native is not importable: {exc}; run make install"
        )
if not hasattr(native, "consumer_records"):
    pytest.fail("aiogroup_native predates consumer_records: rebuild it (make native)")


TP = TopicPartition("events", 3)
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
ATTR_POS = 21
LOG_APPEND_TIME = 0x08
CONTROL = 0x20
ABORT, COMMIT = 0, 1
TS0 = 1_700_000_000_000

Rec = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def fix_crc(data: bytearray | bytes) -> bytes:
    data = bytearray(data)
    struct.pack_into(">I", data, 17, native.crc32c(bytes(data[ATTR_POS:])))
    return bytes(data)


def set_attrs(data: bytes, bits: int) -> bytes:
    buf = bytearray(data)
    attrs = struct.unpack_from(">h", buf, ATTR_POS)[0] | bits
    struct.pack_into(">h", buf, ATTR_POS, attrs)
    return fix_crc(buf)


def build(
    base: int,
    records: list[Rec],
    codec: int = 0,
    *,
    pid: int = -1,
    transactional: bool = False,
    log_append: bool = False,
    max_ts: int | None = None,
) -> bytes:
    """A v2 batch at ``base``: records are (offset delta, timestamp, key, value, headers)."""
    builder = DefaultRecordBatchBuilder(
        2, codec, int(transactional), pid, 0 if pid >= 0 else -1, 0 if pid >= 0 else -1, 1 << 30
    )
    for delta, ts, key, value, headers in records:
        builder.append(delta, ts, key, value, headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    if max_ts is not None:
        struct.pack_into(">q", data, 35, max_ts)
    out = fix_crc(data)
    return set_attrs(out, LOG_APPEND_TIME) if log_append else out


def marker(base: int, pid: int, kind: int) -> bytes:
    """A control batch (a transaction marker: ABORT or COMMIT) of producer ``pid``."""
    key = struct.pack(">hh", 0, kind)
    value = struct.pack(">hi", 0, 0)
    return set_attrs(build(base, [(0, TS0, key, value, [])], pid=pid, transactional=True), CONTROL)


def random_records(rng: random.Random, n: int, *, gaps: bool = False) -> list[Rec]:
    out: list[Rec] = []
    delta = 0
    for _ in range(n):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 20))
        value = None if rng.random() < 0.1 else rng.randbytes(rng.choice([0, 1, 100, 1024]))
        hs: list[tuple[str, bytes | None]] = []
        if rng.random() < 0.4:
            hs = [
                (rng.choice(["trace", "ü-key", "", "k"]), rng.choice([None, b"", b"v" * 30]))
                for _ in range(rng.randrange(1, 4))
            ]
        out.append((delta, TS0 + rng.randrange(-1000, 1000), key, value, hs))
        delta += rng.randrange(1, 5) if gaps else 1
    return out


def chunk_of(
    data: bytes,
    fetch_offset: int = 0,
    *,
    end: int | None = None,
    aborted: list[tuple[int, int]] | None = None,
    check_crcs: bool = True,
) -> Chunk:
    state = PartitionState(TP, SubscriptionState().default_reset)
    state.seek(fetch_offset)
    return chunks.chunk_of(
        state, data, fetch_offset, end=end, aborted=aborted, check_crcs=check_crcs
    )


Deser = Callable[[bytes], Any] | None


def run(
    data: bytes,
    monkeypatch: pytest.MonkeyPatch,
    native_on: bool,
    limits: list[int],
    *,
    fetch_offset: int = 0,
    end: int | None = None,
    aborted: list[tuple[int, int]] | None = None,
    kd: Deser = None,
    vd: Deser = None,
) -> list[Any]:
    """Walk the chunk with ``limits`` (the last one repeated) until done or refused.

    Each walk gives (taken, next_offset, records, refusal): what must be equal.
    """
    monkeypatch.setenv("AIOGROUP_NATIVE", "1" if native_on else "0")
    chunk = chunk_of(data, fetch_offset, end=end, aborted=aborted)
    steps: list[Any] = []
    for i in range(10_000):
        sink = RecordSink(kd, vd)
        assert sink.takes_raw is native_on and sink.builds_records is native_on
        taken = walk(chunk, limits[min(i, len(limits) - 1)], sink)
        records = sink.result.get(TP, [])
        assert len(records) == taken
        failure = chunk.failure
        refusal = None if failure is None else (failure.offset, failure.origin)
        steps.append((taken, chunk.next_offset, records, refusal))
        if failure is not None or chunk.done:
            return steps
    raise AssertionError("the walk never ended")


def assert_same(data: bytes, monkeypatch: pytest.MonkeyPatch, **kw: Any) -> list[Any]:
    limits = kw.pop("limits", [1 << 30])
    pure = run(data, monkeypatch, False, limits, **kw)
    fast = run(data, monkeypatch, True, limits, **kw)
    assert fast == pure
    for step in fast:
        for r in step[2]:
            assert type(r) is ConsumerRecord
            assert type(r.headers) is tuple
    return fast


def offsets(steps: list[Any]) -> list[int]:
    return [r.offset for step in steps for r in step[2]]


# -- equal records ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("seed", range(3))
def test_every_codec_gives_the_pure_paths_records(
    codec: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    data = b""
    base = 0
    for i in range(4):
        recs = random_records(rng, rng.randrange(1, 60), gaps=i % 2 == 1)
        data += build(base, recs, CODECS[codec])
        base += recs[-1][0] + 1
    whole = assert_same(data, monkeypatch)
    assert whole[0][2], "nothing was read"
    assert_same(data, monkeypatch, limits=[7, 1, 30, 1000])


def test_null_and_empty_keys_values_and_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    recs: list[Rec] = [
        (0, 1, None, None, []),
        (1, 2, b"", b"", [("", b"")]),
        (2, 3, b"k", None, [("h", None), ("h", b"x")]),
        (3, 4, None, b"", []),
    ]
    [(_, _, got, _)] = assert_same(build(0, recs), monkeypatch)
    assert [(r.key, r.value) for r in got] == [(None, None), (b"", b""), (b"k", None), (None, b"")]
    assert [r.serialized_key_size for r in got] == [-1, 0, 1, -1]
    assert [r.serialized_value_size for r in got] == [-1, 0, -1, 0]
    assert got[2].headers == (("h", None), ("h", b"x"))
    assert got[0].headers == () and got[0].checksum is None


def test_log_append_time_takes_the_batch_max_timestamp(monkeypatch: pytest.MonkeyPatch) -> None:
    recs: list[Rec] = [(i, 1_000 + i, None, b"v", []) for i in range(5)]
    data = build(0, recs, log_append=True, max_ts=42_000) + build(5, recs)
    [(_, _, got, _)] = assert_same(data, monkeypatch)
    assert [(r.timestamp, r.timestamp_type) for r in got] == [(42_000, 1)] * 5 + [
        (1_000 + i, 0) for i in range(5)
    ]


def test_compacted_gaps_and_a_fetch_inside_a_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    recs: list[Rec] = [(d, TS0, b"k", b"v%d" % d, []) for d in (0, 3, 4, 9)]
    data = build(100, recs, 3) + build(110, random_records(random.Random(4), 10))
    assert offsets(assert_same(data, monkeypatch)) == [100, 103, 104, 109, *range(110, 120)]
    steps = assert_same(data, monkeypatch, fetch_offset=104, limits=[2, 1, 100])
    assert offsets(steps) == [104, 109, *range(110, 120)]
    assert [s[1] for s in steps] == [110, 111, 120]


def test_an_end_offset_inside_a_batch_stops_there(monkeypatch: pytest.MonkeyPatch) -> None:
    """read_committed: the last stable offset cuts the last batch."""
    data = build(0, random_records(random.Random(1), 10)) + build(
        10, random_records(random.Random(2), 10)
    )
    steps = assert_same(data, monkeypatch, end=15, limits=[4, 100])
    assert offsets(steps) == list(range(15))
    assert steps[-1][1] == 15


def test_control_batches_and_aborted_transactions(monkeypatch: pytest.MonkeyPatch) -> None:
    """Producer 7 aborts, producer 8 commits, plain records around them."""
    rng = random.Random(9)
    data = (
        build(0, random_records(rng, 3))
        + build(3, random_records(rng, 4), 4, pid=7, transactional=True)  # aborted
        + build(7, random_records(rng, 2), 3, pid=8, transactional=True)  # committed
        + marker(9, 7, ABORT)
        + marker(10, 8, COMMIT)
        + build(11, random_records(rng, 3), 1)
    )
    for limits in ([1 << 30], [2], [1, 5, 1]):
        steps = assert_same(data, monkeypatch, aborted=[(7, 3)], limits=limits)
        assert offsets(steps) == [0, 1, 2, 7, 8, 11, 12, 13]
        assert steps[-1][1] == 14
    # read_uncommitted (no aborted list): the aborted records are delivered, markers not.
    steps = assert_same(data, monkeypatch)
    assert offsets(steps) == [*range(9), 11, 12, 13]


def test_deserializers_are_applied(monkeypatch: pytest.MonkeyPatch) -> None:
    data = build(0, random_records(random.Random(3), 40), 3)
    steps = assert_same(data, monkeypatch, kd=bytes.hex, vd=len, limits=[1 << 30])
    got = steps[0][2]
    assert all(r.value is None or isinstance(r.value, int) for r in got)
    assert all(r.key is None or isinstance(r.key, str) for r in got)
    assert_same(data, monkeypatch, kd=bytes.hex, vd=len, limits=[3, 11])


@pytest.mark.parametrize("part", ["key", "value"])
@pytest.mark.parametrize("limits", [[1 << 30], [5], [1]])
def test_a_refused_record_stops_the_walk_before_it(
    part: str, limits: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """KIP-334: records before the refused one are delivered, the position stays on it."""
    data = b"".join(
        build(base, [(i, TS0, b"k%d" % (base + i), b"v%d" % (base + i), []) for i in range(10)], c)
        for base, c in ((0, 0), (10, 4))
    )
    calls: list[bytes] = []

    def refuse(raw: bytes) -> bytes:
        calls.append(raw)
        if raw.endswith(b"13"):
            raise ValueError("no 13")
        return raw.upper()

    kw: dict[str, Any] = {"kd": refuse} if part == "key" else {"vd": refuse}
    steps = assert_same(data, monkeypatch, limits=limits, **kw)
    assert offsets(steps) == list(range(13))
    assert steps[-1][3] == (13, part)
    assert steps[-1][1] == 13


def test_a_refusal_is_raised_with_the_pure_paths_error(monkeypatch: pytest.MonkeyPatch) -> None:
    data = build(0, [(i, TS0, None, b"%d" % i, []) for i in range(5)])

    def refuse(raw: bytes) -> int:
        if raw == b"2":
            raise ValueError("bad")
        return int(raw)

    for native_on in (False, True):
        monkeypatch.setenv("AIOGROUP_NATIVE", "1" if native_on else "0")
        chunk = chunk_of(data)
        sink = RecordSink(None, refuse)
        assert walk(chunk, 100, sink) == 2
        assert isinstance(chunk.failure, RecordDeserializationError)
        assert isinstance(chunk.failure.__cause__, ValueError)
        assert [r.value for r in sink.result[TP]] == [0, 1]


def test_legacy_message_sets_take_the_pure_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    for i in range(5):
        builder.append(i, timestamp=TS0 + i, key=None, value=b"v%d" % i)
    data = bytes(builder.build())
    steps = assert_same(data, monkeypatch, limits=[2, 100])
    assert offsets(steps) == list(range(5))


def test_a_malformed_batch_fails_as_on_the_pure_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The native module declines it; the pure path's decoder raises its own error."""
    good = build(500, random_records(random.Random(5), 20))
    bad = bytearray(good)
    bad[61:71] = b"\xff" * 10
    data = fix_crc(bad)
    errors = []
    for native_on in (False, True):
        monkeypatch.setenv("AIOGROUP_NATIVE", "1" if native_on else "0")
        sink = RecordSink(None, None)
        with pytest.raises(Exception) as info:
            walk(chunk_of(data), 100, sink)
        errors.append((type(info.value), str(info.value)))
        assert sink.result.get(TP, []) == []
    assert errors[0] == errors[1]
    with pytest.raises(native.DecodeError, match=r"events-3 at offset 500: bad varint"):
        native.consumer_records(
            data, 0, len(data), ConsumerRecord, {"topic": "events", "partition": 3}
        )


@given(
    batches=st.lists(
        st.tuples(
            st.lists(
                st.tuples(
                    st.integers(1, 3),
                    st.integers(-5_000, 5_000),
                    st.none() | st.binary(max_size=12),
                    st.none() | st.binary(max_size=40),
                    st.lists(
                        st.tuples(
                            st.sampled_from(["a", "trace", "ü", ""]),
                            st.none() | st.binary(max_size=5),
                        ),
                        max_size=2,
                    ),
                ),
                min_size=1,
                max_size=12,
            ),
            st.sampled_from(sorted(CODECS.values())),
            st.booleans(),
        ),
        min_size=1,
        max_size=4,
    ),
    limits=st.lists(st.integers(1, 15), min_size=1, max_size=4),
    start=st.integers(0, 100),
    cut=st.integers(0, 100),
    deserialize=st.booleans(),
)
def test_any_batches_any_limits(
    batches: list[Any],
    limits: list[int],
    start: int,
    cut: int,
    deserialize: bool,
) -> None:
    data = b""
    base = 0
    for recs, codec, log_append in batches:
        rows: list[Rec] = []
        delta = 0
        for gap, ts, key, value, hs in recs:
            rows.append((delta, TS0 + ts, key, value, hs))
            delta += gap
        data += build(base, rows, codec, log_append=log_append, max_ts=TS0 + 7)
        base += rows[-1][0] + 1 + cut % 3
    last = split_batches(data)[-1].next_offset
    fetch_offset = start % last
    end = last - cut % max(1, last - fetch_offset)
    kw: dict[str, Any] = {"vd": bytes.hex} if deserialize else {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert_same(data, monkeypatch, limits=limits, fetch_offset=fetch_offset, end=end, **kw)


# -- what the native objects are -------------------------------------------------------------


def native_records(data: bytes) -> list[Any]:
    from aiogroup._fetch.native import record_template

    recs, stopped = native.consumer_records(data, 0, len(data), ConsumerRecord, record_template(TP))
    assert not stopped
    return list(recs)


def test_native_records_behave_like_the_dataclass() -> None:
    recs = native_records(build(5, [(0, TS0, b"k", b"v", [("h", b"x")]), (1, TS0, None, b"w", [])]))
    first = recs[0]
    expected = ConsumerRecord("events", 3, 5, TS0, 0, b"k", b"v", None, 1, 1, (("h", b"x"),))
    assert first == expected and repr(first) == repr(expected)
    assert dataclasses.asdict(first) == dataclasses.asdict(expected)
    assert list(vars(first)) == [f.name for f in dataclasses.fields(ConsumerRecord)]
    assert pickle.loads(pickle.dumps(first)) == first
    assert copy.copy(first) == first
    assert dataclasses.replace(first, value=b"z").value == b"z"
    # Each record has its own attributes: changing one changes nothing else.
    first.value = b"changed"
    first.extra = 1  # type: ignore[attr-defined]
    again = native_records(build(5, [(0, TS0, b"k", b"v", [("h", b"x")])]))[0]
    assert recs[1].value == b"w" and again == expected and not hasattr(again, "extra")


def test_native_records_are_freed() -> None:
    """No reference leaks: the objects, their dicts and their bytes go with the list."""
    import gc
    import sys

    data = build(0, random_records(random.Random(2), 50), 3)
    native_records(data)  # warm up caches (interned names, scratch buffer)
    gc.collect()
    before = sys.getallocatedblocks()
    for _ in range(50):
        native_records(data)
    gc.collect()
    assert sys.getallocatedblocks() - before < 200


def test_key_value_bytes_agree_with_the_pure_sum(monkeypatch: pytest.MonkeyPatch) -> None:
    """The metrics' delivered bytes: a missing key or value (-1) counts 0."""
    from aiogroup._fetch.delivery import records_and_bytes

    data = build(0, random_records(random.Random(6), 80), 4)
    lists = [native_records(data), native_records(data)[:7], []]
    expected = sum(
        max(0, r.serialized_key_size) + max(0, r.serialized_value_size)
        for records in lists
        for r in records
    )
    assert expected > 0
    for on in ("0", "1"):
        monkeypatch.setenv("AIOGROUP_NATIVE", on)
        assert records_and_bytes(lists) == (87, expected)
    assert native.key_value_bytes([]) == 0
    with pytest.raises(AttributeError):
        native.key_value_bytes([object()])


@pytest.mark.parametrize("native_on", [False, True])
def test_a_base_exception_from_a_deserializer_is_not_a_refusal(
    native_on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt (or a cancellation) goes up at once, on both paths, not swallowed."""
    data = build(0, [(i, TS0, None, b"%d" % i, []) for i in range(5)])
    calls = []

    def interrupted(raw: bytes) -> bytes:
        calls.append(raw)
        if raw == b"2":
            raise KeyboardInterrupt
        return raw

    monkeypatch.setenv("AIOGROUP_NATIVE", "1" if native_on else "0")
    with pytest.raises(KeyboardInterrupt):
        walk(chunk_of(data), 100, RecordSink(None, interrupted))
    assert calls == [b"0", b"1", b"2"]  # called once each, up to the interrupt
