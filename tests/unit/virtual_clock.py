"""An event loop on virtual time, for unit tests of the coordination shells.

The loop's clock stands still while there is work and jumps to the next timer
when there is none: a heartbeat interval, a backoff or a session timeout passes
at once, so a test sees what the routine does over minutes of loop time without
sleeping.  Ready I/O (the self-pipe a thread wakes the loop with) is still
served: a selector asked to wait for ``t`` seconds polls once, and if nothing is
ready, moves the clock by ``t`` instead of blocking.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _VirtualSelector(selectors.DefaultSelector):
    def __init__(self, clock: list[float]) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:  # nothing scheduled: only a thread can wake the loop
            return super().select(None)
        self._clock[0] += timeout
        return []


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """``loop.time()`` is virtual; idle waits move it instead of passing."""

    def __init__(self) -> None:
        self._clock = [0.0]
        super().__init__(_VirtualSelector(self._clock))

    def time(self) -> float:
        return self._clock[0]


async def _cancel_the_rest() -> None:
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)


def run_virtual(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on a fresh virtual-time loop."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        # A failed test leaves the routine running: end every task before closing.
        loop.run_until_complete(_cancel_the_rest())
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
