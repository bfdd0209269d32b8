"""Child tasks with one owner: a scope spawns them, reports their crashes, and ends them.

A coordination routine runs its requests, listeners and watchers as child tasks so
a slow one never delays a heartbeat.  Every child must end with its owner, however
the owner ends (asyncio's TaskGroup and franz-go's per-generation contexts enforce
the same): :meth:`TaskScope.aclose` cancels and awaits all of them.  A child that
fails with an exception it could not turn into an event is a bug; the scope hands
the exception to ``on_crash`` (the routine re-raises it) instead of losing it in a
task nobody awaits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["TaskScope"]


class TaskScope:
    """A set of child tasks, each cancelled and awaited when the scope closes."""

    def __init__(self, on_crash: Callable[[BaseException], None]) -> None:
        self._on_crash = on_crash
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` as a child named ``aiogroup-<name>``; its crash goes to ``on_crash``."""

        async def guarded() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._on_crash(exc)

        task = asyncio.get_running_loop().create_task(guarded(), name=f"aiogroup-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def aclose(self) -> None:
        """Cancel every child and wait until all have ended (none is left running)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
