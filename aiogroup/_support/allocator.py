"""The C allocator under the fetcher's copies: keep freed pages, give them back at the bound.

Why: a Fetch response crosses memory as large blocks - the socket's chunks, the frame
joined from them, the record set aiokafka copies out of it - each MiBs, freed a moment
later.  glibc serves a block above its mmap threshold (128 KiB at first, raised at run
time to the largest block freed, at most 32 MiB) with a fresh mapping and unmaps it on
free, and gives the top of its heap back to the kernel whenever more than its trim
threshold (twice the mmap threshold) is free there.  Either way the next response lands
on pages the kernel must map and zero again: on Tansu, whose responses are 5-6 MB of
varying size, a 1 KiB drain of 250,000 records took 173,000 page faults and about as
much system CPU as user CPU (``benchmarks/fetch_shape.py``; docs/benchmarks/profile.md,
*The 1 KiB path on Tansu*).  With both thresholds fixed high, the heap keeps its freed
pages and the next response reuses them: the same drain's CPU fell from 0.85 to 0.41-0.50
s, the peers' figure.

``keep_freed_pages()`` fixes them (``mallopt``: mmap threshold 32 MiB, trim threshold
64 MiB) once per process - **only where the application asked for it** with
``AIOGROUP_MALLOC_TUNE=1``, and even then not where it already chose (glibc's
``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` / ``MALLOC_TOP_PAD_`` or
``GLIBC_TUNABLES`` in the environment).  These are process-wide settings: every large
block of the process then comes from the heap, the application's own included, which a
library should not decide behind its user's back (no other Kafka client does); on Apache
Kafka, whose responses are larger and steadier, the gain was a tenth, not a half.

Kept pages (by these thresholds or glibc's own adaptive ones) are memory that
``max_buffered_bytes`` is stated against (RSS), so after each response the fetcher
compares what it holds plus the heap's free bytes (``free_heap_bytes``, glibc's
``mallinfo2``) with the bound, and past it calls ``trim()`` - glibc's
``malloc_trim(0)``, which releases every free page of every arena and changes no setting
(about a tenth of a millisecond on a heap of tens of MiB; ``AIOGROUP_MALLOC_TRIM=0``
turns it off).  A drain far from its bound keeps its pages; one at its bound (the
application slower than the broker) gives them back, as before.

Outside glibc (musl, macOS, Windows) both do nothing and say so (False).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "free_heap_bytes", "keep_freed_pages", "trim"]

#: Blocks below this come from the heap: above any Fetch response the defaults ask
#: for (``fetch_max_bytes`` 50 MiB is the response's, a frame rarely near it), and
#: glibc's largest allowed value on 64-bit.
MMAP_THRESHOLD = 32 * 1024 * 1024
#: The heap keeps up to this much free at its top (``max_buffered_bytes``' default).
TRIM_THRESHOLD = 64 * 1024 * 1024

#: mallopt parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: The application's own choice, which is left alone.
_GLIBC_TUNABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

_libc: Any = None
_loaded = False
_tuned: bool | None = None


def _glibc() -> Any:
    """glibc through ctypes, or None (another C library, or no ``malloc_trim``)."""
    global _libc, _loaded
    if not _loaded:
        _loaded = True
        name = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(name) if name else None
            if libc is not None:
                libc.malloc_trim.argtypes = [ctypes.c_size_t]
                libc.malloc_trim.restype = ctypes.c_int
                libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
                libc.mallopt.restype = ctypes.c_int
        except (OSError, AttributeError):  # not glibc: nothing to call
            libc = None
        _libc = libc
    return _libc


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33+): sizes as ``size_t``."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def free_heap_bytes() -> int | None:
    """Bytes free inside glibc's arenas (still mapped: RSS counts the touched ones), or None.

    ``mallinfo2()`` (glibc 2.33+), under a microsecond here.  None without it.
    """
    libc = _glibc()
    fn = None if libc is None else getattr(libc, "mallinfo2", None)
    if fn is None:
        return None
    fn.restype = _MallInfo2
    info = fn()
    return int(info.fordblks)


def trim() -> bool:
    """Release the allocator's free pages to the kernel; whether there was a way to."""
    if os.environ.get("AIOGROUP_MALLOC_TRIM", "1") == "0":
        return False
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


def keep_freed_pages() -> bool:
    """Fix glibc's mmap and trim thresholds high, once, where ``AIOGROUP_MALLOC_TUNE=1``;
    whether they are set by us."""
    global _tuned
    if _tuned is None:
        _tuned = False
        if os.environ.get("AIOGROUP_MALLOC_TUNE", "0") != "1":
            return False  # opt-in: a process-wide setting is the application's call
        if any(name in os.environ for name in _GLIBC_TUNABLES):
            return False
        if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
            return False
        libc = _glibc()
        if libc is None:
            return False
        _tuned = bool(
            libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
            and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        )
    return _tuned
