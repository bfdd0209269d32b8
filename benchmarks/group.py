"""Orchestration of group scenarios: member processes, a steady producer, event analysis."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import itertools
import json
import math
import random
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from benchmarks.harness import ROOT, Context, Outcome, worker_env

T = TypeVar("T")


class MemberGone(RuntimeError):
    """A member process exited or reported an error while the scenario waited on it."""


@dataclass
class Member:
    """A running ``benchmarks.member`` process and everything it has reported so far."""

    name: str
    proc: asyncio.subprocess.Process
    events: list[dict[str, Any]] = field(default_factory=list)
    owned: set[int] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    stderr: bytes = b""
    reader: asyncio.Task[None] | None = None

    @classmethod
    async def spawn(cls, name: str, spec: dict[str, Any]) -> Member:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.member",
            json.dumps(spec),
            cwd=str(ROOT),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=worker_env(),
        )
        member = cls(name, proc)
        member.reader = asyncio.create_task(member._read())
        return member

    async def _read(self) -> None:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        err_task = asyncio.create_task(self.proc.stderr.read())
        async for raw in self.proc.stdout:
            try:
                ev = json.loads(raw)
            except ValueError:
                continue
            kind = ev["ev"]
            if kind == "assigned":
                self.owned |= set(ev["p"])
            elif kind in ("revoked", "lost"):
                self.owned -= set(ev["p"])
            self.events.append(ev)
            self.changed.set()
        self.stderr = await err_task
        self.events.append({"t": time.monotonic(), "ev": "exited"})
        self.changed.set()

    # -- queries -----------------------------------------------------------------------

    def of(self, *kinds: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["ev"] in kinds]

    def first(
        self, kind: str, after: float = 0.0, pred: Callable[[dict[str, Any]], bool] | None = None
    ) -> float | None:
        for e in self.events:
            if e["ev"] == kind and e["t"] >= after and (pred is None or pred(e)):
                return float(e["t"])
        return None

    def batch_times(self, partitions: Iterable[int] | None = None) -> list[float]:
        wanted = None if partitions is None else {str(p) for p in partitions}
        return [e["t"] for e in self.of("batch") if wanted is None or wanted & set(e["r"])]

    def last_assignment_time(self) -> float:
        times = [e["t"] for e in self.of("assigned", "revoked", "lost")]
        return max(times) if times else 0.0

    def heartbeat_anchor(self) -> float:
        """Where this member's heartbeat cycle is: the last heartbeat it sent (traced
        members; confluent-kafka's from librdkafka's log), else its last assignment."""
        sent = [
            e["sent"]
            for e in self.events
            if e["ev"] == "req" and e.get("api") in ("Heartbeat", "ConsumerGroupHeartbeat")
        ]
        return max(sent) if sent else self.last_assignment_time()

    def failed(self) -> str | None:
        for e in self.events:
            if e["ev"] in ("error", "unavailable"):
                return f"{self.name}: {e['ev']}: {e.get('detail')}"
            if e["ev"] == "exited" and not self.of("closed"):
                tail = self.stderr.decode(errors="replace")[-800:]
                return f"{self.name} exited early: {tail}"
        return None

    def unavailable(self) -> str | None:
        for e in self.events:
            if e["ev"] == "unavailable":
                return str(e.get("detail"))
        return None

    # -- control -----------------------------------------------------------------------

    async def stop(self, timeout: float = 30.0) -> None:
        """Ask for a clean leave; kill if it does not exit in time."""
        if self.proc.returncode is None and self.proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.proc.stdin.write(b"stop\n")
                await self.proc.stdin.drain()
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except asyncio.TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        if self.reader is not None:
            await self.reader

    async def go(self, timeout: float = 30.0) -> float:
        """Start a member spawned with ``wait_go`` once it has loaded its modules; returns
        the time ``go`` was sent.  The join clock starts at the member's own ``starting``."""
        await wait_until([self], lambda: bool(self.of("loaded")), timeout, f"{self.name} loaded")
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        await self.proc.stdin.drain()
        return time.monotonic()

    async def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no commit - the crash case."""
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()
        if self.reader is not None:
            await self.reader


async def wait_until(
    members: list[Member], pred: Callable[[], bool], timeout: float, what: str
) -> float:
    """Wait for ``pred`` (re-checked on every member event); returns the time it held."""
    deadline = time.monotonic() + timeout
    while True:
        if pred():
            return time.monotonic()
        for m in members:
            problem = m.failed()
            if problem:
                raise MemberGone(problem)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{what} not reached within {timeout}s")
        for m in members:
            m.changed.clear()
        waits = [asyncio.create_task(m.changed.wait()) for m in members]
        try:
            await asyncio.wait(
                waits, timeout=min(remaining, 0.2), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for w in waits:
                w.cancel()


def settled(members: list[Member], partitions: int, since: float = 0.0) -> bool:
    """Every member owns a share, every partition has exactly one owner, and every owner
    has delivered since
    its last assignment change (so the assignment is in effect, not just announced)."""
    owned = [m.owned for m in members]
    if len(members) <= partitions and not all(owned):
        return False  # a member that owns nothing has not been given its share yet
    if sum(len(o) for o in owned) != partitions or set().union(*owned) != set(range(partitions)):
        return False
    for m in members:
        if not m.owned:
            continue
        changed = max(m.last_assignment_time(), since)
        if m.first("batch", after=changed) is None:
            return False
    return True


def delivery_counts(members: list[Member]) -> tuple[int, int]:
    """(records delivered, distinct offsets delivered) over all members and partitions."""
    intervals: dict[str, list[tuple[int, int]]] = {}
    for m in members:
        for e in m.of("batch"):
            for p, (first, last) in e["r"].items():
                intervals.setdefault(p, []).append((first, last))
    total = distinct = 0
    for spans in intervals.values():
        total += sum(b - a + 1 for a, b in spans)
        spans.sort()
        cur_a, cur_b = spans[0]
        for a, b in spans[1:]:
            if a > cur_b + 1:
                distinct += cur_b - cur_a + 1
                cur_a, cur_b = a, b
            else:
                cur_b = max(cur_b, b)
        distinct += cur_b - cur_a + 1
    return total, distinct


def duplicates(members: list[Member]) -> int:
    """Records delivered more than once (the same offset of a partition seen twice)."""
    total, distinct = delivery_counts(members)
    return total - distinct


class SteadyProducer:
    """Produces ``rate`` records/s round-robin, so that delivery gaps are measurable."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self._task: asyncio.Task[None] | None = None
        self._producer: Any = None
        self.sent = 0

    async def start(self) -> None:
        from aiokafka import AIOKafkaProducer

        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
        await self._producer.start()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        tick = 0.02
        per_tick = max(1, int(self.rate * tick))
        parts = itertools.cycle(range(self.partitions))
        value = b"x" * 100
        while True:
            started = time.monotonic()
            for _ in range(per_tick):
                await self._producer.send(self.topic, value, partition=next(parts))
                self.sent += 1
            await asyncio.sleep(max(0.0, tick - (time.monotonic() - started)))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._producer is not None:
            await self._producer.stop()


