"""``make demo``: what a cooperative, awaited-listener group member does that others do not.

Starts the embedded broker, produces a steady stream into a 6-partition topic and
runs ``GroupConsumer`` members with the cooperative-sticky assignor.  Every member
writes what happens to it into one ownership history (a JSON-lines file: assigned,
revoked, lost, delivered, committed) and an observer samples the broker's own view
of the group (DescribeGroups) into the same file, so each step is judged from
outside the members, not by what a member says about itself:

1. **Cooperative rebalancing keeps partitions flowing** - a third member joins; the
   two running members give up only the partitions that move and keep delivering
   the others throughout the rebalance.
2. **A slow async listener is not evicted** - during that rebalance one member's
   ``on_partitions_revoked`` takes twice the session timeout (an awaited coroutine,
   heartbeats continue); it keeps its member id and loses nothing.
3. **Revoked vs lost** - one member stops cleanly: ``on_partitions_revoked`` (it
   commits) and its partitions move at once.  Another member, in a process of its
   own, is frozen (SIGSTOP: a stuck process, a long GC pause, a VM migration) past
   its session timeout: the broker drops it and hands its partitions over while it
   cannot say anything.  Only once the broker's view shows that is it woken
   (SIGCONT): its membership is gone, so its listener is told
   ``on_partitions_lost`` - not revoked: the partitions already belong to someone
   else, so it commits nothing for them - and it rejoins the group.  Its own log
   lines, printed, say how it concluded that and under which member id it rejoined.
4. **A check that holds on every run** - the group drains the topic; the committed
   offsets must equal the log end *as acknowledged to the producer*, no
   acknowledged record may be missing, and the ownership history must be clean
   (no partition held by two members at once, no commit going backwards, no record
   delivered or committed by a member the broker had already dropped).

Why the check uses the producer's acknowledgements: an earlier demo waited until
``lag()`` was 0 and then compared commits to the log end; it once ended "committed
1400 vs log end 1410" on all six partitions.  ``lag()`` is the high watermark of the
*last Fetch response* minus the position, and the consumers, caught up, had their
last response from before the final round of produced batches, so "lag 0" was true
of a stale high watermark.  (ListOffsets(latest) is no better ground truth on the
embedded broker: it returns the last batch's base offset + 1.)  The producer's acks
are the exact log end.

Why the demo waits for the broker before waking the frozen member: a member cannot
tell from its own clock whether the group moved on while it was stopped (the broker
may not have noticed yet).  Java's rule is to ask: the woken member heartbeats, and
only the coordinator's answer (UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION once the
group has rebalanced without it) says the membership is lost; a client that judges
by its own session clock says so at once.  Because the group has provably moved on
before the member wakes, "lost" is the right outcome under either rule, and the
embedded broker gives that answer (UNKNOWN_MEMBER_ID to the woken member's
heartbeat, checked with aiokafka as the peer client).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.client import AIOKafkaClient

from aiogroup import AsyncConsumerRebalanceListener, GroupConsumer, TopicPartition
from aiogroup._support.timeouts import wait_for
from aiogroup.errors import KafkaError
from aiogroup.testing import KafkaBroker, unique_name
from aiogroup.testing.history import (
    Event,
    HistoryRecorder,
    MemberRecorder,
    check_history,
    load_history,
)
from aiogroup.testing.observer import GroupObserver, describe_group
from aiogroup.testing.process import spawn_owned, terminate

PARTITIONS = 6
SESSION_TIMEOUT_MS = 6000
SLOW_LISTENER_S = 2 * SESSION_TIMEOUT_MS / 1000
T0 = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - T0:5.1f}s] {message}", flush=True)


def fmt(partitions: Iterable[TopicPartition | int]) -> str:
    nums = sorted(p if isinstance(p, int) else p.partition for p in partitions)
    return "{" + ", ".join(map(str, nums)) + "}"


# -- one member (in this process or in a process of its own) ----------------------------


class DemoMember(AsyncConsumerRebalanceListener):
    """A careful application: commits what it processed after every batch and in its
    revoke listener, commits nothing for partitions it lost.  Everything it does is
    written into the shared ownership history; every listener call is printed."""

    def __init__(
        self, name: str, bootstrap: str, group: str, topic: str, history: HistoryRecorder
    ) -> None:
        self.name = name
        self.topic = topic
        self.history: MemberRecorder = history.member(name)
        self.consumer = GroupConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=name,  # the broker's view names members by it
            auto_offset_reset="earliest",
            partition_assignment_strategy=("cooperative-sticky",),
            session_timeout_ms=SESSION_TIMEOUT_MS,
            heartbeat_interval_ms=1000,
            enable_auto_commit=False,  # every commit explicit, so in the history
        )
        #: partition -> next offset to commit (what the application has processed).
        self.positions: dict[TopicPartition, int] = {}
        #: partition -> the last offset the broker accepted from this member.
        self.committed: dict[TopicPartition, int] = {}
        self.slow_revoke_s = 0.0
        self.refused = 0
        self.task: asyncio.Task[None] | None = None

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.history.revoke_started(revoked)
        try:
            say(f"{self.name}: on_partitions_revoked({fmt(revoked)})")
            if revoked and self.slow_revoke_s:
                say(f"{self.name}: ...its revoke listener awaits {self.slow_revoke_s:.0f}s of work")
                await asyncio.sleep(self.slow_revoke_s)
                self.slow_revoke_s = 0.0
                say(f"{self.name}: ...revoke listener done")
            await self.commit({tp: o for tp, o in self.positions.items() if tp in revoked})
        finally:
            for tp in revoked:
                self.positions.pop(tp, None)
                self.committed.pop(tp, None)
            self.history.revoke_ended(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.history.assigned(assigned)
        say(
            f"{self.name}: on_partitions_assigned({fmt(assigned)}) "
            f"-> owns {fmt(self.consumer.assignment())}"
        )

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.history.lost(lost)
        say(
            f"{self.name}: on_partitions_lost({fmt(lost)}) - already someone else's: "
            "nothing committed for them"
        )
        for tp in lost:
            self.positions.pop(tp, None)
            self.committed.pop(tp, None)

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit; record it only if the broker accepted it."""
        if not offsets:
            return
        sent = time.monotonic()
        try:
            await self.consumer.commit(offsets)
        except KafkaError:
            # During a rebalance the broker refuses commits (REBALANCE_IN_PROGRESS on
            # the embedded broker); the next round of the poll loop commits again.
            self.refused += 1
            return
        self.history.committed(offsets, sent_at=sent)
        self.committed.update(offsets)

    async def start(self) -> None:
        self.consumer.subscribe([self.topic], listener=self)
        await self.consumer.start()  # returns once the member has its first assignment
        self.task = asyncio.create_task(self._consume(), name=f"consume-{self.name}")

    async def _consume(self) -> None:
        while True:
            batches = await self.consumer.getmany(timeout_ms=200)
            for tp, records in batches.items():
                if records:
                    self.history.delivered(tp.topic, tp.partition, [r.offset for r in records])
                    self.positions[tp] = records[-1].offset + 1
            # Everything processed and not yet committed: this batch, and a commit the
            # broker refused earlier (a refused last batch would otherwise wait forever).
            await self.commit(
                {tp: o for tp, o in self.positions.items() if self.committed.get(tp) != o}
            )

    async def stop(self) -> None:
        """Leave cleanly: the revoke listener commits, then LeaveGroup."""
        self.history.leaving()
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.consumer.stop()


