"""The native decoder (``aiogroup_native``) against the pure-Python Arrow path.

Differential: the same record sets, walked into a ``ColumnBuilder`` with the native
decoder and with ``AIOGROUP_NATIVE=0``, give equal RecordBatches (every codec,
headers, null and empty keys/values, compacted offset gaps, log-append time, large
values, partial batches mixed with whole ones).  Then malformed batches: each gives
a clear error naming the topic-partition, the offset and the problem.

The module is built by ``make install`` (it needs a Rust toolchain); without it
these tests cannot run, and the pure path is what every other test exercises.
"""

from __future__ import annotations

import random
import shutil
import struct
from typing import Any

import pytest
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from aiogroup._fetch.arrow import ColumnBuilder, arrow_schema
from aiogroup._fetch.decoding import Chunk, split_batches
from aiogroup._fetch.walker import walk
from aiogroup._state.subscription import PartitionState, SubscriptionState
from aiogroup.structs import TopicPartition
from tests.unit import chunks

if shutil.which("cargo") is None:
    # Not applicable: without a Rust toolchain make install leaves the module out.
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
pa = pytest.importorskip("pyarrow")

TP = TopicPartition("events", 3)
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
ATTR_POS = 21
LOG_APPEND_TIME = 0x08


def build(
    base: int,
    records: list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    codec: int = 0,
    *,
    log_append: bool = False,
    max_ts: int | None = None,
) -> bytes:
    """A v2 batch at ``base``: records are (offset delta, timestamp, key, value, headers)."""
    builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 1 << 30)
    for delta, ts, key, value, headers in records:
        builder.append(delta, ts, key, value, headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    if log_append:
        attrs = struct.unpack_from(">h", data, ATTR_POS)[0] | LOG_APPEND_TIME
        struct.pack_into(">h", data, ATTR_POS, attrs)
        if max_ts is not None:
            struct.pack_into(">q", data, 35, max_ts)
    return fix_crc(data)


def fix_crc(data: bytearray | bytes) -> bytes:
    data = bytearray(data)
    struct.pack_into(">I", data, 17, native.crc32c(bytes(data[ATTR_POS:])))
    return bytes(data)


def chunk_of(data: bytes, fetch_offset: int = 0, *, check_crcs: bool = True) -> Chunk:
    st = PartitionState(TP, SubscriptionState().default_reset)
    st.seek(fetch_offset)
    return chunks.chunk_of(st, data, fetch_offset, check_crcs=check_crcs)


def columns(
    data: bytes, monkeypatch: pytest.MonkeyPatch, native_on: bool, limits: list[int] | None = None
) -> Any:
    monkeypatch.setenv("AIOGROUP_NATIVE", "1" if native_on else "0")
    sink = ColumnBuilder()
    assert sink.takes_raw is native_on
    chunk = chunk_of(data)
    for n in limits or [1 << 30]:
        walk(chunk, n, sink)
    assert chunk.done
    if native_on and limits is None:
        assert sink._other == len(sink)  # every batch went through the native decoder
    return sink.to_record_batch()


def assert_same(
    data: bytes, monkeypatch: pytest.MonkeyPatch, limits: list[int] | None = None
) -> Any:
    pure = columns(data, monkeypatch, False, limits)
    fast = columns(data, monkeypatch, True, limits)
    assert fast.schema == arrow_schema()
    assert fast.num_rows == pure.num_rows
    assert fast.to_pylist() == pure.to_pylist()
    assert fast.equals(pure)
    fast.validate(full=True)
    return fast


def random_records(
    rng: random.Random, n: int, *, gaps: bool = False, headers: bool = True, big: bool = False
) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    out = []
    delta = 0
    ts0 = 1_700_000_000_000
    for _ in range(n):
        key = None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 20))
        size = rng.choice([0, 1, 100, 1024]) if not big else rng.choice([1 << 16, 1 << 20])
        value = None if rng.random() < 0.1 else rng.randbytes(size)
        hs: list[tuple[str, bytes | None]] = []
        if headers and rng.random() < 0.5:
            hs = [
                (rng.choice(["trace", "ü-key", "", "k"]), rng.choice([None, b"", b"v" * 30]))
                for _ in range(rng.randrange(1, 4))
            ]
        out.append((delta, ts0 + rng.randrange(-1000, 1000), key, value, hs))
        delta += rng.randrange(1, 5) if gaps else 1
    return out


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("seed", range(4))
def test_every_codec_matches_the_pure_path(
    codec: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    data = b""
    base = 0
    for i in range(4):
        recs = random_records(rng, rng.randrange(1, 60), gaps=i % 2 == 1, headers=seed % 2 == 0)
        data += build(base, recs, CODECS[codec])
        base += recs[-1][0] + 1
    batch = assert_same(data, monkeypatch)
    assert batch.column("partition").to_pylist() == [3] * batch.num_rows


def test_compacted_gaps_keep_their_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    recs = [(d, 1_700_000_000_000, b"k", b"v%d" % d, []) for d in (0, 3, 4, 9)]
    batch = assert_same(build(100, recs, 3), monkeypatch)
    assert batch.column("offset").to_pylist() == [100, 103, 104, 109]


def test_log_append_time_takes_the_batch_max_timestamp(monkeypatch: pytest.MonkeyPatch) -> None:
    recs = [(i, 1_000 + i, None, b"v", []) for i in range(5)]
    batch = assert_same(build(0, recs, 0, log_append=True, max_ts=42_000), monkeypatch)
    assert batch.column("timestamp_type").to_pylist() == [1] * 5
    assert [t.timestamp() for t in batch.column("timestamp").to_pylist()] == [42.0] * 5


def test_null_and_empty_keys_values_and_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    recs: list[Any] = [
        (0, 1, None, None, []),
        (1, 2, b"", b"", [("", b"")]),
        (2, 3, b"k", None, [("h", None), ("h", b"x")]),
        (3, 4, None, b"", []),
    ]
    batch = assert_same(build(0, recs, 0), monkeypatch)
    rows = batch.to_pylist()
    assert [r["key"] for r in rows] == [None, b"", b"k", None]
    assert [r["value"] for r in rows] == [None, b"", None, b""]
    assert rows[2]["headers"] == [{"key": "h", "value": None}, {"key": "h", "value": b"x"}]


@pytest.mark.parametrize("codec", list(CODECS))
def test_large_values(codec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    data = build(0, random_records(rng, 6, big=True), CODECS[codec])
    assert_same(data, monkeypatch)


def test_partial_and_whole_batches_mix_in_walk_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read that ends inside a batch takes the Python path for it; rows stay in order."""
    rng = random.Random(3)
    data = b""
    base = 0
    for codec in (0, 3, 4, 1, 2):
        recs = random_records(rng, 10)
        data += build(base, recs, codec)
        base += 10
    for limits in ([7, 100], [10, 10, 5, 100], [3] * 20, [25, 25]):
        assert_same(data, monkeypatch, limits)


@pytest.mark.parametrize("native_on", [False, True])
def test_whole_batches_passes_the_limit_rather_than_cut_a_batch(
    native_on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``whole_batches``: a limit inside a batch takes the batch whole (native path).

    Without it the limit is exact and the cut batch goes record by record.  A batch
    already started (a fetch from inside it) still stops exactly at the limit.
    """
    monkeypatch.setenv("AIOGROUP_NATIVE", "1" if native_on else "0")
    rng = random.Random(5)
    data = b"".join(
        build(10 * i, random_records(rng, 10), codec) for i, codec in enumerate((0, 3, 4, 1, 2))
    )

    exact = ColumnBuilder()
    assert walk(chunk_of(data), 15, exact) == 15

    chunk = chunk_of(data)
    sink = ColumnBuilder(whole_batches=True)
    assert walk(chunk, 15, sink) == 20  # two whole batches, not one and a half
    assert walk(chunk, 1, sink) == 10  # one record asked for: its whole batch
    if native_on:
        assert sink._rows == 0, "a batch went through the per-record path"
    assert walk(chunk, 100, sink) == 20
    assert chunk.done
    got = sink.to_record_batch()
    assert got.column("offset").to_pylist() == list(range(50))
    reference = ColumnBuilder()
    walk(chunk_of(data), 1 << 30, reference)
    assert got.equals(reference.to_record_batch())

    started = chunk_of(data, 4)  # the first batch is already started: exact limit
    sink = ColumnBuilder(whole_batches=True)
    assert walk(started, 3, sink) == 3
    assert walk(started, 4, sink) == 13  # the rest of batch 0 (3), then batch 1 whole
    assert sink.to_record_batch().column("offset").to_pylist() == list(range(4, 20))


def test_fetch_starting_inside_a_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    data = build(0, random_records(random.Random(1), 10)) + build(
        10, random_records(random.Random(2), 10)
    )
    for native_on in (False, True):
        monkeypatch.setenv("AIOGROUP_NATIVE", "1" if native_on else "0")
        sink = ColumnBuilder()
        walk(chunk_of(data, 4), 100, sink)
        assert sink.to_record_batch().column("offset").to_pylist() == list(range(4, 20))


def test_topics_across_builders_concatenate(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two topics, native and pure rows in one builder: one dictionary column."""
    monkeypatch.setenv("AIOGROUP_NATIVE", "1")
    sink = ColumnBuilder()
    one = build(0, [(0, 1, None, b"a", [])])
    sink.add_raw_batch(TopicPartition("a", 0), one, 0, len(one))
    [batch] = split_batches(one)
    sink.add_batch(TopicPartition("b", 1), batch, 0)
    sink.add_raw_batch(TopicPartition("c", 2), one, 0, len(one))
    out = sink.to_record_batch()
    assert out.column("topic").to_pylist() == ["a", "b", "c"]
    assert out.column("partition").to_pylist() == [0, 1, 2]
    assert out.schema == arrow_schema()
    assert len(sink) == 3 and sink.to_record_batch().equals(out)


def test_without_the_module_the_pure_path_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOGROUP_NATIVE", "0")
    assert not ColumnBuilder().takes_raw


# -- malformed batches: clear errors, nothing kept -------------------------------------------


def decode(data: bytes, *, check_crc: bool = True) -> Any:
    dec = native.BatchDecoder()
    dec.add_batch(data, 0, len(data), TP.topic, TP.partition, check_crc)
    return dec


def good(codec: int = 0) -> bytes:
    return build(500, random_records(random.Random(5), 20), codec)


def test_crc_mismatch_names_the_batch() -> None:
    data = bytearray(good())
    data[-1] ^= 0xFF
    with pytest.raises(native.DecodeError, match=r"events-3 at offset 500 failed its CRC check"):
        decode(bytes(data))


def test_crc_mismatch_through_the_walker(monkeypatch: pytest.MonkeyPatch) -> None:
    data = bytearray(good())
    data[-1] ^= 0xFF
    monkeypatch.setenv("AIOGROUP_NATIVE", "1")
    with pytest.raises(CorruptRecordException, match="events-3 at offset 500 failed its CRC"):
        walk(chunk_of(bytes(data)), 100, ColumnBuilder())


def test_malformed_records_through_the_walker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose CRC holds but whose records do not parse: CorruptRecordException."""
    data = bytearray(good())
    data[61:71] = b"\xff" * 10
    monkeypatch.setenv("AIOGROUP_NATIVE", "1")
    sink = ColumnBuilder()
    with pytest.raises(CorruptRecordException, match=r"events-3 at offset 500: bad varint"):
        walk(chunk_of(fix_crc(data)), 100, sink)
    assert len(sink) == 0


def test_spans_follow_the_batch_prefixes() -> None:
    data = good() + good()
    chunk = chunk_of(data)
    assert chunk.raw_span(0) == (0, len(data) // 2)
    assert chunk.raw_span(1) == (len(data) // 2, len(data))


def test_legacy_message_sets_take_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A v1 message set: no spans, the Python path, same rows with the module or without.

    (aiokafka's MemoryRecords reads one format per record set, so v1 and v2 do not mix.)
    """
    from aiokafka.record.legacy_records import LegacyRecordBatchBuilder

    legacy = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    for i in range(3):
        legacy.append(i, 1_700_000_000_000 + i, b"k", b"legacy %d" % i)
    data = bytes(legacy.build())
    chunk = chunk_of(data)
    assert [chunk.raw_span(i) for i in range(3)] == [None, None, None]
    batch = assert_same(data, monkeypatch, [100])
    assert batch.column("value").to_pylist() == [b"legacy %d" % i for i in range(3)]


@pytest.mark.parametrize("cut", [0, 10, 60, 61, 62, 100])
def test_truncated_batch(cut: int) -> None:
    data = good()[: -1 - cut]
    with pytest.raises(native.DecodeError, match=r"events-3 at offset (500|\?)"):
        decode(data, check_crc=False)


def test_truncated_records_behind_a_consistent_length() -> None:
    data = bytearray(good())
    del data[-5:]
    struct.pack_into(">i", data, 8, len(data) - 12)
    with pytest.raises(native.DecodeError, match=r"truncated|declares"):
        decode(fix_crc(data))


def test_bad_varint() -> None:
    data = bytearray(good())
    data[61:71] = b"\xff" * 10  # the first record's length: no end byte
    with pytest.raises(native.DecodeError, match=r"bad varint \(record length\)"):
        decode(fix_crc(data))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_bad_compression_payload(codec: str) -> None:
    data = bytearray(good(CODECS[codec]))
    for i in range(61, len(data), 3):
        data[i] ^= 0x5A
    with pytest.raises(native.DecodeError, match=f"events-3 at offset 500: .*{codec}|truncated"):
        decode(fix_crc(data))


def test_unknown_codec() -> None:
    data = bytearray(good())
    struct.pack_into(">h", data, ATTR_POS, 6)
    with pytest.raises(native.DecodeError, match="unknown compression codec 6"):
        decode(fix_crc(data))


def test_a_failed_batch_leaves_nothing_behind() -> None:
    dec = native.BatchDecoder()
    ok = good()
    assert dec.add_batch(ok, 0, len(ok), "t", 0) == 20
    bad = bytearray(good())
    bad[-3:] = b"\xff\xff\xff"
    with pytest.raises(native.DecodeError):
        dec.add_batch(fix_crc(bad), 0, len(bad), "u", 0)
    assert len(dec) == 20
    cols = dec.finish()
    assert cols["topics"] == ["t"]
    from aiogroup._fetch.native import record_batch

    batch = record_batch(cols, arrow_schema())
    batch.validate(full=True)
    assert batch.num_rows == 20


def test_range_outside_the_data() -> None:
    dec = native.BatchDecoder()
    with pytest.raises(native.DecodeError, match="outside"):
        dec.add_batch(b"abc", 0, 10, "t", 0)


@pytest.mark.parametrize("seed", range(30))
def test_random_corruption_never_crashes(seed: int) -> None:
    """Flipped bytes give a DecodeError or a batch that validates; never a crash."""
    rng = random.Random(seed)
    data = bytearray(good(rng.choice([0, 0, 1, 2, 3, 4])))
    for _ in range(rng.randrange(1, 6)):
        data[rng.randrange(61, len(data))] = rng.randrange(256)
    dec = native.BatchDecoder()
    try:
        dec.add_batch(fix_crc(data), 0, len(data), "t", 0)
    except native.DecodeError:
        return
    from aiogroup._fetch.native import record_batch

    record_batch(dec.finish(), arrow_schema()).validate(full=True)


def test_other_threads_run_while_a_batch_is_decoded() -> None:
    """The GIL is released around a batch's decode.

    The source's reader builds the next Arrow batch on its loop thread while the
    worker's main thread writes the previous one to Spark; ``ingest()`` decodes on
    its loop while another thread hands a batch to Spark.  A decoder that kept the
    GIL would stall those threads for the whole batch.  Another thread's timestamps
    can only fall well inside the call when the GIL was free during it (with the GIL
    held it runs at most up to a switch interval after either edge of the call).
    """
    import sys
    import threading
    import time

    data = build(0, [(i, 0, None, b"v" * 4096, []) for i in range(20_000)], CODECS["zstd"])
    margin = 4 * sys.getswitchinterval()
    stamps: list[float] = []
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            stamps.append(time.perf_counter())

    spinner = threading.Thread(target=spin)
    spinner.start()
    inside = 0
    windows = []
    try:
        for _ in range(5):
            dec = native.BatchDecoder()
            t0 = time.perf_counter()
            dec.add_batch(data, 0, len(data), "t", 0)
            t1 = time.perf_counter()
            windows.append(t1 - t0)
            inside += sum(1 for s in stamps if t0 + margin < s < t1 - margin)
            stamps.clear()
            del dec
    finally:
        stop.set()
        spinner.join()
    assert max(windows) > 3 * margin, f"the batch decodes too fast to tell: {windows}"
    assert inside > 0, f"no other thread ran during {len(windows)} decodes of {windows} s"


# -- LZ4 frames: the fast path (independent blocks) and what it leaves to FrameDecoder ------

_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 (the LZ4 frame format's checksum), from its specification."""
    n, i = len(data), 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed, (seed - _P1) & _M32]
        while i + 16 <= n:
            for k in range(4):
                lane = int.from_bytes(data[i : i + 4], "little")
                v[k] = (_rotl((v[k] + lane * _P2) & _M32, 13) * _P1) & _M32
                i += 4
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        h = (_rotl((h + int.from_bytes(data[i : i + 4], "little") * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    return h ^ (h >> 16)


def lz4_frame(
    content: bytes,
    *,
    block: int = 64 << 10,
    block_sums: bool = False,
    content_sum: bool = False,
    sized: bool = False,
    independent: bool = True,
    raw_every: int = 0,
) -> bytes:
    """An LZ4 frame of ``content``; every ``raw_every``-th block stored uncompressed."""
    import cramjam

    flg = 0x40 | (0x20 if independent else 0) | (0x10 if block_sums else 0)
    flg |= (0x08 if sized else 0) | (0x04 if content_sum else 0)
    bd = {64 << 10: 4, 256 << 10: 5, 1 << 20: 6, 4 << 20: 7}[block] << 4
    descriptor = bytes([flg, bd]) + (struct.pack("<Q", len(content)) if sized else b"")
    out = bytearray(struct.pack("<I", 0x184D2204) + descriptor)
    out.append((xxh32(descriptor) >> 8) & 0xFF)
    for n, at in enumerate(range(0, len(content), block)):
        part = content[at : at + block]
        packed = bytes(cramjam.lz4.compress_block(part, store_size=False))
        if raw_every and n % raw_every == 0:
            out += struct.pack("<I", len(part) | 0x80000000) + part
            stored = part
        else:
            out += struct.pack("<I", len(packed)) + packed
            stored = packed
        if block_sums:
            out += struct.pack("<I", xxh32(stored))
    out += b"\0\0\0\0"
    if content_sum:
        out += struct.pack("<I", xxh32(content))
    return bytes(out)


def with_lz4_records(frame_of: Any, n: int = 400, size: int = 1000) -> tuple[bytes, list[bytes]]:
    """A batch of ``n`` records whose records section is ``frame_of(records section)``."""
    values = [b"%06d" % i + b"v" * (size - 6) for i in range(n)]
    plain = bytearray(
        build(700, [(i, 1_700_000_000_000 + i, b"k%d" % i, v, []) for i, v in enumerate(values)])
    )
    records = bytes(plain[61:])
    struct.pack_into(">h", plain, ATTR_POS, 3)  # lz4
    data = plain[:61] + frame_of(records)
    struct.pack_into(">i", data, 8, len(data) - 12)
    return fix_crc(data), values


def test_xxh32_helper_agrees_with_a_real_lz4_frame() -> None:
    """The test's own XXH32 checks out against the frame cramjam writes (block checksums)."""
    import cramjam

    content = bytes(range(256)) * 700
    c = cramjam.lz4.Compressor(content_checksum=True, block_linked=False)
    c.compress(content)
    frame = bytes(c.finish())
    flg = frame[4]
    assert flg & 0x04 and flg & 0x10  # this cramjam writes both checksums
    assert frame[6] == (xxh32(frame[4:6]) >> 8) & 0xFF
    assert struct.unpack("<I", frame[-4:])[0] == xxh32(content)


@pytest.mark.parametrize(
    "shape",
    [
        {},  # the Java producer's: independent 64 KiB blocks, no checksums
        {"block_sums": True},  # aiokafka's (cramjam)
        {"block_sums": True, "content_sum": True, "sized": True},
        {"block": 256 << 10, "raw_every": 2},
        {"block": 1 << 20, "sized": True},
        {"block": 4 << 20},
        {"independent": False},  # linked blocks: left to FrameDecoder
    ],
    ids=repr,
)
def test_lz4_frame_shapes_decode_to_the_records(
    shape: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, values = with_lz4_records(lambda records: lz4_frame(records, **shape))
    batch = assert_same(data, monkeypatch)
    assert batch.column("value").to_pylist() == values


def test_two_lz4_frames_back_to_back_are_left_to_frame_decoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def two(records: bytes) -> bytes:
        return lz4_frame(records[:5000]) + lz4_frame(records[5000:])

    data, values = with_lz4_records(two, n=50)
    assert assert_same(data, monkeypatch).column("value").to_pylist() == values


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("block_sum", "block checksum mismatch"),
        ("content_sum", "content checksum mismatch"),
        ("descriptor", "frame descriptor checksum mismatch"),
        ("block_size", "a block of 2147483647 bytes|truncated"),
        ("content_size", "the frame declares"),
    ],
)
def test_damaged_lz4_frames_are_named(damage: str, problem: str) -> None:
    def damaged(records: bytes) -> bytes:
        frame = bytearray(lz4_frame(records, block_sums=True, content_sum=True, sized=True))
        first_size = 7 + 8
        if damage == "block_sum":
            n = struct.unpack_from("<I", frame, first_size)[0] & 0x7FFFFFFF
            frame[first_size + 4 + n] ^= 1
        elif damage == "content_sum":
            frame[-1] ^= 1
        elif damage == "descriptor":
            frame[4] ^= 0x08  # the content-size flag, under the header checksum
        elif damage == "block_size":
            struct.pack_into("<I", frame, first_size, 0x7FFFFFFF)
        elif damage == "content_size":
            struct.pack_into("<Q", frame, 6, len(records) + 1)
            frame[14] = (xxh32(bytes(frame[4:14])) >> 8) & 0xFF
        return bytes(frame)

    data, _ = with_lz4_records(damaged)
    # check_crc=False: the frame's own checks must catch it (the batch CRC was refitted anyway)
    with pytest.raises(
        native.DecodeError, match=f"events-3 at offset 700: bad lz4 payload: ({problem})"
    ):
        decode(data, check_crc=False)


def test_recycled_value_buffers_never_touch_live_batches() -> None:
    """Value buffers are recycled once pyarrow lets go of them, never before.

    Chunks of 2 MiB of values (the pool keeps buffers of 1-64 MiB): some are kept alive
    while many more are decoded after them, and must keep their bytes.
    """
    from aiogroup._fetch.native import record_batch

    def chunk(i: int) -> Any:
        dec = native.BatchDecoder()
        rows = [(j, 0, None, bytes([i % 251]) * 4096, []) for j in range(512)]
        data = build(i * 512, rows, CODECS["lz4"])
        dec.add_batch(data, 0, len(data), "t", 0)
        return record_batch(dec.finish(), arrow_schema())

    kept = {i: chunk(i) for i in range(0, 60, 7)}
    for i in range(60):
        c = chunk(i)
        assert c.column("value")[511].as_py() == bytes([i % 251]) * 4096
        if i % 5 == 0:
            kept[1000 + i] = c
        del c
    for i, c in kept.items():
        want = bytes([(i if i < 1000 else i - 1000) % 251]) * 4096
        values = c.column("value")
        assert values[0].as_py() == want and values[511].as_py() == want, i
        c.validate(full=True)


def test_a_read_that_finds_nothing_leaves_the_pool_alone() -> None:
    """Decoders made and dropped without a record (idle polls) take no pooled buffer;
    the next batch with records reuses one that a released RecordBatch gave back."""
    from aiogroup._fetch.native import record_batch

    def chunk() -> Any:
        dec = native.BatchDecoder()
        rows = [(j, 0, None, b"v" * 4096, []) for j in range(512)]
        data = build(0, rows)
        dec.add_batch(data, 0, len(data), "t", 0)
        return record_batch(dec.finish(), arrow_schema())

    batch = chunk()
    before = native._pooled_bytes()
    del batch  # pyarrow lets go of the values: the 2 MiB buffer goes to the pool
    released = native._pooled_bytes()
    assert released > before
    for _ in range(20):
        native.BatchDecoder()  # created and dropped, nothing decoded
        native.BatchDecoder().finish()
    assert native._pooled_bytes() == released
    kept = chunk()
    assert native._pooled_bytes() < released  # taken by the batch with records
    assert kept.column("value")[0].as_py() == b"v" * 4096