#: The joiner's phase in the existing members' heartbeat cycle for the repetition
#: running in this task (set by :func:`run_group_configs`, shared by every client).
JOIN_PHASE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "JOIN_PHASE", default=None
)


def join_phases(reps: int, seed: int | None = None) -> list[float]:
    """One phase per repetition, each in its own ``1/reps`` of the interval (stratified),
    in random order: every client is started at the same phases, so the medians of
    clients compare what each adds, not which heartbeat phases a draw gave it."""
    rng = random.Random(seed)
    phases = [(i + rng.random()) / reps for i in range(reps)]
    rng.shuffle(phases)
    return phases


async def spawn_joiner(
    name: str,
    spec: dict[str, Any],
    heartbeat_interval_ms: int,
    anchor: float | None = None,
) -> tuple[Member, float]:
    """Spawn a member that joins a running group, and start its join at a chosen moment.

    Two things kept the old join figures from measuring the join (issue 24).  Their clock
    started at the process spawn, so interpreter start and the client's imports were
    counted.  And with every repetition timed the same way from the group's last
    rebalance, the moment B's JoinGroup reached the coordinator fell at the same point
    of A's heartbeat cycle every time, and an eager or cooperative join waits for A's
    next heartbeat: a client whose process started 0.3 s slower missed that heartbeat
    in every repetition and paid one whole heartbeat interval more.  So the member
    loads first, then starts at a point of one heartbeat interval, and its own
    ``starting`` event (just before construct, ``start()``, ``subscribe()``) is the clock.

    The point: with ``anchor`` (the existing member's last heartbeat, or its last
    assignment: :meth:`Member.heartbeat_anchor`) and a :data:`JOIN_PHASE` set for this repetition,
    ``anchor + k * interval + phase * interval`` - the same phase for every client of
    one repetition.  Request timelines showed every client's eager join is A's next
    heartbeat plus 10-20 ms (2026-11-27, 24 runs of aiogroup, aiokafka and
    confluent-kafka), so independent random phases gave 8-sample medians 0.17-0.76 s
    apart for the same work.  Otherwise a uniformly random moment within one interval.
    Returns the member and the time its ``go`` was sent.
    """
    member = await Member.spawn(name, {**spec, "wait_go": True, "timeline": True})
    await wait_until([member], lambda: bool(member.of("loaded")), 60, f"{name} loaded")
    interval = heartbeat_interval_ms / 1000
    phase = JOIN_PHASE.get()
    if anchor is None or phase is None:
        await asyncio.sleep(random.uniform(0.0, interval))
    else:
        now = time.monotonic()
        at = anchor + phase * interval
        if at < now:
            at += math.ceil((now - at) / interval) * interval
        await asyncio.sleep(at - now)
    return member, await member.go()


