"""lz4 and zstd batches in every shape producers write: native and pure paths agree.

The native module decodes lz4 frames block by block with liblz4 (``native/src/lz4_frame.rs``)
and zstd frames in one call with a reused context (``native/src/zstd_frame.rs``); anything
else (linked lz4 blocks, several frames) takes lz4_flex's or zstd's streaming decoder.
aiokafka's builder writes one shape of each, so here the records section of a batch is
compressed by hand in the shapes Kafka's producers write (librdkafka: independent lz4
blocks of 64 KiB, zstd without a content size; the Java client's lz4 stream; zstd with
a content size and a checksum; frames of many blocks) and the shapes the fast paths hand
on, and both read paths must give the same records.  A damaged frame (its batch CRC made
right again, so only the codec can notice) must fail on both paths alike, with a clear
``DecodeError`` from the native module and no record delivered.
"""

from __future__ import annotations

import io
import random
import struct
from typing import Any

import lz4.frame
import pytest
import zstandard
from aiokafka.record.util import decode_varint
from hypothesis import example, given, settings
from hypothesis import strategies as st

from aiogroup._fetch.walker import RecordSink, walk
from aiogroup.structs import ConsumerRecord
from tests.unit.test_native_records import (
    TP,
    assert_same,
    build,
    chunk_of,
    fix_crc,
    native,
    offsets,
    random_records,
)

ATTR_POS = 21
HEADER_LEN = 61
LZ4, ZSTD = 3, 4


def recompress(plain_batch: bytes, codec: int, records: bytes) -> bytes:
    """``plain_batch`` (uncompressed) with ``records`` as its records section and ``codec``."""
    data = bytearray(plain_batch[:HEADER_LEN]) + records
    struct.pack_into(">i", data, 8, len(data) - 12)
    attrs = struct.unpack_from(">h", data, ATTR_POS)[0] & ~0x07 | codec
    struct.pack_into(">h", data, ATTR_POS, attrs)
    return fix_crc(data)


def lz4_frame(raw: bytes, **kw: Any) -> bytes:
    kw.setdefault("block_linked", False)
    kw.setdefault("block_size", lz4.frame.BLOCKSIZE_MAX64KB)
    return bytes(lz4.frame.compress(raw, **kw))


def _streamed(cctx: zstandard.ZstdCompressor, raw: bytes) -> bytes:
    """A streaming compressor that was not told the length: no content size (librdkafka)."""
    obj = cctx.compressobj()
    return obj.compress(raw) + obj.flush()


def zstd_frame(raw: bytes, *, content_size: bool, checksum: bool = False) -> bytes:
    cctx = zstandard.ZstdCompressor(
        level=3, write_content_size=content_size, write_checksum=checksum
    )
    return cctx.compress(raw) if content_size else _streamed(cctx, raw)


