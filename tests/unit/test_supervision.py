"""Supervision scopes: nothing outlives its scope, and a generation's children are
done before the next generation's start (callbacks awaited, the rest cancelled)."""

from __future__ import annotations

import asyncio

from aiogroup._support.supervision import GenerationScopes, TaskScope
from tests.unit.virtual_clock import run_virtual


def test_a_crash_is_handed_over_and_close_cancels_the_rest() -> None:
    crashes: list[BaseException] = []

    async def scenario() -> None:
        scope = TaskScope(crashes.append)

        async def crash() -> None:
            raise RuntimeError("bug")

        waiting = scope.spawn(asyncio.Event().wait(), "waits")
        scope.spawn(crash(), "crash")
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(scope) == 1
        await scope.aclose()
        assert waiting.cancelled() and len(scope) == 0

    run_virtual(scenario())
    assert [str(exc) for exc in crashes] == ["bug"]


def test_the_next_generation_starts_after_the_previous_one_ended() -> None:
    order: list[str] = []

    async def scenario() -> None:
        life = TaskScope(lambda exc: None)
        scopes = GenerationScopes(lambda exc: None, life)
        scopes.enter((1, "m"))
        release = asyncio.Event()

        async def callback() -> None:  # awaited at the generation's end, never cancelled
            await release.wait()
            order.append("gen-1 callback returned")

        async def commit() -> None:  # cancelled at the generation's end
            try:
                await asyncio.Event().wait()
            finally:
                order.append("gen-1 commit cancelled")

        async def next_work() -> None:
            order.append("gen-2 work started")

        old_callback = scopes.spawn(callback(), "listener", cancel_on_close=False)
        old_commit = scopes.spawn(commit(), "auto-commit")
        await asyncio.sleep(0)
        scopes.enter((1, "m"))  # the same generation: nothing ends
        assert not old_commit.done()
        scopes.enter((2, "m"))
        new = scopes.spawn(next_work(), "listener")
        await asyncio.sleep(1)
        assert order == ["gen-1 commit cancelled"]  # the callback still runs, gen 2 waits
        release.set()
        await asyncio.wait({new})
        assert order == ["gen-1 commit cancelled", "gen-1 callback returned", "gen-2 work started"]
        assert not old_callback.cancelled() and old_commit.cancelled()
        await scopes.aclose()
        await life.aclose()

    run_virtual(scenario())


def test_a_child_cancelled_while_waiting_for_the_previous_generation_never_runs() -> None:
    async def scenario() -> None:
        life = TaskScope(lambda exc: None)
        scopes = GenerationScopes(lambda exc: None, life)
        release = asyncio.Event()
        scopes.spawn(release.wait(), "listener", cancel_on_close=False)
        scopes.enter("next")
        ran: list[str] = []

        async def work() -> None:
            ran.append("ran")

        task = scopes.spawn(work(), "auto-commit")
        await asyncio.sleep(0)
        await scopes.aclose()
        assert task.cancelled() and ran == []
        release.set()
        await life.aclose()

    run_virtual(scenario())
