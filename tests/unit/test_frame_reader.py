"""The frame reader: a large ``readexactly`` gathered from chunks gives the same bytes.

A ``FrameReader`` is fed the way a transport feeds it (``feed_data`` chunks, then
``feed_eof`` or ``set_exception``); every split of a stream of frames must read back
exactly as a plain ``asyncio.StreamReader`` reads it.
"""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace

import pytest

from aiogroup._support.frame_reader import LARGE, FrameReader, install_frame_reader


def _frames(sizes: list[int], seed: int = 0) -> list[bytes]:
    rnd = random.Random(seed)
    return [rnd.randbytes(n) for n in sizes]


def _stream(frames: list[bytes]) -> bytes:
    return b"".join(len(f).to_bytes(4, "big") + f for f in frames)


async def _read_all(reader: asyncio.StreamReader, count: int) -> list[bytes]:
    """What aiokafka's reader task does: a 4-byte size, then the frame."""
    out = []
    for _ in range(count):
        size = int.from_bytes(await reader.readexactly(4), "big")
        out.append(await reader.readexactly(size))
    return out


async def _feed(reader: asyncio.StreamReader, data: bytes, cuts: list[int]) -> None:
    pos = 0
    for cut in [*cuts, len(data)]:
        if cut > pos:
            reader.feed_data(data[pos:cut])
            pos = cut
            await asyncio.sleep(0)  # let the reading task run between chunks


@pytest.mark.parametrize("seed", range(8))
async def test_every_split_reads_the_same_frames(seed: int) -> None:
    rnd = random.Random(seed)
    frames = _frames([10, LARGE + 7, 3 * LARGE, 5, LARGE, 2 * LARGE + 1], seed)
    data = _stream(frames)
    cuts = sorted(rnd.sample(range(1, len(data)), 40))
    reader = FrameReader()
    task = asyncio.ensure_future(_read_all(reader, len(frames)))
    await _feed(reader, data, cuts)
    assert await task == frames


async def test_a_chunk_holding_a_frame_end_and_the_next_frame_start() -> None:
    frames = _frames([2 * LARGE, LARGE + 3, 4])
    data = _stream(frames)
    first_end = 4 + 2 * LARGE
    reader = FrameReader()
    task = asyncio.ensure_future(_read_all(reader, 3))
    # One chunk carries the first frame's tail, the whole second frame and part of the third.
    await _feed(reader, data, [100, first_end - 10, len(data) - 2])
    assert await task == frames


async def test_a_large_frame_already_buffered_reads_without_gathering() -> None:
    frames = _frames([LARGE * 2])
    reader = FrameReader()
    reader.feed_data(_stream(frames))
    assert await _read_all(reader, 1) == frames


async def test_one_chunk_is_handed_over_without_a_copy() -> None:
    frame = _frames([LARGE * 2])[0]
    reader = FrameReader()
    task = asyncio.ensure_future(reader.readexactly(len(frame)))
    await asyncio.sleep(0)
    reader.feed_data(frame)
    assert await task is frame


async def test_end_of_stream_inside_a_frame_raises_with_the_partial_bytes() -> None:
    frame = _frames([LARGE * 3])[0]
    reader = FrameReader()
    task = asyncio.ensure_future(reader.readexactly(len(frame)))
    await _feed(reader, frame[:1000], [])
    await _feed(reader, frame[1000:LARGE], [])
    reader.feed_eof()
    with pytest.raises(asyncio.IncompleteReadError) as err:
        await task
    assert err.value.partial == frame[:LARGE]
    assert err.value.expected == len(frame)


async def test_a_connection_error_inside_a_frame_is_raised() -> None:
    reader = FrameReader()
    task = asyncio.ensure_future(reader.readexactly(LARGE * 2))
    await _feed(reader, b"x" * 100, [])
    reader.set_exception(ConnectionResetError("gone"))
    with pytest.raises(ConnectionResetError, match="gone"):
        await task


async def test_a_mutable_chunk_is_copied_not_kept() -> None:
    reader = FrameReader()
    task = asyncio.ensure_future(reader.readexactly(LARGE + 4))
    await asyncio.sleep(0)
    chunk = bytearray(b"a" * LARGE)
    reader.feed_data(chunk)  # type: ignore[arg-type]
    chunk[:] = b"b" * LARGE  # a transport reusing its buffer
    reader.feed_data(b"cccc")
    assert await task == b"a" * LARGE + b"cccc"


async def test_a_cancelled_read_leaves_later_data_to_the_buffer() -> None:
    reader = FrameReader()
    task = asyncio.ensure_future(reader.readexactly(LARGE * 2))
    await _feed(reader, b"x" * 10, [])
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    reader.feed_data(b"abcd")
    assert await reader.readexactly(4) == b"abcd"


async def test_install_changes_a_plain_stream_reader_only() -> None:
    plain = SimpleNamespace(_reader=asyncio.StreamReader())
    assert install_frame_reader(plain)
    assert type(plain._reader) is FrameReader
    assert install_frame_reader(plain)  # already one: still one

    class Other(asyncio.StreamReader):
        pass

    assert not install_frame_reader(SimpleNamespace(_reader=Other()))
    assert not install_frame_reader(SimpleNamespace(_reader=None))
    assert not install_frame_reader(object())
