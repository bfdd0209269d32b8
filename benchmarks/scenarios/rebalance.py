"""Scenario 2: rebalance latency when a member joins, leaves cleanly and crashes.

Member A consumes a topic that a steady producer keeps filling; then B joins, B
leaves (LeaveGroup), C joins and is SIGKILLed (the group notices only when C's
session expires).  For each event: how long until the partitions have a working
owner again, and the longest pause in A's delivery - overall, and for the
partitions A kept throughout ("unmoved"), which a cooperative protocol should not
pause at all.  Gaps are compared with A's gaps before anything happened.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from benchmarks import timeline
from benchmarks.broker_view import judge_change, open_watch
from benchmarks.group import (
    Member,
    MemberGone,
    SteadyProducer,
    failed_run,
    first_callback,
    member_spec,
    run_group_configs,
    settled,
    spawn_joiner,
    wait_until,
)
from benchmarks.harness import Context
from benchmarks.stats import longest_gap

TITLE = "Rebalance latency"
PARTITIONS = 8
RATE = 1000  # records/s over all partitions: every partition sees data every few ms

#: (client, variant, cooperative)
CONFIGS: list[tuple[str, str, bool]] = [
    ("aiogroup", "defaults", False),
    ("aiogroup", "defaults", True),
    ("aiokafka", "defaults", False),
    ("kafka-python", "defaults", False),
    ("kafka-python", "defaults", True),
    ("confluent", "tuned", False),
    ("confluent", "tuned", True),
    # KIP-848: only on a broker that speaks it (AIOGROUP_BROKER=kafka); left out otherwise.
    ("aiogroup", "kip848", False),
    ("confluent", "kip848", False),
]

METRICS = {
    key: (lambda k: lambda r: r[k])(key)
    for key in (
        "baseline_gap_s",
        "join_assigned_s",
        "join_first_record_s",
        "join_after_a_s",
        "join_settle_s",
        "join_rebalances",
        "join_load_s",
        "join_gap_a_s",
        "join_gap_unmoved_s",
        "leave_takeover_s",
        "leave_gap_a_s",
        "leave_gap_unmoved_s",
        "crash_takeover_s",
        "crash_gap_a_s",
        "crash_gap_unmoved_s",
    )
}


def _unmoved_gap(a: Member, kept: set[int], start: float, end: float) -> float:
    """Longest pause of any partition A held before and after the window."""
    if not kept:
        return float("nan")
    return max(longest_gap(a.batch_times([p]), start, end) for p in kept)


async def _takeover(a: Member, moved: set[int], since: float, timeout: float, what: str) -> float:
    """Time until A owns ``moved`` and has delivered a record from each of them."""

    def first_from(p: int) -> float | None:
        key = str(p)
        return a.first("batch", after=since, pred=lambda e: key in e["r"])

    def done() -> bool:
        return moved <= a.owned and all(first_from(p) is not None for p in moved)

    await wait_until([a], done, timeout, what)
    return max(first_from(p) or since for p in moved)


async def one_rep(ctx: Context, client: str, variant: str, cooperative: bool) -> dict[str, Any]:
    topic = await ctx.broker.create_topic(f"bench-rb-{uuid.uuid4().hex[:8]}", PARTITIONS)
    group = f"bench-rb-{uuid.uuid4().hex[:8]}"
    producer = SteadyProducer(ctx.bootstrap, topic, PARTITIONS, RATE)
    await producer.start()
    members: list[Member] = []

    def spec(name: str | None = None) -> dict[str, Any]:
        return member_spec(
            ctx, client, variant, topic, group, cooperative=cooperative, client_id=name
        )

    try:
        a = await Member.spawn("A", spec("A"))
        members.append(a)
        await wait_until([a], lambda: settled([a], PARTITIONS), 60, "A consuming all partitions")
        if a.unavailable():
            return {"ok": False, "unavailable": True, "error": a.unavailable()}
        t0 = a.first("batch", after=a.last_assignment_time()) or 0.0
        await wait_until(
            [a], lambda: False if not a.events else a.events[-1]["t"] > t0 + 1.5, 10, "baseline"
        )
        base_start = t0 + 0.2
        baseline = max(
            longest_gap(a.batch_times([p]), base_start, base_start + 1.0) for p in range(PARTITIONS)
        )

        # -- B joins -------------------------------------------------------------------
        before = set(a.owned)
        watch, generation = await open_watch(ctx.bootstrap, group, variant)
        try:
            t_spawn = time.monotonic()
            b, t_join = await spawn_joiner(
                "B", spec("B"), ctx.plan.heartbeat_interval_ms, a.heartbeat_anchor()
            )
            members.append(b)
            t_stable = await wait_until(
                members, lambda: settled([a, b], PARTITIONS, t_join), 90, "A+B settled"
            )
            t_b_start = b.first("starting")
            t_b_assigned = b.first("assigned", pred=lambda e: bool(e["p"]))
            t_b_record = b.first("batch")
            assert t_b_start is not None and t_b_assigned is not None and t_b_record is not None
            even = max(a.last_assignment_time(), b.last_assignment_time())
            judged = await judge_change(watch, t_b_start, {"A", "B"}, PARTITIONS, even, generation)
        finally:
            await watch.stop()
        kept = before & a.owned
        res: dict[str, Any] = {
            "ok": True,
            "baseline_gap_s": baseline,
            "join_assigned_s": t_b_assigned - t_b_start,
            "join_first_record_s": t_b_record - t_b_start,
            # B's first partitions after A's first rebalance callback (NaN if A had none).
            "join_after_a_s": t_b_assigned - (first_callback([a], t_b_start) or float("nan")),
            "join_settle_s": judged["settle_s"],
            "join_rebalances": judged["rebalances"],
            "join_counted_as": judged["rebalances_counted_as"],
            "join_settle_from": judged["settle_from"],
            # What the old clock (from the spawn) also counted: interpreter start, imports.
            "join_load_s": (b.first("loaded") or t_spawn) - t_spawn,
            "join_gap_a_s": longest_gap(a.batch_times(), t_join, t_stable),
            "join_gap_unmoved_s": _unmoved_gap(a, kept, t_join, t_stable),
            "join_unmoved_partitions": len(kept),
            "join_timeline": {
                "A": timeline.window(a.events, t_b_start, t_b_assigned + 0.05, t_b_start),
                "B": timeline.window(b.events, t_b_start, t_b_assigned + 0.05, t_b_start),
            },
        }

        # -- B leaves cleanly ----------------------------------------------------------
        b_parts = set(b.owned)
        kept = set(a.owned)
        t_leave = time.monotonic()
        await b.stop()
        t_done = await _takeover(a, b_parts, t_leave, 90, "A taking over after B left")
        res["leave_takeover_s"] = t_done - t_leave
        res["leave_gap_a_s"] = longest_gap(a.batch_times(), t_leave, t_done)
        res["leave_gap_unmoved_s"] = _unmoved_gap(a, kept, t_leave, t_done)

        # -- C joins, then crashes -----------------------------------------------------
        t_join2 = time.monotonic()
        c = await Member.spawn("C", spec("C"))
        members.append(c)
        await wait_until([a, c], lambda: settled([a, c], PARTITIONS, t_join2), 90, "A+C settled")
        c_parts = set(c.owned)
        kept = set(a.owned)
        t_crash = time.monotonic()
        await c.kill()
        t_done = await _takeover(a, c_parts, t_crash, 90, "A taking over after C crashed")
        res["crash_takeover_s"] = t_done - t_crash
        res["crash_gap_a_s"] = longest_gap(a.batch_times(), t_crash, t_done)
        res["crash_gap_unmoved_s"] = _unmoved_gap(a, kept, t_crash, t_done)
        res["a_lost_events"] = len(a.of("lost"))
        return res
    except (MemberGone, TimeoutError, AssertionError) as exc:
        return failed_run(members, exc)
    finally:
        for m in members:
            await m.stop()
        await producer.stop()


async def run(ctx: Context) -> dict[str, Any]:
    configs = CONFIGS
    if not ctx.broker.caps.supports_consumer_protocol:
        configs = [c for c in CONFIGS if c[1] != "kip848"]
    outcomes = await run_group_configs(ctx, "rebalance", configs, one_rep, METRICS, _brief)
    return {
        "partitions": PARTITIONS,
        "produce_rate": RATE,
        "session_timeout_ms": ctx.plan.session_timeout_ms,
        "heartbeat_interval_ms": ctx.plan.heartbeat_interval_ms,
        "parallel": ctx.parallel,
        "configs": {name: o.to_json() for name, o in outcomes.items()},
    }


def _brief(r: dict[str, Any]) -> str:
    if not r.get("ok"):
        return str(r.get("error"))
    return (
        f"join {r['join_assigned_s']:.2f}s settle {r['join_settle_s']:.2f}s "
        f"rebalances {r['join_rebalances']:.0f} leave {r['leave_takeover_s']:.2f}s "
        f"crash {r['crash_takeover_s']:.2f}s unmoved gap {r['join_gap_unmoved_s']:.2f}s"
    )
