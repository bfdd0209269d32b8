"""Rebalance listeners: the application's hooks into partition movement.

The contract is the Java client's ``ConsumerRebalanceListener`` (and KIP-429 for
cooperative rebalancing), done the asyncio way: the coordination routine *awaits*
the async methods while the heartbeat task keeps the membership alive, so a slow
listener does not get its member evicted.

``on_partitions_assigned`` may return ``{TopicPartition: offset}``: the consumer
then starts those partitions at those offsets instead of their committed ones
(pykafka's post-rebalance hook).

Sync listeners (:class:`ConsumerRebalanceListener`, or any listener object whose
methods are plain functions, such as an aiokafka listener) run their callbacks in
the consumer's *listener thread* (:class:`ListenerThread`), never on the event loop:
a callback that blocks (``time.sleep``, a database flush) does not stop heartbeats,
as in the Java client.  The rules for such a callback:

* It may block and do its own I/O.  It must not call the consumer directly (the
  consumer belongs to the loop and is not thread-safe); it reaches the consumer
  through :func:`run_on_loop`, e.g. ``run_on_loop(consumer.commit(), timeout=10)``
  - the loop is free while the callback runs, so that works at once.
* ``on_partitions_assigned`` may return start offsets, as the async form does.
* Callbacks run one at a time, in order, in the same thread.
* Like an async callback it is bounded by the rebalance timeout (default
  ``max_poll_interval_ms``).  An async callback that overruns is cancelled; a thread
  cannot be: the member logs an error, keeps heartbeating and waits for the
  callback to return before the next rebalance step (so callbacks never overlap),
  and the next ``getmany`` raises ``RebalanceListenerError``.  Meanwhile the broker
  stops waiting for the member after the rebalance timeout and rebalances without
  it; its heartbeats are then refused, its generation is lost (commits fail) and it
  rejoins as a new member once the callback returns.
* ``stop()`` does not wait for a callback longer than its timeout; the thread
  finishes the callback in the background (interpreter exit waits for it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import threading
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from aiogroup.structs import TopicPartition

__all__ = [
    "AsyncConsumerRebalanceListener",
    "ConsumerRebalanceListener",
    "HookedListener",
    "ListenerThread",
    "RebalanceHook",
    "RebalanceHooks",
    "StartOffsets",
    "as_async_listener",
    "run_on_loop",
]

T = TypeVar("T")

StartOffsets = Mapping[TopicPartition, int] | None


class AsyncConsumerRebalanceListener:
    """Subclass and override the ``async def`` hooks you need; the defaults do nothing.

    ``on_partitions_lost`` defaults to ``on_partitions_revoked``, as in Java: code that
    only cleans up in ``revoked`` still cleans up when membership is lost, but must
    not commit there (the commit would be rejected - the partitions may already be
    someone else's).
    """

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Partitions are leaving this member; commit or flush their work here."""

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> StartOffsets:
        """Partitions arrived (empty set when none did). Return offsets to start from."""
        return None

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """Membership was lost; these partitions already belong to someone else."""
        await self.on_partitions_revoked(lost)


class ConsumerRebalanceListener:
    """The same hooks as plain methods, for code shared with aiokafka/kafka-python.

    The methods run in the consumer's listener thread, so they may block without
    stopping heartbeats; they reach the consumer only through :func:`run_on_loop`
    (see the module docstring for the full rules).  aiokafka's
    ``ConsumerRebalanceListener`` subclasses (whose methods may be plain or
    ``async def``) are accepted as they are, through :func:`as_async_listener`:
    plain methods run in the thread, ``async def`` ones on the loop.
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Partitions are leaving this member."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> StartOffsets:
        """Partitions arrived (empty set when none did)."""
        return None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """Membership was lost; by default treated as a revocation."""
        self.on_partitions_revoked(lost)


class ListenerThread:
    """The one worker thread in which a consumer runs its sync listener callbacks.

    One thread, one callback at a time, in order (listeners never overlap), started
    on first use.  The caller's context variables are copied into each call, and the
    thread knows the consumer's loop so :func:`run_on_loop` can reach it.

    A thread cannot be cancelled: :attr:`busy` stays true until the callback
    returns, whatever happened to the coroutine that awaited it.
    """

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None
        self._current: concurrent.futures.Future[Any] | None = None
        self._closed = False

    @property
    def busy(self) -> bool:
        """True while a callback runs (or waits) in the thread."""
        return self._current is not None and not self._current.done()

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` in the thread; the loop stays free until it returns."""
        if self._closed:
            raise RuntimeError("the consumer's listener thread is closed")
        loop = asyncio.get_running_loop()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="aiogroup-listener"
            )
        context = contextvars.copy_context()
        future = self._executor.submit(context.run, _call_in_thread, loop, fn, args)
        self._current = future
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        """Stop taking callbacks; a callback still running finishes in the background."""
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)


_thread_state = threading.local()


def _call_in_thread(
    loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], args: tuple[Any, ...]
) -> Any:
    _thread_state.loop = loop
    try:
        return fn(*args)
    finally:
        _thread_state.loop = None


