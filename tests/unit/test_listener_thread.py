"""Sync rebalance listeners run in the consumer's listener thread, off the event loop.

Issue 12: a plain ``ConsumerRebalanceListener`` whose ``on_partitions_revoked`` blocks
(``time.sleep(15)``) froze the loop, so heartbeats stopped and the broker handed the
partitions to another member while the callback ran.  These tests use a real loop
and real threads; "the loop runs while the callback blocks" is shown by a handshake
(the callback waits for an event only the loop can set), not by timing.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import aiokafka
import pytest

from aiogroup.errors import CommitFailedError
from aiogroup.listeners import (
    AsyncConsumerRebalanceListener,
    ConsumerRebalanceListener,
    ListenerThread,
    as_async_listener,
    run_on_loop,
)
from aiogroup.structs import TopicPartition

TP = TopicPartition("t", 0)
HANDSHAKE = 10.0  # generous bound for a handshake that should take microseconds


class Blocking(ConsumerRebalanceListener):
    """Blocks in every callback until the loop releases it; records the thread."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.threads: list[str] = []
        self.calls: list[str] = []
        self.released_in_time: list[bool] = []

    def _block(self, kind: str) -> None:
        self.threads.append(threading.current_thread().name)
        self.calls.append(kind)
        self.entered.set()
        self.released_in_time.append(self.release.wait(HANDSHAKE))

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._block("revoked")

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> dict[TopicPartition, int]:
        self._block("assigned")
        return {TP: 42}


async def _release_from_loop(listener: Blocking) -> None:
    """Runs on the loop: only possible if the callback does not hold the loop."""
    assert await asyncio.to_thread(listener.entered.wait, HANDSHAKE)
    listener.release.set()


async def test_a_blocking_sync_callback_leaves_the_loop_free() -> None:
    listener = Blocking()
    adapted = as_async_listener(listener)
    releaser = asyncio.create_task(_release_from_loop(listener))
    await adapted.on_partitions_revoked({TP})
    await releaser
    assert listener.released_in_time == [True]
    assert listener.threads[0] != threading.current_thread().name
    assert listener.threads[0].startswith("aiogroup-listener")


async def test_assigned_returns_start_offsets_from_the_thread() -> None:
    listener = Blocking()
    listener.release.set()
    offsets = await as_async_listener(listener).on_partitions_assigned({TP})
    assert offsets == {TP: 42}


async def test_callbacks_run_one_at_a_time_in_one_thread_in_order() -> None:
    listener = Blocking()
    listener.release.set()
    adapted = as_async_listener(listener, thread=ListenerThread())
    await adapted.on_partitions_revoked({TP})
    await adapted.on_partitions_assigned({TP})
    await adapted.on_partitions_lost({TP})  # default: revoked
    assert listener.calls == ["revoked", "assigned", "revoked"]
    assert len(set(listener.threads)) == 1


async def test_async_methods_of_a_plain_listener_object_stay_on_the_loop() -> None:
    seen: list[str] = []

    class Mixed(aiokafka.ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            seen.append(threading.current_thread().name)

        def on_partitions_assigned(self, assigned: Any) -> None:
            seen.append(threading.current_thread().name)

    adapted = as_async_listener(Mixed())
    await adapted.on_partitions_revoked({TP})
    await adapted.on_partitions_assigned({TP})
    assert seen[0] == threading.current_thread().name  # async def: on the loop
    assert seen[1] != threading.current_thread().name  # plain aiokafka method: thread


async def test_async_listener_is_not_wrapped() -> None:
    listener = AsyncConsumerRebalanceListener()
    assert as_async_listener(listener, thread=ListenerThread()) is listener


async def test_run_on_loop_from_a_sync_callback() -> None:
    loop_thread = threading.current_thread().name
    results: list[Any] = []

    async def on_loop(value: int) -> tuple[int, str]:
        await asyncio.sleep(0)
        return value * 2, threading.current_thread().name

    async def fails() -> None:
        raise CommitFailedError("rejected")

    class Committing(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            results.append(run_on_loop(on_loop(21), timeout=HANDSHAKE))
            with pytest.raises(CommitFailedError, match="rejected"):
                run_on_loop(fails(), timeout=HANDSHAKE)
            never = asyncio.Event()
            with pytest.raises(TimeoutError, match=r"within 0\.05s"):
                run_on_loop(never.wait(), timeout=0.05)
            with pytest.raises(ValueError, match="timeout"):
                run_on_loop(on_loop(1), timeout=0)
            results.append("done")

    await as_async_listener(Committing()).on_partitions_revoked({TP})
    assert results == [(42, loop_thread), "done"]


async def test_run_on_loop_outside_a_sync_callback_is_refused() -> None:
    async def nothing() -> None:
        pass

    with pytest.raises(RuntimeError, match="only inside a sync rebalance listener"):
        run_on_loop(nothing(), timeout=1)


async def test_a_thread_cannot_be_cancelled_busy_until_it_returns() -> None:
    thread = ListenerThread()
    gate = threading.Event()
    started = threading.Event()

    def blocking() -> str:
        started.set()
        assert gate.wait(HANDSHAKE)
        return "late"

    task = asyncio.create_task(thread.run(blocking))
    assert await asyncio.to_thread(started.wait, HANDSHAKE)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert thread.busy  # the callback still runs
    gate.set()
    assert await thread.run(lambda: "next") == "next"  # queued behind it, one at a time
    assert not thread.busy
    thread.close()
    with pytest.raises(RuntimeError, match="closed"):
        await thread.run(blocking)
