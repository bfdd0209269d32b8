"""A member frozen inside the test process, as SIGSTOP freezes a process.

Why: the zombie scenarios of the exactly-once tests (TransformLoop's and the
transactional processor's) need a member that stops everything - heartbeats, fetches,
handlers, commits - for longer than its session, then wakes up and tries to commit.
Running it on its own event loop in a thread, blocked on an event, does that without a
child process, so the test can still hold the member's objects and read its state.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

#: How long any step on the frozen loop may take (and the longest freeze).
WAIT_S = 60.0


class FrozenLoop:
    """An event loop in a thread that the test can freeze: nothing on it runs (no
    heartbeat, no fetch, no handler, no commit) until ``thaw()``."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thaw = threading.Event()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return await asyncio.wait_for(asyncio.wrap_future(future), WAIT_S)

    def freeze(self) -> None:
        self._thaw.clear()
        self.loop.call_soon_threadsafe(self._thaw.wait, WAIT_S)

    def thaw(self) -> None:
        self._thaw.set()

    def close(self) -> None:
        self.thaw()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(WAIT_S)