SHAPES: dict[str, tuple[int, Any]] = {
    "lz4 librdkafka (independent 64 KiB blocks)": (LZ4, lz4_frame),
    "lz4 block+content checksums, sized": (
        LZ4,
        lambda raw: lz4_frame(raw, block_checksum=True, content_checksum=True, store_size=True),
    ),
    "lz4 256 KiB blocks": (
        LZ4,
        lambda raw: lz4_frame(raw, block_size=lz4.frame.BLOCKSIZE_MAX256KB),
    ),
    "lz4 linked blocks (lz4_flex's FrameDecoder)": (
        LZ4,
        lambda raw: lz4_frame(raw, block_linked=True),
    ),
    "lz4 incompressible blocks stored raw": (LZ4, lz4_frame),
    "zstd unsized (librdkafka)": (ZSTD, lambda raw: _streamed(zstandard.ZstdCompressor(), raw)),
    "zstd sized": (ZSTD, lambda raw: zstd_frame(raw, content_size=True)),
    "zstd sized, checksum": (
        ZSTD,
        lambda raw: zstd_frame(raw, content_size=True, checksum=True),
    ),
    "zstd two frames": (
        ZSTD,
        lambda raw: (
            zstd_frame(raw[: len(raw) // 3], content_size=True)
            + _streamed(zstandard.ZstdCompressor(), raw[len(raw) // 3 :])
        ),
    ),
}


def text_records(n: int, seed: int) -> list[Any]:
    """100 B JSON-like values (the benchmark's), which compress about 4 times."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        value = (f'{{"user":"user-{rng.randrange(10_000):05d}","seq":{i}}}'.encode() + b" " * 100)[
            :100
        ]
        out.append((i, 1_700_000_000_000 + i, None, value, []))
    return out


def batch_in(shape: str, recs: list[Any], base: int = 0) -> bytes:
    codec, compress = SHAPES[shape]
    plain = build(base, recs)
    return recompress(plain, codec, compress(plain[HEADER_LEN:]))


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("n", [1, 700, 3000])
def test_every_frame_shape_gives_the_pure_paths_records(
    shape: str, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 3000 records of ~110 B: frames of several 64 KiB blocks
    recs = (
        random_records(random.Random(n), n)
        if "incompressible" in shape
        else text_records(n, seed=n)
    )
    data = batch_in(shape, recs, base=40) + batch_in(shape, recs[:5], base=40 + n)
    steps = assert_same(data, monkeypatch, limits=[n // 2 + 1, 1 << 30])
    assert offsets(steps) == list(range(40, 40 + n + min(n, 5)))


def test_the_fast_paths_handle_what_kafka_producers_write() -> None:
    """No silent fall-back on the common shapes: the frames carry what they should."""
    raw = build(0, text_records(2000, 1))[HEADER_LEN:]
    librdkafka_lz4 = lz4_frame(raw)
    flg = librdkafka_lz4[4]
    assert flg & 0x20 and not flg & 0x10 and not flg & 0x04  # independent, no checksums
    unsized = _streamed(zstandard.ZstdCompressor(), raw)
    assert zstandard.frame_content_size(unsized) == -1
    for frame, codec in ((librdkafka_lz4, LZ4), (unsized, ZSTD)):
        data = recompress(build(0, text_records(2000, 1)), codec, frame)
        recs, stopped = native.consumer_records(
            data, 0, len(data), ConsumerRecord, {"topic": TP.topic, "partition": TP.partition}
        )
        assert not stopped and [r.offset for r in recs] == list(range(2000))
        assert recs[7].value == text_records(2000, 1)[7][3]


def _errors(data: bytes, monkeypatch: pytest.MonkeyPatch) -> list[tuple[type, str]]:
    """Each path's error on ``data``; asserts nothing was delivered."""
    errors = []
    for native_on in (False, True):
        monkeypatch.setenv("AIOGROUP_NATIVE", "1" if native_on else "0")
        sink = RecordSink(None, None)
        chunk = chunk_of(data)
        with pytest.raises(Exception) as info:
            walk(chunk, 1 << 30, sink)
        errors.append((type(info.value), str(info.value)))
        assert sink.result.get(TP, []) == []
        assert chunk.next_offset == 0
    return errors


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ("lz4 librdkafka (independent 64 KiB blocks)", r"bad lz4 payload: "),
        ("zstd unsized (librdkafka)", r"bad zstd payload: "),
        ("zstd sized, checksum", r"bad zstd payload: "),
    ],
)
def test_a_damaged_frame_is_a_clear_error_on_both_paths(
    shape: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = batch_in(shape, text_records(500, 3), base=0)
    # A token's length or a block's sequence wrecked in the middle of the frame.
    bad = bytearray(good)
    middle = HEADER_LEN + (len(good) - HEADER_LEN) // 2
    bad[middle : middle + 8] = b"\xff" * 8
    data = fix_crc(bad)
    errors = _errors(data, monkeypatch)
    assert errors[0] == errors[1]
    with pytest.raises(native.DecodeError, match=rf"events-3 at offset 0: {message}"):
        native.consumer_records(
            data, 0, len(data), ConsumerRecord, {"topic": TP.topic, "partition": TP.partition}
        )


@settings(max_examples=60, deadline=None)
@given(
    shape=st.sampled_from(sorted(SHAPES)),
    n=st.integers(1, 300),
    at=st.floats(0, 1, exclude_max=True),
    flip=st.integers(1, 255),
)
@example(shape="lz4 256 KiB blocks", n=217, at=0.005859375, flip=128)  # a record's attributes
@example(shape="lz4 256 KiB blocks", n=71, at=0.005859375, flip=128)
def test_any_damage_to_a_frame_reads_alike_on_both_paths(
    shape: str, n: int, at: float, flip: int
) -> None:
    """Either both paths give the same records, or both fail alike with nothing delivered."""
    good = batch_in(shape, text_records(n, n))
    bad = bytearray(good)
    bad[HEADER_LEN + int(at * (len(good) - HEADER_LEN))] ^= flip
    data = fix_crc(bad)
    with pytest.MonkeyPatch.context() as monkeypatch:
        try:
            steps = assert_same(data, monkeypatch)
        except AssertionError:
            raise
        except Exception:
            raw = _decompressed(data)
            if raw is not None and _high_bit_attributes(raw):
                # A record's attributes are an Int8 (unused): the native reader reads the
                # byte, as Kafka's Java client does; aiokafka's pure reader reads a varint
                # there and misparses the rest.  The native records must be those of the
                # same payload with the byte's high bit cleared.
                # Where the damage also wrecked the records, both fail (the messages may
                # differ: the cleared byte can be one a wrecked length points into).
                masked = recompress(data, 0, _high_bit_attributes(raw, clear=True))
                expected = _read(masked, monkeypatch, native_on=False)
                got = _read(data, monkeypatch, native_on=True)
                if isinstance(expected, list):
                    assert got == expected
                else:
                    assert isinstance(got, tuple), "native delivered what the payload cannot hold"
                return
            errors = _errors(data, monkeypatch)
            assert errors[0] == errors[1]
        else:
            assert len(offsets(steps)) == n


def _decompressed(batch: bytes) -> bytes | None:
    """The records section of a compressed batch, decompressed (None: it does not)."""
    frame = batch[HEADER_LEN:]
    try:
        if struct.unpack_from(">h", batch, ATTR_POS)[0] & 0x07 == LZ4:
            return bytes(lz4.frame.decompress(frame))
        reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(frame), read_across_frames=True
        )
        return bytes(reader.read())
    except Exception:
        return None


def _high_bit_attributes(raw: bytes, *, clear: bool = False) -> Any:
    """Does a record of ``raw`` have its attributes byte's high bit set (the records hopped
    by their lengths)?  With ``clear``: ``raw`` with those bits cleared."""
    out, pos, found = bytearray(raw), 0, False
    try:
        while pos < len(raw):
            length, start = decode_varint(raw, pos)
            if length <= 0:
                break  # damaged: no record to hop
            if raw[start] & 0x80:
                found = True
                out[start] &= 0x7F
            pos = start + length
    except (IndexError, ValueError):
        pass
    return bytes(out) if clear else found


def _read(data: bytes, monkeypatch: pytest.MonkeyPatch, *, native_on: bool) -> Any:
    """What one path makes of ``data``: its records, or its error (type and message)."""
    monkeypatch.setenv("AIOGROUP_NATIVE", "1" if native_on else "0")
    sink = RecordSink(None, None)
    try:
        walk(chunk_of(data), 1 << 30, sink)
    except Exception as exc:
        return type(exc), str(exc)
    return [
        (r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in sink.result.get(TP, [])
    ]
