"""Child tasks with one owner: a scope per life, and one per generation inside it.

A coordination routine runs its requests, listeners and watchers as child tasks so
a slow one never delays a heartbeat.  Every child must end with its owner, however
the owner ends (asyncio's TaskGroup and franz-go's per-generation contexts enforce
the same): :meth:`TaskScope.aclose` cancels and awaits all of them.  A child that
fails with an exception it could not turn into an event is a bug; the scope hands
the exception to ``on_crash`` (the routine re-raises it) instead of losing it in a
task nobody awaits.

What is per *life* and what is per *generation* (:class:`GenerationScopes`):

* per life: everything the machine waits on to form or end a generation - group
  requests (FindCoordinator, JoinGroup, SyncGroup, the leader's assignment,
  LeaveGroup, KIP-848 heartbeats and topic-id lookups) - and everything that does not
  depend on one: heartbeats (they must flow while a slow ``on_partitions_revoked``
  runs, whatever generation it ends), the subscription watcher, the committed-offset
  refresh (user-assigned partitions have no generation).  Cancelling a request whose
  answer the machine awaits would leave it waiting forever, so these end only with
  the routine.
* per generation: the work that serves one assignment - the application's rebalance
  callbacks, the classic interval auto-commits, the metadata refresh for topics the
  assignment named but the cluster did not show.  (The KIP-848 auto-commit loop is per
  life: it commits only while the machine says the member is in the group.)  When the
  generation ends (the machine's generation identity changes), its scope closes:
  auto-commits and refreshes are cancelled, callbacks are *awaited*, never cancelled
  (the machine already waits for their ``ListenerCompleted``, and cancelling is its
  decision - the overrun rule), and the next generation's children start only once
  that is done.  So an old
  generation's commit can never land after the new generation's
  ``on_partitions_assigned`` started (franz-go's "everything of the session has
  finished before it returns").
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["GenerationScopes", "TaskScope"]


def _close_unstarted(coro: Awaitable[Any]) -> None:
    """A child cancelled before it ran: close its coroutine (no never-awaited warning)."""
    if inspect.iscoroutine(coro) and inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
        coro.close()


class TaskScope:
    """A set of child tasks, each cancelled (or awaited) and done when the scope closes."""

    def __init__(self, on_crash: Callable[[BaseException], None]) -> None:
        self._on_crash = on_crash
        self._tasks: set[asyncio.Task[Any]] = set()
        #: Children :meth:`aclose` awaits instead of cancelling (unless ``cancel_all``).
        self._awaited: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(
        self, coro: Awaitable[Any], name: str, *, cancel_on_close: bool = True
    ) -> asyncio.Task[Any]:
        """Run ``coro`` as a child named ``aiogroup-<name>``; its crash goes to ``on_crash``.

        ``cancel_on_close=False``: a graceful :meth:`aclose` waits for it to end.
        """

        async def guarded() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._on_crash(exc)

        task = asyncio.get_running_loop().create_task(guarded(), name=f"aiogroup-{name}")
        # Cancelled before its first step, the task never awaited ``coro``.
        task.add_done_callback(lambda _: _close_unstarted(coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if not cancel_on_close:
            self._awaited.add(task)
            task.add_done_callback(self._awaited.discard)
        return task

    async def aclose(self, *, cancel_all: bool = True) -> None:
        """End every child and wait until all have ended (none is left running).

        ``cancel_all=False`` (a generation ending) lets children spawned with
        ``cancel_on_close=False`` finish instead of cancelling them.
        """
        tasks = list(self._tasks)
        for task in tasks:
            if cancel_all or task not in self._awaited:
                task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()


class GenerationScopes:
    """The current generation's :class:`TaskScope`; a new one per generation identity.

    :meth:`enter` is called by the routine after every machine step with the
    machine's generation identity (None between generations).  A change closes the
    old scope in the background (a task of the ``life`` scope) and opens a new one
    whose children first wait for that closing to finish.
    """

    def __init__(self, on_crash: Callable[[BaseException], None], life: TaskScope) -> None:
        self._on_crash = on_crash
        self._life = life
        self._key: object = None
        self._scope = TaskScope(on_crash)
        #: The previous generation's scope closing (None: nothing to wait for).
        self._ending: asyncio.Task[Any] | None = None

    def enter(self, key: object) -> None:
        """The machine's generation is ``key`` now; end the previous one if it changed."""
        if key == self._key:
            return
        old, self._key, self._scope = self._scope, key, TaskScope(self._on_crash)
        self._ending = self._life.spawn(old.aclose(cancel_all=False), "generation-end")

    def spawn(
        self, coro: Awaitable[Any], name: str, *, cancel_on_close: bool = True
    ) -> asyncio.Task[Any]:
        """Run ``coro`` in this generation, once the previous generation has ended."""
        ending = self._ending

        async def after_previous() -> None:
            if ending is not None and not ending.done():
                await asyncio.wait({ending})
            await coro

        task = self._scope.spawn(after_previous(), name, cancel_on_close=cancel_on_close)
        # Cancelled before it got past the wait, the task never awaited ``coro``.
        task.add_done_callback(lambda _: _close_unstarted(coro))
        return task

    async def aclose(self) -> None:
        """The routine ends: cancel this generation's children (the life scope ends the rest)."""
        await self._scope.aclose()
