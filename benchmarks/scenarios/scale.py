"""Scenario 6: 1, 2, 4, 8 members share a 64-partition backlog.

All members are started together under a fresh group id and consume the backlog
to the end.  Reported: the time from starting the processes until the last
assignment of the run (how long the group took to converge), and the total
throughput: distinct records over the time from the first delivered record to the
last one.  On a 2-core machine the members compete for CPU with each other and the
broker, so this shows how each client behaves under contention, not linear scaling.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from benchmarks.group import Member, MemberGone, delivery_counts, member_spec, wait_until
from benchmarks.harness import Context, Outcome

TITLE = "Scale: members sharing 64 partitions"

CONFIGS: list[tuple[str, str]] = [
    ("aiogroup", "tuned"),
    ("aiokafka", "defaults"),
    ("kafka-python", "defaults"),
    ("confluent", "tuned"),
]

METRICS = {
    "converge_s": lambda r: r["converge_s"],
    "records_per_s": lambda r: r["records_per_s"],
    "assignments": lambda r: float(r["assignments"]),
}


async def one_rep(
    ctx: Context, client: str, variant: str, members_n: int, topic: str, records: int
) -> dict[str, Any]:
    group = f"bench-scale-{uuid.uuid4().hex[:8]}"
    spec = member_spec(ctx, client, variant, topic, group, cooperative=False)
    t_spawn = time.monotonic()
    members = list(await asyncio.gather(*(Member.spawn(f"M{i}", spec) for i in range(members_n))))
    try:
        t_done = await wait_until(
            members, lambda: delivery_counts(members)[1] >= records, 180, "backlog consumed"
        )
        assigned = [e for m in members for e in m.of("assigned") if e["p"]]
        first = min(e["t"] for m in members for e in m.of("batch"))
        last = max(e["t"] for m in members for e in m.of("batch"))
        total, distinct = delivery_counts(members)
        del t_done
        return {
            "ok": True,
            "converge_s": max(e["t"] for e in assigned) - t_spawn,
            "records_per_s": distinct / max(last - first, 1e-6),
            "assignments": len(assigned),
            "duplicates": total - distinct,
        }
    except (MemberGone, TimeoutError) as exc:
        for m in members:
            if m.unavailable():
                return {"ok": False, "unavailable": True, "error": m.unavailable()}
        return {"ok": False, "unavailable": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        await asyncio.gather(*(m.stop() for m in members))


async def run(ctx: Context) -> dict[str, Any]:
    ds = await ctx.dataset(
        "100B", partitions=ctx.plan.scale_partitions, records=ctx.plan.scale_records
    )
    table: dict[str, dict[str, Any]] = {}
    for client, variant in CONFIGS:
        name = f"{client}/{variant}"
        outcomes = {n: Outcome() for n in ctx.plan.scale_members}
        for rep in range(ctx.plan.reps):
            for n in ctx.plan.scale_members:
                if outcomes[n].status == "unavailable":
                    continue
                result = await one_rep(ctx, client, variant, n, ds.topic, ds.records)
                outcomes[n].record(result)
                brief = (
                    f"converge {result['converge_s']:.1f}s {result['records_per_s']:,.0f} rec/s"
                    if result.get("ok")
                    else result.get("error")
                )
                ctx.log(f"scale rep {rep + 1} {name} x{n}: {brief}")
        for o in outcomes.values():
            o.summarize(METRICS)
        table[name] = {str(n): o.to_json() for n, o in outcomes.items()}
    return {"dataset": ds.to_json(), "configs": table}
