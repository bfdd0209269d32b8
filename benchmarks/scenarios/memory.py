"""Scenario 5: peak RSS while the application stops polling on a large backlog.

The consumer takes one batch (so fetching is under way), then the application
"stalls" - no poll for ``stall_seconds`` - while a thread samples RSS.  A client
whose read-ahead is bounded stays flat; one that keeps fetching grows with the
backlog.  Growth is measured from the RSS before the consumer was created.
"""

from __future__ import annotations

import asyncio
from typing import Any

from benchmarks.harness import Context, Outcome

TITLE = "Memory bound while the application stalls"

CONFIGS: list[tuple[str, str]] = [
    ("aiogroup", "defaults"),
    ("aiogroup", "buffer16"),
    ("aiokafka", "defaults"),
    ("kafka-python", "defaults"),
    ("confluent", "tuned"),
    ("confluent-aio", "tuned"),
]

METRICS = {
    "growth_mib": lambda r: r["growth_mib"],
    "stall_peak_mib": lambda r: r["stall_peak_mib"],
    "baseline_mib": lambda r: r["baseline_mib"],
}


async def run(ctx: Context) -> dict[str, Any]:
    # Always the full million: a smaller backlog could fit inside the bounds under test.
    ds = await ctx.dataset("100B", records=ctx.plan.memory_records)
    outcomes = {f"{c}/{v}": Outcome() for c, v in CONFIGS}

    async def one(rep: int, client: str, variant: str) -> None:
        name = f"{client}/{variant}"
        if outcomes[name].status == "unavailable":
            return
        result = await ctx.run_worker(
            {
                "task": "memory",
                "client": client,
                "variant": variant,
                "topic": ds.topic,
                "partitions": ds.partitions,
                "stall_seconds": ctx.plan.stall_seconds,
            },
            timeout=ctx.plan.stall_seconds + 120,
        )
        outcomes[name].record(result)
        if result.get("ok"):
            outcomes[name].info["buffer_bound"] = result["buffer_bound"]
        brief = (
            f"growth {result['growth_mib']:.1f} MiB" if result.get("ok") else result.get("error")
        )
        ctx.log(f"memory rep {rep + 1} {name}: {brief}")

    # RSS is per process and the clients mostly sleep through the stall, so the
    # configurations of one repetition run side by side.
    for rep in range(ctx.plan.reps):
        await asyncio.gather(*(one(rep, c, v) for c, v in CONFIGS))
    for outcome in outcomes.values():
        outcome.summarize(METRICS)
    return {
        "dataset": ds.to_json(),
        "stall_seconds": ctx.plan.stall_seconds,
        "configs": {name: o.to_json() for name, o in outcomes.items()},
    }