def member_spec(
    ctx: Context,
    client: str,
    variant: str,
    topic: str,
    group_id: str,
    *,
    cooperative: bool,
    revoke_delay: float = 0.0,
    client_id: str | None = None,
) -> dict[str, Any]:
    return {
        "client_id": client_id,
        "bootstrap": ctx.bootstrap,
        "client": client,
        "variant": variant,
        "topic": topic,
        "group_id": group_id,
        "cooperative": cooperative,
        "session_timeout_ms": ctx.plan.session_timeout_ms,
        "heartbeat_interval_ms": ctx.plan.heartbeat_interval_ms,
        "revoke_delay": revoke_delay,
        # Group requests traced in every member (aiokafka-based clients only): the
        # join's timeline shows what the existing members did, not only the joiner.
        "timeline": True,
    }


async def gather_limited(factories: Sequence[Callable[[], Awaitable[T]]], limit: int) -> list[T]:
    """Run coroutine factories at most ``limit`` at a time, results in input order."""
    sem = asyncio.Semaphore(limit)

    async def one(f: Callable[[], Awaitable[T]]) -> T:
        async with sem:
            return await f()

    return list(await asyncio.gather(*(one(f) for f in factories)))


def first_callback(members: Iterable[Member], since: float) -> float | None:
    """When the first of ``members`` heard of a rebalance after ``since``: its first
    revoked/assigned/lost callback.  A join's time after this moment leaves out the
    wait for the existing members' next heartbeat (a random share of an interval)."""
    times = [
        e["t"] for m in members for e in m.of("revoked", "assigned", "lost") if e["t"] >= since
    ]
    return min(times) if times else None


def config_label(client: str, variant: str, cooperative: bool) -> str:
    if variant == "kip848":
        return f"{client} consumer protocol (KIP-848)"
    return f"{client}/{variant} {'cooperative' if cooperative else 'eager'}"


def failed_run(members: Iterable[Member], exc: BaseException) -> dict[str, Any]:
    """The result of a repetition that did not finish: unavailable if a client was
    missing (not installed, no cooperative mode), else the error."""
    for m in members:
        if m.unavailable():
            return {"ok": False, "unavailable": True, "error": m.unavailable()}
    return {"ok": False, "unavailable": False, "error": f"{type(exc).__name__}: {exc}"}


async def run_group_configs(
    ctx: Context,
    scenario: str,
    configs: Sequence[tuple[str, str, bool]],
    one_rep: Callable[[Context, str, str, bool], Awaitable[dict[str, Any]]],
    metrics: Mapping[str, Callable[[dict[str, Any]], float]],
    brief: Callable[[dict[str, Any]], str],
) -> dict[str, Outcome]:
    """Every (client, variant, cooperative) configuration ``ctx.plan.reps`` times, at most
    ``ctx.parallel`` groups at once (each repetition has its own group and topic)."""
    outcomes = {config_label(*c): Outcome() for c in configs}
    factories: list[Callable[[], Awaitable[None]]] = []
    phases = join_phases(ctx.plan.reps)
    for rep in range(ctx.plan.reps):
        for client, variant, coop in configs:

            async def job(rep: int, client: str, variant: str, coop: bool) -> None:
                name = config_label(client, variant, coop)
                if outcomes[name].status == "unavailable":
                    return
                JOIN_PHASE.set(phases[rep])
                result = await one_rep(ctx, client, variant, coop)
                result.setdefault("join_phase", phases[rep])
                outcomes[name].record(result)
                shown = brief(result) if result.get("ok") else str(result.get("error"))
                ctx.log(f"{scenario} rep {rep + 1} {name}: {shown}")

            factories.append(functools.partial(job, rep, client, variant, coop))
    await gather_limited(factories, ctx.parallel)
    for outcome in outcomes.values():
        outcome.summarize(metrics)
    return outcomes
