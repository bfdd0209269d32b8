"""Direct check of the join clock: ``python -m benchmarks.join_clock [--reps 3] [--parallel 1]``.

Issue 24: the join rows of docs/benchmarks.md and a direct measurement from outside
disagreed.  This script times one join several ways in the same repetition, so the
part that differs can be named: A consumes an 8-partition topic fed at 1000 records/s
(session 6 s, heartbeat 1 s); B starts (loaded first, then started at a random point
of one heartbeat interval, as in the scenarios: :func:`benchmarks.group.spawn_joiner`);
from B's own event stream

* ``spawn->loaded``: interpreter start, imports and adapter construction - what the
  old clock (from the orchestrator's spawn of B's process) counted on top of the join,
* ``start->assigned``: from the member's call into its client (construct, ``start()``,
  ``subscribe()``) to its first non-empty assignment, in the member process,
* ``after A heard``: from A's first rebalance callback to B's first partitions - the
  join without the wait for A's next heartbeat (a random share of an interval),
* ``settle``: from the same start until the broker (an outside observer's
  DescribeGroups / ConsumerGroupDescribe) shows the group Stable with both members
  holding their share,
* ``rebalances``: generations (classic) or group epochs (KIP-848) the broker went
  through, read from the broker, not the callbacks.

Configurations run interleaved (every one once, then again) with ``--parallel`` groups
at a time (the benchmark runs 4; 1 keeps the machine quiet).  Every member's group
requests are traced (:mod:`benchmarks.timeline`) and printed with ``--timeline``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
import uuid
from typing import Any

from benchmarks import timeline
from benchmarks.broker_view import GroupWatch, rebalance_count
from benchmarks.group import (
    JOIN_PHASE,
    Member,
    SteadyProducer,
    first_callback,
    gather_limited,
    join_phases,
    settled,
    spawn_joiner,
    wait_until,
)

PARTITIONS = 8
RATE = 1000
CONFIGS = [
    ("aiogroup", "defaults", False),
    ("aiokafka", "defaults", False),
    ("confluent", "tuned", False),
    ("aiogroup", "defaults", True),
    ("confluent", "tuned", True),
    ("aiogroup", "kip848", False),
    ("confluent", "kip848", False),
]


def _spec(
    bootstrap: str, client: str, variant: str, coop: bool, topic: str, group: str, name: str
) -> dict[str, Any]:
    return {
        "bootstrap": bootstrap,
        "client": client,
        "variant": variant,
        "topic": topic,
        "group_id": group,
        "cooperative": coop,
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 1000,
        "client_id": name,
        "timeline": True,
    }


async def one(broker: Any, client: str, variant: str, coop: bool) -> dict[str, Any]:
    topic = await broker.create_topic(f"jc-{uuid.uuid4().hex[:8]}", PARTITIONS)
    group = f"jc-{uuid.uuid4().hex[:8]}"
    bs = broker.bootstrap_servers
    producer = SteadyProducer(bs, topic, PARTITIONS, RATE)
    await producer.start()
    watch = GroupWatch(bs, group, "consumer" if variant == "kip848" else "classic")
    members: list[Member] = []
    try:
        a = await Member.spawn("A", _spec(bs, client, variant, coop, topic, group, "A"))
        members.append(a)
        await wait_until([a], lambda: settled([a], PARTITIONS), 60, "A consuming")
        await watch.start()
        await asyncio.sleep(0.3)  # a few samples of the settled group
        gen_before = None if watch.protocol == "consumer" else await watch.generation()
        t_spawn = time.monotonic()
        anchor = a.heartbeat_anchor()
        b, _go = await spawn_joiner(
            "B", _spec(bs, client, variant, coop, topic, group, "B"), 1000, anchor
        )
        members.append(b)
        t_members = await wait_until(
            members, lambda: settled([a, b], PARTITIONS, t_spawn), 60, "A+B settled"
        )
        t_start = b.first("starting")
        t_assigned = b.first("assigned", pred=lambda e: bool(e["p"]))
        assert t_start is not None and t_assigned is not None
        even = max(a.last_assignment_time(), b.last_assignment_time())
        await asyncio.sleep(3.0)  # a tail: a rebalance after the split is counted too
        t_settle = watch.settled_at(t_start, {"A", "B"}, PARTITIONS, even)
        count, how = await rebalance_count(watch, t_spawn, time.monotonic(), gen_before)
        return {
            "ok": True,
            "spawn_loaded": (b.first("loaded") or t_spawn) - t_spawn,
            "start_assigned": t_assigned - t_start,
            "after_a": t_assigned - (first_callback([a], t_start) or float("nan")),
            "settle": (t_settle - t_start) if t_settle else float("nan"),
            "members_settled": t_members - t_start,
            "rebalances": count,
            "phase": JOIN_PHASE.get(),
            # Where A's heartbeats fell in the cycle the phase is counted in (traced
            # clients only): the anchor is A's assignment callback, not its heartbeat.
            "a_heartbeat_phase": _heartbeat_phase(a, anchor, t_start),
            "counted_as": how,
            "timeline_b": timeline.window(b.events, t_start, t_assigned + 0.05, t_start),
            "timeline_a": timeline.window(a.events, t_start, t_assigned + 0.05, t_start),
        }
    except Exception as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        for m in members:
            await m.stop()
        await watch.stop()
        await producer.stop()


def _heartbeat_phase(a: Member, anchor: float, before: float) -> float | None:
    sent = [
        e["sent"]
        for e in a.events
        if e.get("ev") == "req"
        and e.get("api") in ("Heartbeat", "ConsumerGroupHeartbeat")
        and anchor < e["sent"] < before
    ]
    return ((sent[-1] - anchor) % 1.0) if sent else None  # 0: the anchor was a heartbeat


def _name(client: str, variant: str, coop: bool) -> str:
    return f"{client}/{variant} {'cooperative' if coop else 'eager'}"


async def main_async(args: argparse.Namespace) -> None:
    from aiogroup.testing import KafkaBroker

    async with KafkaBroker() as broker:
        configs = [c for c in CONFIGS if broker.caps.supports_consumer_protocol or c[1] != "kip848"]
        if args.only:
            configs = [c for c in configs if any(o in _name(*c) for o in args.only)]
        results: dict[str, list[dict[str, Any]]] = {}
        jobs = []
        phases = join_phases(args.reps)
        for rep in range(args.reps):
            for client, variant, coop in configs:
                name = _name(client, variant, coop)

                async def job(
                    name: str = name,
                    c: tuple[str, str, bool] = (client, variant, coop),
                    phase: float = phases[rep],
                ) -> None:
                    JOIN_PHASE.set(phase)
                    r = await one(broker, *c)
                    results.setdefault(name, []).append(r)
                    brief = {k: v for k, v in r.items() if not k.startswith("timeline")}
                    print(name, json.dumps(brief, default=str), flush=True)
                    if args.timeline and r.get("ok"):
                        for who in ("a", "b"):
                            for row in r[f"timeline_{who}"]:
                                print(f"    {who.upper()} {row}", flush=True)

                jobs.append(job)
        await gather_limited(jobs, args.parallel)
        print(
            f"\nmedian/mean (s), broker {broker.mode}, {args.reps} reps, "
            f"{args.parallel} at a time, load average {os.getloadavg()[0]:.1f} at the end"
        )
        keys = ("spawn_loaded", "start_assigned", "after_a", "settle", "rebalances")
        print("config".ljust(34) + "".join(k.rjust(16) for k in keys))
        for name, runs in results.items():
            ok = [r for r in runs if r.get("ok")]
            cells = []
            for k in keys:
                vals = [r[k] for r in ok if r[k] == r[k]]
                cells.append(
                    f"{statistics.median(vals):.2f}/{statistics.mean(vals):.2f}" if vals else "-"
                )
            print(name.ljust(34) + "".join(c.rjust(16) for c in cells))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.join_clock", description=__doc__)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--timeline", action="store_true", help="print A's and B's requests")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="run only configurations whose name contains this (repeatable), e.g. 'eager'",
    )
    args = parser.parse_args(argv)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
