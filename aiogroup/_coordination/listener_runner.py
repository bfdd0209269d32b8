"""Running the application's rebalance callbacks as supervised children.

A callback runs in its own task so heartbeats keep flowing while a slow
``on_partitions_revoked`` works; its end - returned, raised, or cancelled because
the machine said it overran the rebalance timeout - becomes one
``ListenerCompleted`` event (``completed(kind, error)`` puts it on the inbox).
A sync callback runs in the consumer's listener thread, which cannot be cancelled:
then the runner waits for it and reports the overrun when it returns, so callbacks
never overlap whatever the broker decided.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiogroup._membership.events import Listener
from aiogroup.errors import RebalanceListenerError
from aiogroup.listeners import ListenerThread

__all__ = ["ListenerRunner"]

log = logging.getLogger("aiogroup.coordinator")


async def _call(call: Callable[[], Awaitable[Any]]) -> Any:
    return await call()


class ListenerRunner:
    """At most one callback at a time; its end is put on the routine's inbox."""

    def __init__(
        self,
        group_id: str,
        thread: ListenerThread,
        spawn: Callable[[Awaitable[Any], str], Any],
        completed: Callable[[Listener, BaseException | None], None],
    ) -> None:
        self._group_id = group_id
        self._thread = thread
        self._spawn = spawn
        self._completed = completed
        self._inner: asyncio.Task[Any] | None = None
        self._cancel_reason: str | None = None
        #: Set when the running callback overran while in the listener thread (which
        #: cannot be cancelled): reported when it returns.
        self._overran: str | None = None

    def start(
        self,
        kind: Listener,
        call: Callable[[], Awaitable[Any]],
        on_done: Callable[[], None] | None = None,
    ) -> None:
        """Run a listener as a child; its end (or our cancelling it) becomes ListenerCompleted.

        ``on_done`` runs once the callback ended, however it ended (also when it never
        started because the routine was cancelled first).
        """
        self._inner = None
        self._cancel_reason = None
        self._overran = None

        async def supervise() -> None:
            # The callback's task is created here, not in start(): the child may first
            # wait for the previous generation's scope to end (supervision.py).
            inner: asyncio.Task[Any] | None = None
            try:
                if self._cancel_reason is None:  # not cancelled before it could start
                    inner = asyncio.get_running_loop().create_task(
                        _call(call), name=f"aiogroup-{kind.method}"
                    )
                    self._inner = inner
                    await asyncio.wait({inner})
            except asyncio.CancelledError:
                if inner is not None:
                    inner.cancel()
                raise
            finally:
                if on_done is not None:
                    on_done()
            error: BaseException | None
            if inner is None or inner.cancelled():
                error = RebalanceListenerError(
                    self._cancel_reason or f"{kind.method} was cancelled"
                )
            else:
                error = inner.exception()
                if error is not None:
                    log.error(
                        "group %s: %s raised",
                        self._group_id,
                        kind.method,
                        exc_info=error,
                    )
                elif self._overran is not None:
                    error = RebalanceListenerError(
                        f"{self._overran}; it ran in the listener thread, which "
                        "cannot be cancelled, and returned late - the group may have "
                        "rebalanced without this member"
                    )
            self._inner = None
            self._completed(kind, error)

        self._spawn(supervise(), f"listener-{kind.value}")

    def cancel(self, reason: str) -> None:
        """The callback overran: cancel it (async), or wait for it and say so (thread)."""
        if self._thread.busy:
            # A thread cannot be cancelled.  Wait for it (callbacks never overlap,
            # and the next step must not start while the application still works
            # on these partitions); heartbeats go on, the broker decides.
            log.error(
                "group %s: %s; it runs in the listener thread, which cannot be "
                "cancelled: waiting for it to return (the group may rebalance "
                "without this member meanwhile)",
                self._group_id,
                reason,
            )
            self._overran = reason
        else:
            log.error("group %s: %s; cancelling it", self._group_id, reason)
            self._cancel_reason = reason
            if self._inner is not None:
                self._inner.cancel()