async def member_process(spec: dict[str, Any]) -> None:
    """``python -m aiogroup.testing.demo --member SPEC``: one member until SIGTERM."""
    global T0
    T0 = float(spec["t0"])
    # The coordinator's INFO lines say why the member rejoins (the broker's answer).
    logging.basicConfig(
        filename=spec["log"], level=logging.INFO, format="%(created).3f %(name)s %(message)s"
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    history = HistoryRecorder(spec["history"])
    member = DemoMember(spec["name"], spec["bootstrap"], spec["group"], spec["topic"], history)
    await member.start()
    try:
        await stop.wait()
    finally:
        await member.stop()
        history.close()


# -- what the history says ----------------------------------------------------------------


def holdings(events: Iterable[Event]) -> dict[str, set[int]]:
    """What each member holds: assigned, until its revoke listener returned or it
    was told lost (the rule the history checker applies)."""
    held: dict[str, set[int]] = {}
    for e in events:
        parts = {p for _t, p in e.partitions}
        if e.kind == "assigned":
            held.setdefault(e.member, set()).update(parts)
        elif e.kind in ("revoke_ended", "lost"):
            held.setdefault(e.member, set()).difference_update(parts)
    return held


def balanced(held: dict[str, set[int]], members: Iterable[str]) -> bool:
    names = list(members)
    owned = [p for m in names for p in held.get(m, set())]
    return len(owned) == PARTITIONS == len(set(owned)) and all(held.get(m) for m in names)


def table(held: dict[str, set[int]], names: Iterable[str], state: dict[str, str]) -> None:
    print("   member     partitions", flush=True)
    for name in names:
        print(f"   {name:<10} {fmt(held.get(name, set())):<21} {state.get(name, '')}", flush=True)


async def produce(bootstrap: str, topic: str, stop: asyncio.Event, ends: dict[int, int]) -> None:
    """Produce rounds of 60 events until ``stop``; ``ends`` is the log end as acknowledged."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        i = 0
        while not stop.is_set():
            futures = []
            for _ in range(60):
                futures.append(
                    await producer.send(topic, f"event-{i}".encode(), partition=i % PARTITIONS)
                )
                i += 1
            for meta in await asyncio.gather(*futures):
                ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
            with contextlib.suppress(asyncio.TimeoutError):
                await wait_for(stop.wait(), 0.1)
    finally:
        await producer.stop()


async def wait_until(predicate: Callable[[], bool], timeout: float) -> bool:
    """Poll a condition the demo can only observe from outside (the history file,
    the broker), bounded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.2)
    return False