def run_on_loop(awaitable: Awaitable[T], *, timeout: float) -> T:
    """From a sync listener callback: run ``awaitable`` on the consumer's loop, wait for it.

    The consumer is not thread-safe, so a sync callback (which runs in the
    consumer's listener thread) reaches it only through this helper::

        def on_partitions_revoked(self, revoked):
            flush_my_state(revoked)  # blocking work is fine here
            run_on_loop(consumer.commit(), timeout=10)

    The loop is free while the callback runs, so the awaitable makes progress at
    once.  Waits at most ``timeout`` seconds; then the awaitable is cancelled and
    ``TimeoutError`` is raised.  Its own exceptions (``CommitFailedError`` ...) are
    raised here.  Raises ``RuntimeError`` when called anywhere but in a sync
    listener callback (an async callback awaits the consumer directly).
    """
    loop: asyncio.AbstractEventLoop | None = getattr(_thread_state, "loop", None)
    if loop is None:
        if inspect.iscoroutine(awaitable):
            awaitable.close()  # never started: no "never awaited" warning
        raise RuntimeError(
            "run_on_loop() works only inside a sync rebalance listener callback "
            "(which aiogroup runs in its listener thread); async code awaits directly"
        )
    if timeout <= 0:
        if inspect.iscoroutine(awaitable):
            awaitable.close()
        raise ValueError(f"run_on_loop timeout must be > 0 seconds, got {timeout!r}")

    async def wrapped() -> T:
        return await awaitable

    future = asyncio.run_coroutine_threadsafe(wrapped(), loop)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(
            f"run_on_loop: the awaitable did not finish within {timeout:g}s; cancelled"
        ) from None


def _is_async(method: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(method) or inspect.iscoroutinefunction(
        getattr(method, "__call__", None)  # noqa: B004 - an object with async __call__
    )


class _Adapter(AsyncConsumerRebalanceListener):
    """Calls a listener whose methods may be sync or async, and may lack ``lost``.

    ``async def`` methods are awaited on the loop; plain methods run in the
    listener thread (an awaitable they return is then awaited on the loop).
    """

    def __init__(self, inner: Any, thread: ListenerThread | None = None) -> None:
        self.inner = inner
        self.thread = thread if thread is not None else ListenerThread()

    async def _invoke(self, method: Callable[..., Any], partitions: set[TopicPartition]) -> Any:
        if _is_async(method):
            return await method(partitions)
        result = await self.thread.run(method, partitions)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._invoke(self.inner.on_partitions_revoked, revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> StartOffsets:
        result: StartOffsets = await self._invoke(self.inner.on_partitions_assigned, assigned)
        return result

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        hook = getattr(self.inner, "on_partitions_lost", None)
        if hook is None:
            await self.on_partitions_revoked(lost)
        else:
            await self._invoke(hook, lost)


def as_async_listener(
    listener: object | None, *, thread: ListenerThread | None = None
) -> AsyncConsumerRebalanceListener:
    """Normalise any supported listener object to the async interface.

    Sync methods will run in ``thread`` (a consumer passes its own; without one,
    the adapter starts its own thread on first use).  Raises TypeError naming the
    missing method when the object is not a listener.
    """
    if isinstance(listener, HookedListener):
        return (
            listener if thread is None else HookedListener(listener.inner, listener.hooks, thread)
        )
    if listener is None:
        return AsyncConsumerRebalanceListener()
    if isinstance(listener, _Adapter):
        return listener if thread is None else _Adapter(listener.inner, thread)
    if isinstance(listener, AsyncConsumerRebalanceListener):
        return listener
    for name in ("on_partitions_revoked", "on_partitions_assigned"):
        if not callable(getattr(listener, name, None)):
            raise TypeError(
                f"listener {listener!r} must define {name}(); subclass "
                "aiogroup.AsyncConsumerRebalanceListener or ConsumerRebalanceListener"
            )
    return _Adapter(listener, thread)


class RebalanceHook(Protocol):
    """An internal party that must act on partition movement before the application.

    The processor (aiogroup.processing) is one: it drains and commits revoked
    partitions before the application's ``on_partitions_revoked`` runs, so the
    application's listener sees work on them finished.
    """

    async def partitions_revoked(self, revoked: set[TopicPartition]) -> None: ...

    async def partitions_assigned(self, assigned: set[TopicPartition]) -> None: ...

    async def partitions_lost(self, lost: set[TopicPartition]) -> None: ...


class RebalanceHooks:
    """A consumer's hooks; read at each callback, so one added after subscribe() counts."""

    def __init__(self) -> None:
        self._hooks: list[RebalanceHook] = []

    def add(self, hook: RebalanceHook) -> None:
        if hook not in self._hooks:
            self._hooks.append(hook)

    def remove(self, hook: RebalanceHook) -> None:
        if hook in self._hooks:
            self._hooks.remove(hook)

    def __len__(self) -> int:
        return len(self._hooks)

    async def revoked(self, partitions: set[TopicPartition]) -> None:
        for hook in list(self._hooks):
            await hook.partitions_revoked(set(partitions))

    async def assigned(self, partitions: set[TopicPartition]) -> None:
        for hook in list(self._hooks):
            await hook.partitions_assigned(set(partitions))

    async def lost(self, partitions: set[TopicPartition]) -> None:
        for hook in list(self._hooks):
            await hook.partitions_lost(set(partitions))


class HookedListener(AsyncConsumerRebalanceListener):
    """The application's listener with the consumer's :class:`RebalanceHooks` run first.

    ``GroupConsumer.subscribe`` stores this; the coordination routine calls it like
    any listener (``as_async_listener`` re-wraps ``inner`` with the consumer's
    listener thread), so the hooks run inside the listener step, heartbeats going on.
    """

    def __init__(
        self, inner: object | None, hooks: RebalanceHooks, thread: ListenerThread | None = None
    ) -> None:
        self.inner = inner
        self.hooks = hooks
        self.listener = as_async_listener(inner, thread=thread)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.hooks.revoked(revoked)
        await self.listener.on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> StartOffsets:
        await self.hooks.assigned(assigned)
        return await self.listener.on_partitions_assigned(assigned)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        await self.hooks.lost(lost)
        await self.listener.on_partitions_lost(lost)
