"""Bounded waits that never swallow a cancellation.

Before Python 3.12, ``asyncio.wait_for`` hands back the inner result when the
inner awaitable finishes in the same loop iteration in which the caller is
cancelled: the cancellation is lost.  For aiogroup that meant a task cancelled
while its ``getmany(timeout_ms=...)`` was being woken by new data went on
polling, and whoever awaited that task after cancelling it (an application's
shutdown, ``stop()`` of a wrapper) waited forever.  ``asyncio.timeout`` (3.11+)
and ``async_timeout`` (3.10) cancel the awaited code directly and tell their
own cancellation from anyone else's, so every bounded wait goes through here.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable
from typing import TypeVar

if sys.version_info >= (3, 11):
    from asyncio import timeout as _deadline
else:  # pragma: no cover - exercised on 3.10 only
    from async_timeout import timeout as _deadline

__all__ = ["wait_for"]

T = TypeVar("T")


async def wait_for(aw: Awaitable[T], timeout: float | None) -> T:
    """``await aw`` for at most ``timeout`` seconds (None: no bound).

    Raises ``asyncio.TimeoutError`` (the builtin ``TimeoutError`` on 3.11+) when the
    time runs out; a cancellation of the caller always propagates.
    """
    if timeout is None:
        return await aw
    async with _deadline(max(0.0, timeout)):
        return await aw
