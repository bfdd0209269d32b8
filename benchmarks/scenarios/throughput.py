"""Scenario 1: one member drains a backlog from an 8-partition topic, as fast as it can.

Every configuration reads the same produced topic from offset 0 in assign mode, in
a fresh process; repetitions are interleaved (all clients once, then again) so a
slow minute on the machine spreads over every client instead of hitting one.
"""

from __future__ import annotations

from typing import Any

from benchmarks.harness import Context, Outcome

TITLE = "Throughput: one member drains a backlog"

#: (client, variant). The raw fetch loop is the ceiling, not a client.
FULL_CONFIGS: list[tuple[str, str]] = [
    ("raw-fetch", "ceiling"),
    ("aiogroup", "defaults"),
    ("aiogroup", "tuned"),
    ("aiogroup", "arrow"),
    ("aiokafka", "defaults"),
    ("aiokafka", "tuned"),
    ("aiokafka", "tuned+arrow"),
    ("kafka-python", "defaults"),
    ("kafka-python", "tuned"),
    ("confluent", "defaults"),
    ("confluent", "tuned"),
    ("confluent-aio", "defaults"),
    ("confluent-aio", "tuned"),
]
#: For the other payloads only each client's best configuration on 100 B records, to
#: keep the whole run under half an hour (kafka-python's two configurations tie).
BEST_CONFIGS: list[tuple[str, str]] = [
    ("raw-fetch", "ceiling"),
    ("aiogroup", "tuned"),
    ("aiogroup", "arrow"),
    ("aiokafka", "defaults"),
    ("aiokafka", "tuned+arrow"),
    ("kafka-python", "defaults"),
    ("confluent", "tuned"),
    ("confluent-aio", "tuned"),
]

METRICS = {
    "records_per_s": lambda r: r["records"] / r["seconds"],
    "mb_per_s": lambda r: r["bytes"] / r["seconds"] / 1e6,
    "cpu_s": lambda r: r["cpu_s"],
    "peak_rss_mib": lambda r: r["peak_rss_mib"],
}


def label(client: str, variant: str) -> str:
    return client if client == "raw-fetch" else f"{client}/{variant}"


async def run(ctx: Context) -> dict[str, Any]:
    payloads: dict[str, Any] = {}
    for payload in ctx.plan.payloads:
        ds = await ctx.dataset(payload)
        configs = FULL_CONFIGS if payload == "100B" else BEST_CONFIGS
        outcomes = {label(c, v): Outcome() for c, v in configs}
        for rep in range(ctx.plan.reps):
            for client, variant in configs:
                name = label(client, variant)
                outcome = outcomes[name]
                if outcome.status == "unavailable":
                    continue
                result = await ctx.run_worker(
                    {
                        "task": "throughput",
                        "client": client,
                        "variant": variant,
                        "topic": ds.topic,
                        "partitions": ds.partitions,
                        "records": ds.records,
                        "timeout": 180,
                    }
                )
                outcome.record(result)
                ctx.log(f"throughput {payload} rep {rep + 1} {name}: {_brief(result)}")
        for outcome in outcomes.values():
            outcome.summarize(METRICS)
        payloads[payload] = {
            "dataset": ds.to_json(),
            "configs": {name: o.to_json() for name, o in outcomes.items()},
        }
    return {"payloads": payloads}


def _brief(result: dict[str, Any]) -> str:
    if not result.get("ok"):
        return ("unavailable: " if result.get("unavailable") else "FAILED: ") + str(
            result.get("error")
        )
    return f"{result['records'] / result['seconds']:,.0f} rec/s, cpu {result['cpu_s']:.2f}s"
