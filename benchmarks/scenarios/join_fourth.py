"""Scenario: a fourth member joins a group of three (issue 4's done-when).

A, B and C share a 12-partition topic that a steady producer keeps filling (4
partitions each); then D joins.  Measured for A, B and C together: the longest
delivery pause of any partition a member kept through the rebalance ("unmoved"),
which a cooperative protocol should hold at the baseline while an eager one pauses
it for the whole rebalance; the longest pause in any member's delivery; and how
long D waits for its first assignment and first record.  Unlike the rebalance
scenario (one member watched), every watched member both keeps partitions and gives
one up, so a client that pauses a whole member while it hands a partition over
shows that pause here.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
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
from benchmarks.scenarios.rebalance import RATE, _unmoved_gap
from benchmarks.stats import longest_gap

TITLE = "A fourth member joins a 3-member group"
PARTITIONS = 12
BASELINE_WINDOW = 1.0  # seconds of settled delivery the baseline gap is taken over

#: (client, variant, cooperative): eager and cooperative of each client side by side
CONFIGS: list[tuple[str, str, bool]] = [
    ("aiogroup", "defaults", False),
    ("aiogroup", "defaults", True),
    ("kafka-python", "defaults", False),
    ("kafka-python", "defaults", True),
    ("confluent", "tuned", False),
    ("confluent", "tuned", True),
    # KIP-848: only on a broker that speaks it (AIOGROUP_BROKER=kafka); left out otherwise.
    ("aiogroup", "kip848", False),
    ("confluent", "kip848", False),
]

METRICS: dict[str, Callable[[dict[str, Any]], float]] = {
    key: (lambda k: lambda r: r[k])(key)
    for key in (
        "baseline_gap_s",
        "d_assigned_s",
        "d_first_record_s",
        "gap_any_s",
        "gap_unmoved_s",
        "gap_held_s",
        "unmoved_partitions",
        "unmoved_revoked",
        "settle_s",
        "d_after_trio_s",
        "rebalances",
        "d_load_s",
    )
}


def _even(members: list[Member], since: float = 0.0) -> bool:
    """``settled``, and every member holds its equal share.

    Under a cooperative protocol (and a broker answering a SyncGroup late,
    caps.cooperative_joiner_extra_generation) the group can
    pass through a complete but uneven split that the next round still changes;
    range and cooperative-sticky both end with an even split.
    """
    share = PARTITIONS // len(members)
    return settled(members, PARTITIONS, since) and all(len(m.owned) == share for m in members)


def _flowing(members: list[Member], since: float) -> bool:
    """Every owned partition has delivered since its owner's last assignment change.

    ``settled`` only asks for one record per member; a kept partition of an eager
    member may resume later than its siblings, and cutting the window before it
    does would hide the end of its pause.
    """
    for m in members:
        start = max(m.last_assignment_time(), since)
        seen: set[str] = set()
        for e in m.of("batch"):
            if e["t"] >= start:
                seen.update(e["r"])
        if not {str(p) for p in m.owned} <= seen:
            return False
    return True


def _revoked_since(m: Member, t: float) -> set[int]:
    return {p for e in m.of("revoked", "lost") if e["t"] >= t for p in e["p"]}


def _past(members: list[Member], t: float) -> bool:
    """Every member has reported something after ``t``: its stream is read that far."""
    return all(m.events and m.events[-1]["t"] > t for m in members)


async def one_rep(ctx: Context, client: str, variant: str, cooperative: bool) -> dict[str, Any]:
    topic = await ctx.broker.create_topic(f"bench-j4-{uuid.uuid4().hex[:8]}", PARTITIONS)
    group = f"bench-j4-{uuid.uuid4().hex[:8]}"
    producer = SteadyProducer(ctx.bootstrap, topic, PARTITIONS, RATE)
    await producer.start()
    members: list[Member] = []

    def spec(name: str) -> dict[str, Any]:
        return member_spec(
            ctx, client, variant, topic, group, cooperative=cooperative, client_id=name
        )

    try:
        # Started together so that they usually form the group in one round (a broker
        # that holds the first JoinGroup, caps.holds_join_half_session, gathers all
        # three; Kafka may take a round per member); a later round only delays "settled".
        for name in ("A", "B", "C"):
            members.append(await Member.spawn(name, spec(name)))
        trio = list(members)
        t_settled = await wait_until(trio, lambda: _even(trio), 90, "A+B+C settled")
        base_start = t_settled + 0.2
        base_end = base_start + BASELINE_WINDOW
        await wait_until(trio, lambda: _past(trio, base_end), 15, "baseline window")
        baseline = max(
            longest_gap(m.batch_times([p]), base_start, base_end) for m in trio for p in m.owned
        )
        before = {m.name: set(m.owned) for m in trio}

        # -- D joins -------------------------------------------------------------------
        watch, generation = await open_watch(ctx.bootstrap, group, variant)
        try:
            t_spawn = time.monotonic()
            d, t_join = await spawn_joiner(
                "D",
                spec("D"),
                ctx.plan.heartbeat_interval_ms,
                # The three joined in one round, so their heartbeat cycles run
                # together: the latest heartbeat of any of them places the phase.
                max(m.heartbeat_anchor() for m in trio),
            )
            members.append(d)
            quad = [*trio, d]
            t_stable = await wait_until(quad, lambda: _even(quad, t_join), 90, "A+B+C+D settled")
            t_end = await wait_until(
                quad,
                lambda: _flowing(quad, t_join),
                15,
                "every partition delivering after D joined",
            )
            t_d_start = d.first("starting")
            t_d_assigned = d.first("assigned", pred=lambda e: bool(e["p"]))
            t_d_record = d.first("batch")
            assert t_d_start is not None and t_d_assigned is not None and t_d_record is not None
            even = max(m.last_assignment_time() for m in quad)
            judged = await judge_change(
                watch, t_d_start, {"A", "B", "C", "D"}, PARTITIONS, even, generation
            )
        finally:
            await watch.stop()
        kept = {m.name: before[m.name] & m.owned for m in trio}
        # Kept partitions the member was nonetheless told to give up on the way (all of
        # them under eager; under cooperative, one handed back when a round is redone).
        bounced = {m.name: kept[m.name] & _revoked_since(m, t_join) for m in trio}

        def worst(parts: dict[str, set[int]]) -> float:
            gaps = [_unmoved_gap(m, parts[m.name], t_join, t_end) for m in trio]
            return max((g for g in gaps if not math.isnan(g)), default=float("nan"))

        return {
            "ok": True,
            "baseline_gap_s": baseline,
            "d_assigned_s": t_d_assigned - t_d_start,
            "d_first_record_s": t_d_record - t_d_start,
            "d_after_trio_s": t_d_assigned - (first_callback(trio, t_d_start) or float("nan")),
            "d_load_s": (d.first("loaded") or t_spawn) - t_spawn,
            "gap_any_s": max(longest_gap(m.batch_times(), t_join, t_end) for m in trio),
            # NaN when there is no such partition (Outcome.summarize leaves those runs out).
            "gap_unmoved_s": worst(kept),
            "gap_held_s": worst({n: kept[n] - bounced[n] for n in kept}),
            "unmoved_partitions": float(sum(len(k) for k in kept.values())),
            "unmoved_revoked": float(sum(len(b) for b in bounced.values())),
            # From the broker's view (broker_view.judge_change), D's start as the origin.
            "settle_s": judged["settle_s"],
            "members_settle_s": t_stable - t_d_start,
            "rebalances": judged["rebalances"],
            "counted_as": judged["rebalances_counted_as"],
            "settle_from": judged["settle_from"],
            "timeline": {
                m.name: timeline.window(m.events, t_d_start, t_d_assigned + 0.05, t_d_start)
                for m in quad
            },
            "split_before": {n: sorted(p) for n, p in before.items()},
            "split_after": {m.name: sorted(m.owned) for m in quad},
            "lost_events": sum(len(m.of("lost")) for m in trio),
        }
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
    outcomes = await run_group_configs(ctx, "join_fourth", configs, one_rep, METRICS, _brief)
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
        f"D first record {r['d_first_record_s']:.2f}s, unmoved gap {r['gap_unmoved_s']:.2f}s "
        f"over {r['unmoved_partitions']:.0f} partitions, any gap {r['gap_any_s']:.2f}s, "
        f"baseline {r['baseline_gap_s']:.2f}s"
    )
