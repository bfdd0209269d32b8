"""Scenario 5: peak RSS while the application stops polling on a large backlog.

The consumer takes one batch (so fetching is under way), then the application
"stalls" - no poll for ``stall_seconds`` - while a thread samples RSS.  A client
whose read-ahead is bounded stays flat; one that keeps fetching grows with the
backlog.  Growth is measured from the RSS before the consumer was created.

Each configuration also runs once per repetition on an empty topic: that growth is
the client's fixed footprint (connections, metadata, tasks, allocator arenas), and
growth minus it is what the read-ahead buffer itself took - the quantity a buffer
bound such as ``max_buffered_bytes`` promises to limit.
"""

from __future__ import annotations

import asyncio
import math
import uuid
from typing import Any

from benchmarks.harness import Context, Outcome

TITLE = "Memory bound while the application stalls"

CONFIGS: list[tuple[str, str]] = [
    ("aiogroup", "defaults"),
    ("aiogroup", "buffer16"),
    ("aiogroup", "mmap128k"),
    ("aiokafka", "defaults"),
    ("kafka-python", "defaults"),
    ("confluent", "tuned"),
    ("confluent-aio", "tuned"),
]

METRICS = {
    "growth_mib": lambda r: r["growth_mib"],
    "stall_peak_mib": lambda r: r["stall_peak_mib"],
    "baseline_mib": lambda r: r["baseline_mib"],
    "buffer_growth_mib": lambda r: r["buffer_growth_mib"],
    "trimmed_growth_mib": lambda r: r.get("trimmed_growth_mib", math.nan),
}

IDLE_METRICS = {"idle_growth_mib": lambda r: r["growth_mib"]}


async def run(ctx: Context) -> dict[str, Any]:
    # Always the full million: a smaller backlog could fit inside the bounds under test.
    ds = await ctx.dataset("100B", records=ctx.plan.memory_records)
    empty = await ctx.broker.create_topic(f"bench-empty-{uuid.uuid4().hex[:8]}", ds.partitions)
    outcomes = {f"{c}/{v}": Outcome() for c, v in CONFIGS}
    idle = {f"{c}/{v}": Outcome() for c, v in CONFIGS}

    async def one(rep: int, client: str, variant: str, on_empty: bool) -> None:
        name = f"{client}/{variant}"
        target = idle if on_empty else outcomes
        if target[name].status == "unavailable":
            return
        result = await ctx.run_worker(
            {
                "task": "memory",
                "client": client,
                "variant": variant,
                "topic": empty if on_empty else ds.topic,
                "partitions": ds.partitions,
                "stall_seconds": ctx.plan.stall_seconds,
                "idle": on_empty,
            },
            timeout=ctx.plan.stall_seconds + 120,
        )
        target[name].record(result)
        if result.get("ok") and not on_empty:
            outcomes[name].info["buffer_bound"] = result["buffer_bound"]
        brief = (
            f"growth {result['growth_mib']:.1f} MiB" if result.get("ok") else result.get("error")
        )
        ctx.log(f"memory rep {rep + 1} {name}{' (empty topic)' if on_empty else ''}: {brief}")

    # RSS is per process and the clients mostly sleep through the stall, so the
    # configurations of one repetition run side by side.
    for rep in range(ctx.plan.reps):
        await asyncio.gather(
            *(one(rep, c, v, on_empty) for c, v in CONFIGS for on_empty in (False, True))
        )
    for name, outcome in outcomes.items():
        idle[name].summarize(IDLE_METRICS)
        fixed = idle[name].summary.get("idle_growth_mib")
        for r in outcome.runs:
            if r.get("ok"):
                # NaN (no idle measurement) drops the metric rather than faking a zero.
                r["buffer_growth_mib"] = r["growth_mib"] - (fixed.median if fixed else math.nan)
        outcome.summarize(METRICS)
        outcome.info["idle"] = {
            "status": idle[name].status,
            "error": idle[name].error,
            "growth_mib": [r["growth_mib"] for r in idle[name].runs if r.get("ok")],
            "summary": {k: v.to_json() for k, v in idle[name].summary.items()},
        }
    return {
        "dataset": ds.to_json(),
        "stall_seconds": ctx.plan.stall_seconds,
        "configs": {name: o.to_json() for name, o in outcomes.items()},
    }