async def broker_view(bootstrap: str, group: str) -> str:
    """The group as its coordinator describes it (DescribeGroups): state and members.

    Only the members: the embedded broker leaves assignments out of DescribeGroups
    (``BrokerCaps.describe_groups_reports_assignment``); who holds what comes from
    the ownership history.
    """
    client = AIOKafkaClient(bootstrap_servers=bootstrap, client_id="aiogroup-demo")
    try:
        await client.bootstrap()
        sample = await describe_group(client, group)
    finally:
        await client.close()
    return f"{sample.state}, members {', '.join(sorted(sample.members)) or 'none'}"


@dataclass
class Frozen:
    """The member in a process of its own, to be frozen and woken."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def coordinator_log(self, after: float, limit: int = 6) -> list[str]:
        """The member's coordinator log lines (INFO and up) since ``after``
        (``time.time()``): why it concluded its membership was over, and its rejoin."""
        lines = []
        with contextlib.suppress(OSError):
            for line in self.log.read_text().splitlines():
                stamp, _, text = line.partition(" ")
                name, _, message = text.partition(" ")
                with contextlib.suppress(ValueError):
                    if name == "aiogroup.coordinator" and float(stamp) >= after:
                        lines.append(_TP_REPR.sub(r"\1", message))
        return lines[:limit]


#: History events written by a member's listener, and the callback each stands for.
_LISTENER_CALLS = {
    "lost": "on_partitions_lost",
    "revoke_started": "on_partitions_revoked",
    "assigned": "on_partitions_assigned",
}

#: ``TopicPartition(topic='t', partition=3)`` in a log line, shortened to ``3``.
_TP_REPR = re.compile(r"TopicPartition\(topic='[^']*', partition=(\d+)\)")


async def main() -> int:
    checks: dict[str, bool] = {}
    workdir = Path(tempfile.mkdtemp(prefix="aiogroup-demo-"))
    history_path = workdir / "history.jsonl"
    history = HistoryRecorder(history_path)
    frozen: Frozen | None = None
    ends: dict[int, int] = {}

    def events() -> list[Event]:
        return load_history(history_path)

    try:
        async with KafkaBroker() as broker:
            bootstrap = broker.bootstrap_servers
            topic = await broker.create_topic(unique_name("demo-events"), PARTITIONS)
            group = unique_name("demo-group")
            say(f"{broker.mode} broker at {bootstrap}; topic {topic}, group {group}")
            say(f"ownership history: {history_path}")
            stop_producing = asyncio.Event()
            producer_task = asyncio.create_task(produce(bootstrap, topic, stop_producing, ends))
            observer = await GroupObserver(bootstrap, group, history, interval=0.2).start()
            state: dict[str, str] = {}

            alpha = DemoMember("alpha", bootstrap, group, topic, history)
            bravo = DemoMember("bravo", bootstrap, group, topic, history)
            await alpha.start()
            say("alpha started")
            await bravo.start()
            say("bravo started")
            await wait_until(lambda: balanced(holdings(events()), ["alpha", "bravo"]), 60)
            say("two members, cooperative-sticky:")
            table(holdings(events()), ["alpha", "bravo"], state)

            # 1 + 2: charlie (a process of its own) joins while alpha's revoke listener is slow.
            say(f"--- charlie joins; alpha's revoke listener will take {SLOW_LISTENER_S:.0f}s")
            alpha.slow_revoke_s = SLOW_LISTENER_S
            alpha_id = alpha.consumer.member_id
            before = holdings(events())
            kept = {n: set(before.get(n, set())) for n in ("alpha", "bravo")}
            joined_at = time.monotonic()
            spec = {
                "name": "charlie",
                "bootstrap": bootstrap,
                "group": group,
                "topic": topic,
                "history": str(history_path),
                "log": str(workdir / "charlie.log"),
                "t0": T0,
            }
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
            proc = spawn_owned(
                [sys.executable, "-m", "aiogroup.testing.demo", "--member", json.dumps(spec)],
                sys.stdout.buffer,
                env=env,
            )
            frozen = Frozen("charlie", proc, workdir / "charlie.log")
            three = ["alpha", "bravo", "charlie"]
            await wait_until(lambda: balanced(holdings(events()), three), 120)
            done_at = time.monotonic()
            after = holdings(events())
            flowing = {}
            for name in ("alpha", "bravo"):
                stayed = kept[name] & after.get(name, set())
                flowing[name] = sum(
                    1
                    for e in events()
                    if e.member == name
                    and e.kind == "delivered"
                    and joined_at <= e.t <= done_at
                    and any(s[1] in stayed for s in e.spans)
                )
            say(f"rebalance took {done_at - joined_at:.1f}s:")
            table(after, three, state)
            say(
                "batches delivered on kept partitions during it: "
                + ", ".join(f"{name} {n}" for name, n in flowing.items())
            )
            checks["kept partitions kept flowing during the rebalance"] = all(flowing.values())
            alpha_calls = [e.kind for e in events() if e.member == "alpha"]
            checks[
                f"alpha not evicted by a {SLOW_LISTENER_S:.0f}s listener "
                f"(session timeout {SESSION_TIMEOUT_MS / 1000:.0f}s)"
            ] = alpha.consumer.member_id == alpha_id and "lost" not in alpha_calls

            # 3a: revoked - a clean stop.
            say("--- bravo stops cleanly: on_partitions_revoked (it commits), LeaveGroup")
            bravo_parts = set(holdings(events()).get("bravo", set()))
            stopped_at = time.monotonic()
            await bravo.stop()
            state["bravo"] = "stopped"
            two = ["alpha", "charlie"]
            moved = await wait_until(lambda: balanced(holdings(events()), two), 60)
            took = time.monotonic() - stopped_at
            say(f"bravo's {fmt(bravo_parts)} moved {took:.1f}s after its stop()")
            table(holdings(events()), three, state)
            bravo_calls = [e.kind for e in events() if e.member == "bravo" and e.t >= stopped_at]
            checks["bravo's partitions revoked (not lost) and handed over at its clean stop"] = (
                moved and "revoke_ended" in bravo_calls and "lost" not in bravo_calls
            )

            # 3b: lost - a member frozen past its session.
            await wait_until(
                lambda: any(
                    e.member == "charlie" and e.kind == "delivered" and e.t > stopped_at
                    for e in events()
                ),
                30,
            )
            charlie_parts = set(holdings(events()).get("charlie", set()))
            say(
                f"--- charlie (pid {proc.pid}) is frozen with SIGSTOP while it owns "
                f"{fmt(charlie_parts)}: it can neither heartbeat nor say anything"
            )
            history.add("charlie", "frozen")
            frozen.signal(signal.SIGSTOP)
            state["charlie"] = "frozen"
            frozen_at = time.monotonic()

            def dropped_and_handed_over() -> bool:
                evs = events()
                gone = any(
                    e.member == "charlie" and e.kind == "gone" and e.t > frozen_at for e in evs
                )
                return gone and charlie_parts <= holdings(evs).get("alpha", set())

            await wait_until(dropped_and_handed_over, 60)
            handed_at = time.monotonic()
            say(
                f"{handed_at - frozen_at:.1f}s later the broker says: "
                f"{await broker_view(bootstrap, group)} - charlie's session "
                f"({SESSION_TIMEOUT_MS / 1000:.0f}s) expired, its partitions handed over"
            )
            table(holdings(events()), three, state)
            checks["charlie's partitions handed over only after the broker dropped it"] = (
                dropped_and_handed_over()
            )

            say("--- charlie is woken with SIGCONT")
            woke_wall = time.time()
            woke = time.monotonic()
            frozen.signal(signal.SIGCONT)
            state["charlie"] = ""
            rejoined = await wait_until(
                lambda: (
                    any(
                        e.member == "charlie" and e.kind == "assigned" and e.t > woke
                        for e in events()
                    )
                    and balanced(holdings(events()), two)
                ),
                60,
            )
            for line in frozen.coordinator_log(woke_wall):
                say(f"charlie's log: {line}")
            table(holdings(events()), three, state)
            # What charlie's listener was told after waking, up to its first new partitions.
            told: list[Event] = []
            for e in events():
                if e.member == "charlie" and e.t > woke and e.kind in _LISTENER_CALLS:
                    told.append(e)
                    if e.kind == "assigned" and e.partitions:
                        break
            say(
                "charlie's listener after waking: "
                + (
                    ", ".join(
                        f"{_LISTENER_CALLS[e.kind]}({fmt(p for _t, p in e.partitions)})"
                        for e in told
                    )
                    or "nothing"
                )
            )
            checks["charlie was told on_partitions_lost (not revoked) for what it held"] = (
                bool(told)
                and told[0].kind == "lost"
                and {p for _t, p in told[0].partitions} == charlie_parts
                and not any(e.kind == "revoke_started" for e in told)
            )
            checks["charlie rejoined and shares the partitions again"] = rejoined

            # 4: drain to the acknowledged log end, stop, compare.
            stop_producing.set()
            await producer_task
            say(f"producer stopped; acknowledged log end: {dict(sorted(ends.items()))}")

            async with GroupConsumer(bootstrap_servers=bootstrap, group_id=group) as checker:

                async def committed() -> dict[int, int | None]:
                    return {
                        p: await checker.committed(TopicPartition(topic, p))
                        for p in range(PARTITIONS)
                    }

                deadline = time.monotonic() + 60
                # Polled: the committed offsets are the broker's, no member's event.
                while time.monotonic() < deadline and await committed() != ends:  # noqa: ASYNC110
                    await asyncio.sleep(0.2)
                frozen.signal(signal.SIGTERM)
                await asyncio.get_running_loop().run_in_executor(None, proc.wait, 30)
                await alpha.stop()
                say("charlie and alpha stopped cleanly (revoked, committed, left the group)")
                say(
                    "commits the broker refused during rebalances (retried on the next "
                    f"poll): alpha {alpha.refused}, bravo {bravo.refused} - expected, not a "
                    "failure: a commit sent while the group rebalances is answered "
                    "REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION, and the checks below show "
                    "nothing was lost or committed backwards"
                )
                final = await committed()
            await observer.stop()

            print("   partition  committed  acked log end", flush=True)
            for p in range(PARTITIONS):
                print(f"   {p:>9}  {final[p]!s:>9}  {ends.get(p, 0):>13}", flush=True)
            checks["every acknowledged event consumed and committed"] = all(
                final[p] == ends.get(p, 0) for p in range(PARTITIONS)
            )
            report = check_history(
                events(), produced={TopicPartition(topic, p): e for p, e in ends.items()}
            )
            say(
                f"ownership history: {report.deliveries} deliveries, {report.rebalances} "
                f"rebalances, {report.duplicates} records delivered twice (at least once: "
                "only what a member that lost its partitions had not yet committed)"
            )
            if not report.ok:
                print(report.summary(), flush=True)
            checks["no acknowledged event missed"] = not report.lost
            checks["no partition held by two members at once; no commit went backwards"] = not (
                report.overlaps or report.backwards_commits
            )
            checks["charlie delivered and committed nothing after the broker dropped it"] = not (
                report.zombie_commits or report.zombie_deliveries
            )
            checks["the ownership history is clean"] = report.ok
    finally:
        if frozen is not None and frozen.proc.poll() is None:
            frozen.signal(signal.SIGCONT)
            terminate(frozen.proc)
        history.close()
    say(f"{sum(ends.values())} events produced")
    for name, ok in checks.items():
        print(f"   {'ok  ' if ok else 'FAIL'} {name}", flush=True)
    held = sum(checks.values())
    passed = bool(checks) and held == len(checks)
    print(
        f"demo result: {'PASS' if passed else 'FAILED'} - {held} of {len(checks)} checks hold",
        flush=True,
    )
    if passed:
        shutil.rmtree(workdir, ignore_errors=True)
        return 0
    print(f"   history and charlie's log kept in {workdir}", flush=True)
    return 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m aiogroup.testing.demo")
    parser.add_argument("--member", help="(internal) run one member, spec as JSON")
    args = parser.parse_args()
    if args.member:
        asyncio.run(member_process(json.loads(args.member)))
        sys.exit(0)
    sys.exit(asyncio.run(main()))
