"""Give the C allocator's freed pages back to the kernel, where the C library can.

Why: the fetcher keeps what it *holds* within ``max_buffered_bytes`` (its count of
chunks, reservations, the connection's last frame and decoded leftovers matches
tracemalloc's count of live bytes, docs/benchmarks/profile.md), but the process's RSS
also counts memory the C allocator kept after the transient copies of a response were
freed: glibc raises its mmap threshold at the first free of a large block, so every
later response copy (MiBs) comes from the heap, and freed heap pages stay mapped
between the record sets still buffered.  Measured in the memory scenario's worker
(Tansu, 1,000,000 x 100 B, 64 MiB bound): buffer growth 62.6 and 68.0 MiB in two runs,
63.1 and 63.3 MiB after a ``malloc_trim(0)``.

``trim()`` calls glibc's ``malloc_trim(0)``, which releases every free page of every
arena (``MADV_DONTNEED``) and changes no allocator setting: it is an action, not a
process-wide option, and costs about a tenth of a millisecond on a heap of tens of
MiB.  Elsewhere (musl, macOS, Windows) it does nothing and says so (False).
``AIOGROUP_MALLOC_TRIM=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable

__all__ = ["trim"]

_trim: Callable[[int], int] | None = None
_loaded = False


def _load() -> Callable[[int], int] | None:
    global _trim, _loaded
    if not _loaded:
        _loaded = True
        if os.environ.get("AIOGROUP_MALLOC_TRIM", "1") == "0":
            return None
        name = ctypes.util.find_library("c")
        try:
            fn = ctypes.CDLL(name).malloc_trim if name else None
        except (OSError, AttributeError):  # not glibc: nothing to call
            fn = None
        if fn is not None:
            fn.argtypes = [ctypes.c_size_t]
            fn.restype = ctypes.c_int
            _trim = fn
    return _trim


def trim() -> bool:
    """Release the allocator's free pages to the kernel; whether there was a way to."""
    fn = _load()
    if fn is None:
        return False
    fn(0)
    return True
