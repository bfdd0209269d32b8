"""One chaos run: a topic under steady load, a group, its history and its observer.

Every member - in this process (:class:`group_harness.Member`), in a peer client's
thread (:mod:`peers`) or in a process of its own (:mod:`tests.chaos.member_proc`) -
appends to one JSON-lines history file; the :class:`GroupObserver` adds the
broker's view.  :meth:`ChaosRun.judge` stops the load, waits until every produced
record was handed to some member, and returns the checker's report.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from group_harness import SESSION_MS, Load, Member

from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.history import HistoryRecorder, HistoryReport, check_history, load_history
from aiogroup.testing.observer import GroupObserver
from aiogroup.testing.process import sigstop

ROOT = Path(__file__).resolve().parents[2]
SESSION_S = SESSION_MS / 1000
DRAIN_TIMEOUT = 90.0
#: Figures of every judged run, appended for docs/reliability.md (see `make chaos`).
RESULTS = os.environ.get("AIOGROUP_CHAOS_RESULTS")


class ChaosRun:
    def __init__(
        self,
        broker: KafkaBroker,
        tmp: Path,
        scenario: str,
        seed: int,
        partitions: int = 4,
        *,
        pace: float = 0.05,
        group_protocol: str = "classic",
    ) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap_servers
        self.scenario = scenario
        self.seed = seed
        self.rng = random.Random(f"{scenario}:{seed}")
        self.partitions = partitions
        self.topic = unique_name("chaos")
        self.group = unique_name("chaos-group")
        self.path = tmp / "history.jsonl"
        self.history = HistoryRecorder(self.path)
        self.progress = asyncio.Event()
        self.members: list[Member] = []
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.faults = 0
        self._pace = pace
        #: "consumer": every member speaks KIP-848, observed with ConsumerGroupDescribe;
        #: "auto": members choose (an online migration), observed with whichever answers.
        self.group_protocol = group_protocol
        self.load: Load | None = None
        self.observer: GroupObserver | None = None
        #: Scenario figures published with the checker's counts (settle time, ...).
        self.figures: dict[str, Any] = {}
        self._report: HistoryReport | None = None
        self._published = False

    async def __aenter__(self) -> ChaosRun:
        await self.broker.create_topic(self.topic, self.partitions)
        self.observer = await GroupObserver(
            self.bootstrap, self.group, self.history, protocol=self.group_protocol
        ).start()
        self.load = Load(self.bootstrap, self.topic, self.partitions, self.history, self._pace)
        await self.load.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.load is not None:
            await self.load.stop()
        for m in self.members:
            with contextlib.suppress(Exception):
                await m.abort()
        for proc in self.procs.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                await proc.wait()
        if self.observer is not None:
            await self.observer.stop()
        self.history.close()

    # -- members ------------------------------------------------------------------------

    async def member(self, name: str, strategy: tuple[str, ...], **options: Any) -> Member:
        if self.group_protocol == "consumer":
            options.setdefault("group_protocol", self.group_protocol)
        m = Member(
            name,
            self.bootstrap,
            self.group,
            self.topic,
            strategy,
            self.progress,
            history=self.history,
            **options,
        )
        self.members.append(m)
        await m.start()
        return m

    async def process(self, name: str, strategy: str, **options: Any) -> str:
        """A member in a process of its own (for kill -9 and SIGSTOP); returns its client id."""
        client_id = f"{name}-{unique_name('proc')}"
        spec = {
            "bootstrap": self.bootstrap,
            "group": self.group,
            "topic": self.topic,
            "client_id": client_id,
            "history": str(self.path),
            "strategy": strategy,
            "session_timeout_ms": SESSION_MS,
            "group_protocol": "consumer" if self.group_protocol == "consumer" else "classic",
            **options,
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.chaos.member_proc",
            json.dumps(spec),
            cwd=str(ROOT),
            stdin=asyncio.subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests' / 'integration'}"},
        )
        self.procs[client_id] = proc
        return client_id

    async def kill(self, client_id: str) -> None:
        """kill -9, recorded as a crash once the process is dead.

        Not stamped as the signal is sent: a process runs on until the signal lands,
        and on a loaded machine it can write events in between (a record finished,
        the next one started), stamped after a crash that had not happened yet.
        Stamped after its death, every event of the member precedes its crash."""
        self.faults += 1
        proc = self.procs[client_id]
        proc.send_signal(signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), 30)
        self.history.crashed(client_id)

    async def freeze(self, client_id: str) -> None:
        """SIGSTOP, recorded as "frozen" once the process is stopped.

        The checker reads a frozen member's first event after the freeze as its
        wake, so the stamp must lie inside the stop: taken as the signal is sent,
        a handler the member started before the signal landed would look as if it
        ran through the freeze."""
        self.faults += 1
        await sigstop(self.procs[client_id].pid)
        self.history.add(client_id, "frozen")

    def thaw(self, client_id: str) -> None:
        self.procs[client_id].send_signal(signal.SIGCONT)

    def fault_context(self, around: int = 3) -> str:
        """Each kill or freeze with the faulted member's own events just before and
        after it, relative to the fault's stamp (for a failure message: whether the
        member acted after its crash, or when it woke, is what a checker verdict
        about a fault turns on)."""
        events = self.events()
        lines = []
        for fault in (e for e in events if e.kind in ("crashed", "frozen")):
            own = [
                e
                for e in events
                if e.member == fault.member
                and e.kind not in ("crashed", "frozen", "gone", "joined")
            ]
            before = [e for e in own if e.t <= fault.t][-around:]
            after = [e for e in own if e.t > fault.t][:around]
            show = ", ".join(f"{e.kind} {1000 * (e.t - fault.t):+.1f} ms" for e in before + after)
            lines.append(f"{fault.kind} {fault.member} at t={fault.t:.3f}: {show}")
        return "\n".join(lines)

    # -- waiting ------------------------------------------------------------------------

    def events(self) -> list[Any]:
        return load_history(self.path)

    async def until(
        self, what: str, condition: Callable[[list[Any]], bool], timeout: float = 60.0
    ) -> None:
        """Re-read the history until ``condition(events)`` holds (members in other
        processes cannot set an asyncio event, so this polls the file)."""
        deadline = time.monotonic() + timeout
        while True:
            events = self.events()
            if condition(events):
                return
            if time.monotonic() > deadline:
                tail = [e.to_json() for e in events[-8:]]
                raise AssertionError(f"{self.scenario}: timed out waiting for {what}; tail: {tail}")
            await asyncio.sleep(0.2)

    async def consuming(self, client_id: str, timeout: float = 60.0) -> None:
        """Until ``client_id`` has been handed records (it owns something and works)."""
        await self.until(
            f"{client_id} consuming",
            lambda evs: any(e.member == client_id and e.kind == "delivered" for e in evs),
            timeout,
        )

    async def owners(self, count: int, timeout: float = 60.0) -> None:
        """Until every partition is held by someone and ``count`` members hold some."""

        def settled(evs: list[Any]) -> bool:
            held: dict[str, set[tuple[str, int]]] = {}
            for e in evs:
                if e.kind == "assigned":
                    held.setdefault(e.member, set()).update(e.partitions)
                elif e.kind in ("revoke_ended", "lost"):
                    held.setdefault(e.member, set()).difference_update(e.partitions)
                elif e.kind == "crashed":
                    held.pop(e.member, None)
            parts = [p for ps in held.values() for p in ps]
            holders = [m for m, ps in held.items() if ps]
            return len(parts) == self.partitions == len(set(parts)) and len(holders) == count

        await self.until(f"{count} members to share the partitions", settled, timeout)

    async def judge(self, *, publish: bool = True) -> HistoryReport:
        """Stop the load, wait until every produced record was delivered, then check.

        ``publish=False``: the scenario adds its own figures, then calls :meth:`publish`."""
        assert self.load is not None
        await self.load.stop()

        def drained(evs: list[Any]) -> bool:
            got: dict[int, set[int]] = {}
            for e in evs:
                if e.kind == "delivered":
                    for _t, p, a, b in e.spans:
                        got.setdefault(p, set()).update(range(a, b + 1))
            assert self.load is not None
            return all(set(range(end)) <= got.get(p, set()) for p, end in self.load.end.items())

        with contextlib.suppress(AssertionError):  # a lost record is the checker's to report
            await self.until("every produced record to be delivered", drained, DRAIN_TIMEOUT)
        report = check_history(self.events())
        self._report = report
        if publish:
            self.publish()
        return report

    def publish(self) -> None:
        """Append the judged run's figures to CHAOS_RESULTS (once; after :meth:`judge`)."""
        report = self._report
        if not RESULTS or report is None or self._published:
            return
        self._published = True
        row = {
            "scenario": self.scenario,
            "seed": self.seed,
            "broker": self.broker.mode,
            "faults": self.faults,
            **report.counts(),
            **self.figures,
        }
        with open(RESULTS, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
