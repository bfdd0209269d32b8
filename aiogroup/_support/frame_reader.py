"""A connection reader whose large frames cost one copy, not four.

Why: aiokafka's connection reads each response with ``StreamReader.readexactly(size)``.
The stream reader appends every chunk the socket gives to one ``bytearray`` (a copy),
grows it by an eighth at a time (``realloc``: more copies, and fresh pages the kernel
must zero), and ``readexactly`` then slices it (CPython 3.11: ``bytes(buffer[:n])``,
two more copies).  A Fetch response of several MiB thus crosses memory four or five
times before aiokafka parses it; with 1 KiB records that was a fifth of a drain's CPU
(perf and callgrind, docs/benchmarks/profile.md, *Copies of a Fetch response*).

``FrameReader`` changes one thing: while ``readexactly`` waits for a frame of at least
``LARGE`` bytes, the chunks the transport hands over are kept as they are (``bytes``,
immutable) and joined once when the frame is complete - one copy, none when the whole
frame came in one chunk.  Small reads (the 4-byte size prefix, small responses) and
everything after the frame's last byte go through the stream reader unchanged, and so
do end of stream and a connection error (``IncompleteReadError``, the exception).
The transport is not paused while a frame is gathered: the caller asked for all of it,
and the fetcher's memory budget already reserved its size.

It is installed by changing the class of the reader aiokafka created
(``install_frame_reader``): aiokafka is not forked, its reader task keeps calling the
same object, and where the stream reader's internals differ from what this relies on
(another Python, another aiokafka) nothing is installed and the connection reads as
before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, SupportsIndex

__all__ = ["LARGE", "FrameReader", "install_frame_reader"]

#: Reads of at least this many bytes gather chunks instead of growing the buffer.
LARGE = 64 * 1024

#: What ``FrameReader`` uses of ``asyncio.StreamReader``'s internals (checked at install).
_INTERNALS = ("_buffer", "_eof", "_exception", "_wait_for_data", "_wakeup_waiter")


class FrameReader(asyncio.StreamReader):
    """``asyncio.StreamReader`` that gathers a large ``readexactly`` without a growing buffer.

    ``_gather`` is the list of a large read's chunks while one is waiting, else None;
    ``_need`` the bytes still missing from it.
    """

    _gather: list[bytes] | None = None
    _need = 0

    def feed_data(self, data: Iterable[SupportsIndex]) -> None:
        chunks = self._gather
        if chunks is None or not data:
            super().feed_data(data)
            return
        # A transport's reusable buffer (not bytes) is copied, never kept.
        data = data if type(data) is bytes else bytes(data)
        need = self._need
        if len(data) <= need:
            chunks.append(data)
            self._need = need - len(data)
        else:  # the frame ends inside this chunk: the rest is the next frame's
            chunks.append(data[:need])
            self._need = 0
            self._gather = None
            super().feed_data(data[need:])  # wakes the waiter too
            return
        if self._need == 0:
            self._gather = None
        self._wakeup_waiter()  # type: ignore[attr-defined]

    async def readexactly(self, n: int) -> bytes:
        buf: bytearray = self._buffer  # type: ignore[attr-defined]
        if (
            n < LARGE
            or len(buf) >= n
            or self._gather is not None
            or self._exception is not None  # type: ignore[attr-defined]
            or self._eof  # type: ignore[attr-defined]
        ):
            return await super().readexactly(n)
        chunks: list[bytes] = []
        if buf:
            chunks.append(bytes(buf))
            buf.clear()
        self._need = n - sum(map(len, chunks))
        self._gather = chunks
        try:
            while self._gather is not None:
                if self._eof:  # type: ignore[attr-defined]
                    raise asyncio.IncompleteReadError(b"".join(chunks), n)
                await self._wait_for_data("readexactly")  # type: ignore[attr-defined]
        finally:
            if self._gather is not None:  # cancelled or failed: later data is buffered
                self._gather = None
                self._need = 0
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def install_frame_reader(connection: Any) -> bool:
    """Make ``connection``'s reader a ``FrameReader``; whether it is one now.

    ``connection``: an aiokafka ``AIOKafkaConnection`` (its ``_reader``).  Only a plain
    ``asyncio.StreamReader`` with the internals this module uses is changed.
    """
    reader = getattr(connection, "_reader", None)
    if type(reader) is FrameReader:
        return True
    if type(reader) is not asyncio.StreamReader:
        return False
    if not all(hasattr(reader, name) for name in _INTERNALS):
        return False
    reader.__class__ = FrameReader
    return True
