"""An asyncio loop in a daemon thread, driven by synchronous calls from other threads.

Spark calls the source synchronously - the streaming-source process's offset calls,
an executor worker's iterator - while the consumers it drives need a loop that keeps
running between those calls (heartbeats, fetches in flight).  Both the group member
(``member.py``) and the executors' reader (``partition_reader.py``) keep their
consumer on one of these; every call into it carries a deadline.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """A running event loop owned by a daemon thread, from construction to ``stop()``."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(ready.set)
            self.loop.run_forever()
            self.loop.close()

        self._thread = threading.Thread(target=run, name=name, daemon=True)
        self._thread.start()
        ready.wait()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; its result arrives in the returned future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float, what: str) -> T:
        """Run ``coro`` on the loop and wait at most ``timeout`` seconds for it.

        On the deadline the coroutine is cancelled and TimeoutError names ``what``.
        """
        future = self.submit(coro)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"aiogroup source: {what} took longer than {timeout:.0f}s") from None

    def stop(self, timeout: float) -> None:
        """Stop the loop and wait (at most ``timeout``) for its thread to close it."""
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout)
