"""The library never uses ``asyncio.wait_for``: before Python 3.12 it can hand back the
inner result when the caller is cancelled in the same iteration, so the cancellation is
lost and whoever awaits the cancelled task waits forever.  That hung the secure-group
test's ``CommitObserver.stop()`` (its read finished as ``stop()`` cancelled it; the task
went on polling).  ``aiogroup._support.timeouts.wait_for`` is the safe one.  ruff bans it
too (TID251), but CI runs the tests, not the linter."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import aiogroup
from aiogroup._support.timeouts import wait_for

PACKAGE = Path(aiogroup.__file__).parent


def _bare_wait_for(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "wait_for"
            and isinstance(node.value, ast.Name)
            and node.value.id == "asyncio"
        ):
            lines.append(node.lineno)
        if isinstance(node, ast.ImportFrom) and node.module == "asyncio":
            lines += [node.lineno for a in node.names if a.name == "wait_for"]
    return lines


def test_the_checker_finds_a_bare_wait_for() -> None:
    assert _bare_wait_for(ast.parse("import asyncio\nasyncio.wait_for(x, 1)")) == [2]
    assert _bare_wait_for(ast.parse("from asyncio import wait_for")) == [1]
    assert _bare_wait_for(ast.parse("from x import wait_for\nwait_for(y, 1)")) == []


def test_no_module_of_the_library_uses_asyncio_wait_for() -> None:
    found = {
        str(path.relative_to(PACKAGE.parent)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := _bare_wait_for(ast.parse(path.read_text(), str(path))))
    }
    assert found == {}, f"asyncio.wait_for in {found}: use aiogroup._support.timeouts.wait_for"


async def test_a_cancel_that_meets_a_finishing_wait_is_not_lost() -> None:
    """The race itself: the inner awaitable finishes in the iteration the waiter is
    cancelled.  The safe wait_for raises CancelledError; the task ends."""
    inner: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    reached = asyncio.Event()

    async def waiter() -> None:
        while True:
            reached.set()
            await wait_for(inner, 10.0)
            await asyncio.sleep(3600)  # a lost cancel would leave the task here

    task = asyncio.create_task(waiter())
    await reached.wait()
    inner.set_result(1)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5.0)
    assert done == {task} and task.cancelled()
