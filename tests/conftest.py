"""Hypothesis profiles: how hard the property tests search.

``dev`` (the default) keeps ``make test-unit`` well under a minute for the edit-test
loop; ``thorough`` is what ``make test`` (and so CI) runs: five times the examples
for the assignor properties and the listener-contract state machine.  Pick one with
``HYPOTHESIS_PROFILE=thorough``.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("dev", max_examples=100, deadline=None)
settings.register_profile("thorough", max_examples=500, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def pytest_configure(config: pytest.Config) -> None:
    """Markers of the broker matrix (make test deselects kafka_cluster on Tansu)."""
    config.addinivalue_line(
        "markers", "kafka_cluster: needs the 3-node Apache Kafka cluster (Java + make install)"
    )


#: Tests that must not share the machine with each other run on one xdist worker, in
#: order: each group below is one unit of work (``make test`` runs ``pytest -n N
#: --dist loadgroup``).  Every other test is spread over the workers on its own; that is
#: safe because each worker starts its own broker (the session fixture) and every test
#: uses its own topics and group ids.  By path, because xdist's scheduler sees node ids
#: only: pytest-xdist 3.8 reads ``xdist_group`` marks by rewriting ``item._nodeid``,
#: which pytest 9.2 no longer reads, so those marks would be ignored.
SERIAL_GROUPS: tuple[tuple[str, str], ...] = (
    # Timing: SIGSTOP, connection cuts, session-timeout arithmetic.
    ("tests/chaos/", "chaos"),
    # Spark sessions are JVMs of their own, started per module: one worker keeps them.
    ("tests/integration/test_spark_", "spark"),
    # Three Kafka JVMs per test (failover, racks): heavy, and judged by recovery time.
    ("tests/integration/test_failover.py", "kafka_cluster"),
    ("tests/integration/test_racks.py", "kafka_cluster"),
    ("tests/integration/test_transaction_failover.py", "kafka_cluster"),
)


def serial_group(nodeid: str) -> str | None:
    """The group a test runs in on one worker, or None: any worker."""
    for prefix, group in SERIAL_GROUPS:
        if nodeid.startswith(prefix):
            return group
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A Spark or 3-node-cluster test outside its group would share the machine: refuse."""
    for item in items:
        for marker in ("spark", "kafka_cluster"):
            if item.get_closest_marker(marker) and serial_group(item.nodeid) != marker:
                raise pytest.UsageError(
                    f"{item.nodeid} is marked {marker} but not in the {marker!r} group: "
                    "add its file to SERIAL_GROUPS in tests/conftest.py"
                )


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: SERIAL_GROUPS as units, every other test on its own.

    xdist's scope scheduler, with the scope taken from SERIAL_GROUPS; the largest units
    are handed out first (its default), so the long groups start at once.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SerialGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return serial_group(nodeid) or nodeid

    return SerialGroupScheduling(config, log)


#: How long before pytest-timeout fires the asyncio tasks are dumped.
HANG_REPORT_LEAD = 20.0


def _effective_timeout(item: pytest.Item) -> float:
    """pytest-timeout's limit for ``item``: its ``timeout`` mark, else the ini value."""
    mark = item.get_closest_marker("timeout")
    if mark is not None and mark.args:
        return float(mark.args[0])
    return float(item.config.getini("timeout") or 0)


def _dump_asyncio_tasks(nodeid: str) -> None:
    """Every running loop's tasks with the await each is suspended at.

    pytest-timeout prints threads' stacks, which for an asyncio test end in
    ``selector.poll``: they never say which await hangs.  Read from a timer thread
    (racy by nature; good enough for a report written just before the test is killed).
    """
    out = sys.stderr
    print(f"\n===== {nodeid}: still running; asyncio tasks =====", file=out)
    loops = [
        o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop) and o.is_running()
    ]
    for loop in loops:
        for _ in range(3):  # the task set may change under us
            try:
                tasks = list(asyncio.all_tasks(loop))
                break
            except RuntimeError:
                continue
        else:
            tasks = []
        for task in tasks:
            print(f"--- {task.get_name()}: {task!r}"[:400], file=out)
            task.print_stack(limit=25, file=out)
    out.flush()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test near its timeout gets its asyncio tasks dumped (see _dump_asyncio_tasks)."""
    timeout = _effective_timeout(item)
    timer: threading.Timer | None = None
    if timeout > HANG_REPORT_LEAD * 2:
        timer = threading.Timer(timeout - HANG_REPORT_LEAD, _dump_asyncio_tasks, (item.nodeid,))
        timer.daemon = True
        timer.start()
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
