"""Calling the user's handler: async inline, sync in a thread pool, one attempt bounded.

Why a module of its own: both processors (:class:`~aiogroup.processing.Processor` on a
consumer group, :class:`~aiogroup.processing.ShareProcessor` on a share group) call
handlers the same way - an ``async def`` (or an object with an async ``__call__``) is
awaited on the loop, a plain function runs in a thread pool of at most
:data:`MAX_THREADS` threads (not one per unit of concurrency), and ``record_timeout_ms``
turns an overrun into a failed attempt.  What an attempt's failure *means* (retry,
dead letter, stop) is each processor's own.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Awaitable, Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiogroup._support.timeouts import wait_for

__all__ = ["MAX_THREADS", "Handler", "HandlerCalls", "check_handler", "drain", "is_async"]

log = logging.getLogger("aiogroup.processing")

Handler = Callable[[Any], Awaitable[None]] | Callable[[Any], None]

#: Most threads a processor's sync handlers get (not one per unit of concurrency).
MAX_THREADS = 128


def is_async(handler: Any) -> bool:
    """Is ``handler`` a coroutine function (or an object whose ``__call__`` is one)?"""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - an object with async __call__
    )


def check_handler(handler: object) -> None:
    """Refuse a handler that cannot be called, naming what a handler is."""
    if not callable(handler):
        raise TypeError(
            f"handler must be callable (async def handler(record) or a plain "
            f"function), got {handler!r}"
        )


class HandlerCalls:
    """One processor's way of calling its handler (and its thread pool, if sync)."""

    def __init__(self, handler: Handler, *, threads: int, record_timeout: float | None) -> None:
        self.handler = handler
        self.is_async = is_async(handler)
        self.record_timeout = record_timeout
        self._threads = max(1, min(threads, MAX_THREADS))
        self._executor: ThreadPoolExecutor | None = None

    async def call(self, record: Any) -> Any:
        """Run the handler once on ``record`` (no timeout); what it returned (a
        transactional processor's outputs)."""
        if self.is_async:
            result = self.handler(record)
            if inspect.isawaitable(result):
                return await result
            return result
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=self._threads, thread_name_prefix="aiogroup-handler"
            )
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(self.handler, record))

    async def attempt(self, record: Any) -> Any:
        """One attempt: :meth:`call`, bounded by the record timeout (an overrun raises
        ``TimeoutError`` naming it, so it counts as a failed attempt)."""
        if self.record_timeout is None:
            return await self.call(record)
        try:
            return await wait_for(self.call(record), self.record_timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(
                f"handler overran record_timeout_ms ({self.record_timeout * 1000:g} ms)"
            ) from None

    def close(self) -> None:
        """Let the thread pool go (a sync handler still running finishes in its thread)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


async def drain(
    tasks: Collection[asyncio.Task[None]], timeout: float, grace: float, why: str
) -> None:
    """Wait up to ``timeout`` for these handler tasks, then cancel and await the rest.

    For a processor whose tasks end with the records drained (``ShareProcessor`` at
    stop: no task takes a next record then).  ``Processor`` drains mid-run (a revoke),
    while its tasks go on with other partitions' records, so it waits for records.

    A cancelled handler ends at its next await (a sync handler's thread cannot be
    stopped: its task ends at once, the thread runs on).  One that swallows the
    cancellation is not waited for beyond ``grace``: the caller goes on without it.
    """
    if not tasks:
        return
    pending: set[asyncio.Task[None]] = set(tasks)
    if timeout > 0:
        _, pending = await asyncio.wait(pending, timeout=timeout)
    if not pending:
        return
    if timeout > 0:
        log.warning(
            "%s: %d handler(s) still running after drain_timeout_ms; cancelling them",
            why,
            len(pending),
        )
    for task in pending:
        task.cancel()
    _, stuck = await asyncio.wait(pending, timeout=max(grace, 0.001))
    if stuck:
        log.error("%s: %d handler(s) ignored cancellation; going on without them", why, len(stuck))
