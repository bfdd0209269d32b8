"""Scenario 4: how long an awaited commit takes, for one offset and for 100 partitions.

Assign mode with a group id: the commit goes to the group coordinator without a
join, so the number is the commit path alone (request building, the round trip,
response handling) and not the cost of group membership.
"""

from __future__ import annotations

import uuid
from typing import Any

from benchmarks.harness import Context, Outcome
from benchmarks.stats import percentile

TITLE = "Commit latency"

CONFIGS: list[tuple[str, str]] = [
    ("aiogroup", "defaults"),
    ("aiokafka", "defaults"),
    ("kafka-python", "defaults"),
    ("confluent", "defaults"),
    ("confluent-aio", "defaults"),
]

METRICS = {
    "one_p50_ms": lambda r: r["one_p50_ms"],
    "one_p99_ms": lambda r: r["one_p99_ms"],
    "all_p50_ms": lambda r: r["all_p50_ms"],
    "all_p99_ms": lambda r: r["all_p99_ms"],
    "peak_rss_mib": lambda r: r["peak_rss_mib"],
}


async def run(ctx: Context) -> dict[str, Any]:
    parts = ctx.plan.commit_partitions
    topic = await ctx.broker.create_topic(f"bench-commit-{uuid.uuid4().hex[:8]}", parts)
    outcomes = {f"{c}/{v}": Outcome() for c, v in CONFIGS}
    for rep in range(ctx.plan.reps):
        for client, variant in CONFIGS:
            name = f"{client}/{variant}"
            if outcomes[name].status == "unavailable":
                continue
            result = await ctx.run_worker(
                {
                    "task": "commit",
                    "client": client,
                    "variant": variant,
                    "topic": topic,
                    "partitions": parts,
                    "group_id": f"bench-commit-{uuid.uuid4().hex[:8]}",
                    "commits": ctx.plan.commits,
                    "warmup": 10,
                }
            )
            if result.get("ok"):
                for kind in ("one", "all"):
                    samples = result["samples"][kind]
                    result[f"{kind}_p50_ms"] = percentile(samples, 50) * 1000
                    result[f"{kind}_p99_ms"] = percentile(samples, 99) * 1000
                    result["samples"][kind] = [round(s * 1000, 3) for s in samples]
            outcomes[name].record(result)
            brief = (
                f"one p50 {result['one_p50_ms']:.2f} ms, {parts} p50 {result['all_p50_ms']:.2f} ms"
                if result.get("ok")
                else result.get("error")
            )
            ctx.log(f"commit rep {rep + 1} {name}: {brief}")
    for outcome in outcomes.values():
        outcome.summarize(METRICS)
    return {
        "partitions": parts,
        "commits_per_run": ctx.plan.commits,
        "configs": {name: o.to_json() for name, o in outcomes.items()},
    }
