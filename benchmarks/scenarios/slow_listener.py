"""Scenario 3: A's revoke callback takes longer than the session timeout.

A consumes with ``session_timeout_ms`` (6 s); B joins; A's revoke callback commits
and then works for ``slow_revoke_seconds`` (15 s).  A client that keeps
heartbeating while the application's callback runs keeps A in the group; one that
does not gets A evicted, and A's partitions move while A still thinks it owns
them.

Judged from outside the members (issue 12): a :class:`GroupObserver` samples the
broker's DescribeGroups, and the ownership-history checker reads both members'
reports.  Reported: *overlap* - seconds during which B held a partition A had not
yet given up (A's revoke callback had not returned and A was not told it was
lost); *broker evictions* - member ids the broker dropped although the member
neither left nor crashed; the time until both members consume a clean split; and
records delivered twice.  The member's own view (it was told its partitions were
lost, or its commit on revoke was rejected) is kept as ``self_reported`` for
contrast: it is what this benchmark reported before, and it missed evictions.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from aiogroup.testing.history import HistoryRecorder
from aiogroup.testing.observer import GroupObserver
from benchmarks.group import (
    Member,
    MemberGone,
    SteadyProducer,
    duplicates,
    failed_run,
    member_spec,
    run_group_configs,
    settled,
    wait_until,
)
from benchmarks.harness import Context
from benchmarks.judge import judge, member_history

TITLE = "Slow rebalance listener"
PARTITIONS = 8
RATE = 1000

CONFIGS: list[tuple[str, str, bool]] = [
    ("aiogroup", "defaults", False),
    ("aiogroup", "defaults", True),
    ("aiokafka", "defaults", False),
    ("kafka-python", "defaults", False),
    ("kafka-python", "defaults", True),
    ("confluent", "tuned", False),
    ("confluent", "tuned", True),
    # KIP-848: only on a broker that speaks it (AIOGROUP_BROKER=kafka); left out otherwise.
    # Its revoke is the member's own step in the reconciliation, so the broker holds the
    # partitions back from B until A acknowledges them (no session/poll eviction for a
    # member that keeps heartbeating).
    ("aiogroup", "kip848", False),
    ("confluent", "kip848", False),
]

METRICS = {
    "overlap_s": lambda r: r["overlap_s"],
    "broker_evictions": lambda r: float(r["broker_evictions"]),
    "converge_s": lambda r: r["converge_s"],
    "duplicates": lambda r: float(r["duplicates"]),
}


async def one_rep(ctx: Context, client: str, variant: str, cooperative: bool) -> dict[str, Any]:
    topic = await ctx.broker.create_topic(f"bench-slow-{uuid.uuid4().hex[:8]}", PARTITIONS)
    group = f"bench-slow-{uuid.uuid4().hex[:8]}"
    producer = SteadyProducer(ctx.bootstrap, topic, PARTITIONS, RATE)
    await producer.start()
    delay = ctx.plan.slow_revoke_seconds
    members: list[Member] = []
    broker_view = HistoryRecorder()
    observer = await GroupObserver(
        ctx.bootstrap, group, broker_view, protocol="consumer" if variant == "kip848" else "classic"
    ).start()
    ids = {n: f"{n}-{uuid.uuid4().hex[:8]}" for n in ("A", "B")}
    try:
        a = await Member.spawn(
            "A",
            member_spec(
                ctx,
                client,
                variant,
                topic,
                group,
                cooperative=cooperative,
                revoke_delay=delay,
                client_id=ids["A"],
            ),
        )
        members.append(a)
        await wait_until([a], lambda: settled([a], PARTITIONS), 60, "A consuming")
        t_join = time.monotonic()
        b = await Member.spawn(
            "B",
            member_spec(
                ctx, client, variant, topic, group, cooperative=cooperative, client_id=ids["B"]
            ),
        )
        members.append(b)

        def converged() -> bool:
            # A clean split, and A out of its slow callback (else the split is not final).
            revokes = len([e for e in a.of("revoked") if e["p"]])
            return settled([a, b], PARTITIONS, t_join) and len(a.of("revoke_done")) >= revokes

        t_conv = await wait_until(members, converged, delay * 3 + 60, "A+B converged")
        # Let anything the slow callback set off (a late rejoin) show up before judging.
        await wait_until(
            members, lambda: False if not a.events else a.events[-1]["t"] > t_conv + 2, 10, "tail"
        )
        lost = len(a.of("lost"))
        commit_errors = len(a.of("commit_error"))
        await observer.sampled()
        report = judge(
            broker_view.events(),
            member_history(a, ids["A"], topic, slow_revoke=delay > 0),
            member_history(b, ids["B"], topic, slow_revoke=False),
        )
        return {
            "ok": True,
            "overlap_s": report.overlap_seconds,
            "overlaps": len(report.overlaps),
            "broker_evictions": len(report.evictions),
            "evicted": bool(report.evictions),
            "self_reported": bool(lost or commit_errors),
            "a_lost_events": lost,
            "a_commit_errors": commit_errors,
            "converge_s": t_conv - t_join,
            "duplicates": duplicates(members),
            "checker": report.counts(),
        }
    except (MemberGone, TimeoutError) as exc:
        return failed_run(members, exc)
    finally:
        for m in members:
            await m.stop()
        await producer.stop()
        await observer.stop()


async def run(ctx: Context) -> dict[str, Any]:
    configs = CONFIGS
    if not ctx.broker.caps.supports_consumer_protocol:
        configs = [c for c in CONFIGS if c[1] != "kip848"]
    outcomes = await run_group_configs(ctx, "slow-listener", configs, one_rep, METRICS, _brief)
    return {
        "partitions": PARTITIONS,
        "revoke_seconds": ctx.plan.slow_revoke_seconds,
        "session_timeout_ms": ctx.plan.session_timeout_ms,
        "parallel": ctx.parallel,
        "configs": {name: o.to_json() for name, o in outcomes.items()},
    }


def _brief(r: dict[str, Any]) -> str:
    return (
        f"overlap {r['overlap_s']:.1f}s broker evictions {r['broker_evictions']} "
        f"(self-reported {r['self_reported']}) converge {r['converge_s']:.1f}s "
        f"dups {r['duplicates']}"
    )
