"""Scenario: the record path's cost per record in instructions (the regression guard).

Runs ``benchmarks/record_path_cost.py`` against the run's broker: aiogroup's
``getmany``, ``getmany-each`` (getmany with ``async for``'s per-record loop body: the
application visits every record) and ``async for``, and aiokafka's ``getmany``, each
drain a small and a large topic of 100 B records in a child process counted by
valgrind's callgrind; instructions per record is the difference over the difference in records.  The
counts do not move with the machine's load (three runs of the same tree agreed
within 0.5 %), so one repetition is enough and the verdict is a ratio to aiokafka's
getmany measured in the same run, against a stated threshold
(``record_path_cost.GETMANY_RATIO_LIMIT``, ``ASYNC_FOR_RATIO_LIMIT``; with the native
record path ``GETMANY_RATIO_LIMIT_NATIVE``, recorded in the section as ``native_records``).
"""

from __future__ import annotations

import asyncio
import contextlib
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Any

from benchmarks import record_path_cost as rpc
from benchmarks.harness import ROOT, Context

TITLE = "Record path cost per record (instructions, callgrind)"


async def run(ctx: Context) -> dict[str, Any]:
    small, large = (10_000, 50_000) if ctx.plan.quick else (20_000, 100_000)
    native = rpc.native_record_path()
    limits = {
        "getmany_vs_aiokafka": rpc.getmany_ratio_limit(),
        "async_for_vs_getmany": rpc.ASYNC_FOR_RATIO_LIMIT,
    }
    if shutil.which("valgrind") is None:
        missing = {"status": "unavailable", "error": "valgrind is not installed"}
        return {
            "configs": {"aiogroup/getmany": missing},
            "limits": limits,
            "native_records": native,
        }
    topics = {
        n: (await ctx.dataset("100B", rpc.PARTITIONS, records=n)).topic for n in (small, large)
    }
    costs, reference = await asyncio.to_thread(
        rpc.measure_costs, ctx.bootstrap, topics, [ROOT], rpc.PATHS + rpc.EXTRA_PATHS, ctx.log
    )
    configs: dict[str, Any] = {}
    for path, cost in costs[str(ROOT)].items():
        configs[f"aiogroup/{path}"] = _config(cost)
    configs["aiokafka/getmany"] = _config(reference)
    return {
        "small": small,
        "large": large,
        "limits": limits,
        "native_records": native,
        "measured_on": _measured_on(),
        "configs": configs,
    }


def _measured_on() -> str:
    """Machine, Python and commit: instruction counts depend on all three."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    return f"{cpu}, Python {platform.python_version()}, aiogroup {commit or '?'}"


def _config(cost: rpc.Cost) -> dict[str, Any]:
    return {
        "status": "ok",
        "instructions_per_record": cost.per_record,
        "drains": {
            name: {"records": d.records, "instructions": d.instructions}
            for name, d in (("small", cost.small), ("large", cost.large))
        },
    }
