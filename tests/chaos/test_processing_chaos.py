"""Chaos scenarios with the Processor, judged by the history checker's processing rules.

Every member is a process (:mod:`tests.chaos.processing_member`) running
``Processor(ordering="key")``; every handler attempt, rebalance callback, the
broker's view of the group (DescribeGroups) and its committed offsets (OffsetFetch,
read from outside) go into one history.  Each scenario must end with 0 order
violations, 0 commits past unfinished work, 0 processing overlaps, 0 records
unfinished; after kill -9, the records processed again must be at most those the
member had not committed as finished (in flight, or finished after its last commit),
and with ``max_uncommitted=N`` at most N.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from chaos_run import ROOT, SESSION_S, ChaosRun

from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.history import HistoryReport, check_history, key_text
from aiogroup.testing.observer import GroupObserver
from aiogroup.testing.recording import CommitObserver

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

KEYS = 12
HOT_KEY = "hot"
POISON_KEY = "poison"


class KeyedLoad:
    """Steady keyed production (``KEYS`` keys; optionally every n-th record a given
    key), each acknowledged record written to the history as produced."""

    def __init__(self, run: ChaosRun, every: int = 0, special: str = "", pace: float = 0.02):
        self.run = run
        self.every = every
        self.special = special
        self.pace = pace
        self.end: dict[int, int] = {}
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._producer: AIOKafkaProducer | None = None

    async def start(self) -> KeyedLoad:
        self._producer = AIOKafkaProducer(bootstrap_servers=self.run.bootstrap, linger_ms=2)
        await self._producer.start()
        self._task = asyncio.create_task(self._produce())
        return self

    def key(self, i: int) -> str:
        if self.every and i % self.every == 0:
            return self.special
        return f"k{i % KEYS}"

    async def _produce(self) -> None:
        assert self._producer is not None
        i = 0
        while not self._stop.is_set():
            futures = []
            for _ in range(self.run.partitions):
                key = self.key(i).encode()
                futures.append(await self._producer.send(self.run.topic, b"v%d" % i, key=key))
                i += 1
            for md in await asyncio.gather(*futures):
                self.end[md.partition] = max(self.end.get(md.partition, 0), md.offset + 1)
                self.run.history.produced(self.run.topic, md.partition, md.offset, md.offset)
            await asyncio.sleep(self.pace)  # the pace of the load, not synchronisation

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None


class ProcessingRun(ChaosRun):
    """A ChaosRun whose members run the Processor and whose load has keys."""

    def __init__(self, *args: Any, every: int = 0, special: str = "", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.keyed = KeyedLoad(self, every, special)
        self.commits: CommitObserver | None = None

    async def __aenter__(self) -> ProcessingRun:
        # ChaosRun's own start, with the keyed load in place of its unkeyed one.
        await self.broker.create_topic(self.topic, self.partitions)
        self.observer = await GroupObserver(self.bootstrap, self.group, self.history).start()
        await self.keyed.start()
        self.commits = await CommitObserver(self.bootstrap, self.group, self.history).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.keyed.stop()
        if self.commits is not None:
            await self.commits.stop()
        await super().__aexit__(*exc)

    async def processor(self, name: str, strategy: str = "cooperative-sticky", **opts: Any) -> str:
        client_id = f"{name}-{unique_name('proc')}"
        spec = {
            "bootstrap": self.bootstrap,
            "group": self.group,
            "topic": self.topic,
            "client_id": client_id,
            "history": str(self.path),
            "strategy": strategy,
            "session_timeout_ms": int(SESSION_S * 1000),
            **opts,
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.chaos.processing_member",
            json.dumps(spec),
            cwd=str(ROOT),
            stdin=asyncio.subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests' / 'integration'}"},
        )
        self.procs[client_id] = proc
        return client_id

    async def processing(self, client_id: str, after: float = 0.0, timeout: float = 60.0) -> None:
        """Until ``client_id`` has finished a record (after ``after``)."""
        await self.until(
            f"{client_id} processing",
            lambda evs: any(
                e.member == client_id and e.kind == "finished" and e.t > after for e in evs
            ),
            timeout,
        )

    async def judge_processing(self) -> HistoryReport:
        """Stop the load, wait until every produced record was finished, stop the members
        (they drain and commit), and check the history."""
        await self.keyed.stop()

        def drained(evs: list[Any]) -> bool:
            done: set[tuple[int, int]] = set()
            produced: set[tuple[int, int]] = set()
            for e in evs:
                for _t, p, a, b in e.spans:
                    if e.kind == "finished":
                        done.update((p, o) for o in range(a, b + 1))
                    elif e.kind == "produced":
                        produced.update((p, o) for o in range(a, b + 1))
            return produced <= done

        with contextlib.suppress(AssertionError):  # an unfinished record is the checker's
            await self.until("every produced record to be finished", drained, 90)
        for proc in self.procs.values():
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()  # SIGTERM: drain, commit, leave
        for proc in self.procs.values():
            await asyncio.wait_for(proc.wait(), 60)
        assert self.commits is not None
        await self.commits.stop()  # a last read of the committed offsets
        self.commits = None
        report = check_history(
            self.events(),
            ordering="key",
            metadata_kept=self.broker.caps.keeps_commit_metadata,
        )
        self._report = report
        self.publish()
        return report


def assert_processing_clean(report: HistoryReport, run: ChaosRun) -> None:
    """The processing rules held; a failure names the scenario and its history file
    (kept under pytest's basetemp) so that a CI log alone says what to re-judge."""
    counts = report.counts()
    problems = {
        k: counts[k]
        for k in (
            "order_violations",
            "commits_past_unfinished",
            "processing_overlaps",
            "processed_unowned",
            "unfinished",
            "disallowed_reprocessing",
            "overlaps",
        )
        if counts[k]
    }
    where = f"{run.scenario} seed {run.seed}, history {run.path}"
    if problems or not report.ok:
        where += "\n" + run.fault_context()
    assert not problems, f"{problems} in {where}\n{report.summary()}"
    assert report.ok, f"{where}\n{report.summary()}"
    assert report.records_finished > 0, where


# -- kill -9 ------------------------------------------------------------------------------


@pytest.mark.chaos_long
async def test_processor_kill_9_mid_processing(
    kafka_broker: KafkaBroker, tmp_path: Path, seed: int
) -> None:
    """Two processor members; one is killed while its handlers run.  Only what it had
    not committed as finished is processed again, by the survivor, after the fence.
    (`make chaos` only: `make test` runs the same kill with max_uncommitted below.)"""
    async with ProcessingRun(kafka_broker, tmp_path, "processor-kill9", seed) as run:
        report, _victim = await kill_mid_processing(run, handler_ms=100)
        redo_bound = report.in_flight_at_crash + report.finished_uncommitted_at_crash
        assert report.reprocessed <= redo_bound, f"{run.path}\n{report.summary()}"


#: The bounded kill: handlers and the bound (= concurrency), commits on the default 5 s
#: interval - the bound, not the interval, is what limits the work at risk.
BOUNDED = {"handler_ms": 100, "concurrency": 20, "max_uncommitted": 20, "commit_interval_ms": 5000}


async def test_processor_kill_9_with_max_uncommitted(
    kafka_broker: KafkaBroker, tmp_path: Path, seed: int
) -> None:
    """The same kill with ``max_uncommitted`` = concurrency and the default 5 s commit
    interval: the records processed again are at most the bound, exactly (the rule
    counts what no answered commit covers, so this is no timing)."""
    async with ProcessingRun(kafka_broker, tmp_path, "processor-kill9-bounded", seed) as run:
        bound = BOUNDED["max_uncommitted"]
        report, victim = await kill_mid_processing(run, started_at_least=2 * bound, **BOUNDED)
        assert report.reprocessed <= bound, f"{run.path}\n{report.summary()}"
        # Not trivially: the victim had started more records than the bound, and
        # without the bound no 5 s commit would have covered any of them yet.
        started = {
            (p, o)
            for e in run.events()
            if e.member == victim and e.kind == "started"
            for _t, p, a, b in e.spans
            for o in range(a, b + 1)
        }
        assert len(started) > bound, f"the victim started only {len(started)} ({run.path})"


async def kill_mid_processing(
    run: ProcessingRun, started_at_least: int = 1, **opts: Any
) -> tuple[HistoryReport, str]:
    """Two members with ``opts``; the seeded one is killed (-9) at a moment its
    handlers run (once it started ``started_at_least`` records); the survivor takes
    over; the history judged clean."""
    members = [await run.processor(f"P{i}", **opts) for i in range(2)]
    await run.owners(2, timeout=90)
    victim = run.rng.choice(members)
    survivor = next(m for m in members if m != victim)
    await run.processing(victim)
    await asyncio.sleep(run.rng.uniform(0.2, 1.5))  # seeded: somewhere mid-stream

    def busy(evs: list[Any]) -> bool:
        running: set[tuple[int, int]] = set()
        started: set[tuple[int, int]] = set()
        for e in evs:
            if e.member == victim and e.kind in ("started", "finished", "abandoned"):
                for _t, p, o, _ in e.spans:
                    if e.kind == "started":
                        running.add((p, o))
                        started.add((p, o))
                    else:
                        running.discard((p, o))
        return bool(running) and len(started) >= started_at_least

    # The kill must land mid-processing: at a moment the victim has handlers running.
    await run.until("the victim to have handlers running", busy, timeout=60)
    await run.kill(victim)
    await run.until(
        "the broker to fence the killed member",
        lambda evs: any(e.member == victim and e.kind == "gone" for e in evs),
        timeout=SESSION_S * 4,
    )
    await run.owners(1, timeout=60)
    await run.processing(survivor, after=run.history.now())
    report = await run.judge_processing()
    assert_processing_clean(report, run)
    assert report.in_flight_at_crash > 0, f"the kill landed with nothing in flight ({run.path})"
    return report, victim


# -- a slow handler while another member joins ---------------------------------------------


@pytest.mark.parametrize(
    "strategy", ["cooperative-sticky", pytest.param("range", marks=pytest.mark.chaos_long)]
)
async def test_processor_slow_handler_during_a_concurrent_join(
    kafka_broker: KafkaBroker, tmp_path: Path, seed: int, strategy: str
) -> None:
    """A's handler for one key takes 1 s (one record in 150 has it); B joins while
    one of them runs.  A's revoke waits for it (heartbeats go on), so B never runs a
    record of a partition A still runs, and nobody is evicted."""
    async with ProcessingRun(
        kafka_broker, tmp_path, f"processor-slow-join-{strategy}", seed, every=150, special="slow"
    ) as run:
        a = await run.processor("A", strategy, slow_key="slow", slow_ms=1000, handler_ms=5)
        await run.owners(1, timeout=90)
        await run.processing(a)
        await asyncio.sleep(run.rng.uniform(0.0, 1.0))  # seeded moment of the join

        def slow_running(evs: list[Any]) -> bool:
            running: set[tuple[int, int]] = set()
            for e in evs:
                if e.member == a and e.key == key_text(b"slow"):
                    for _t, p, o, _ in e.spans:
                        if e.kind == "started":
                            running.add((p, o))
                        else:
                            running.discard((p, o))
            return bool(running)

        await run.until("A running a slow record", slow_running, timeout=60)
        run.faults += 1
        joined = run.history.now()
        b = await run.processor("B", strategy, handler_ms=5)
        await run.owners(2, timeout=90)
        await run.processing(b, after=joined)
        report = await run.judge_processing()
        assert_processing_clean(report, run)
        assert report.evictions == [], report.summary()
        assert report.rebalances >= 1


# -- SIGSTOP past the session -------------------------------------------------------------


@pytest.mark.chaos_long
async def test_processor_sigstop_past_the_session(
    kafka_broker: KafkaBroker, tmp_path: Path, seed: int
) -> None:
    """A member frozen with handlers in flight is fenced; the other takes its
    partitions.  On waking its handlers must not finish records of partitions it
    lost, nor may it commit them."""
    async with ProcessingRun(kafka_broker, tmp_path, "processor-sigstop", seed) as run:
        frozen = await run.processor("Z", handler_ms=50)
        other = await run.processor("C", handler_ms=50)
        await run.owners(2, timeout=90)
        await run.processing(frozen)
        await asyncio.sleep(run.rng.uniform(0.0, 1.0))
        await run.freeze(frozen)
        frozen_at = run.history.now()
        await run.until(
            "the broker to remove the frozen member",
            lambda evs: any(e.member == frozen and e.kind == "gone" for e in evs),
            timeout=SESSION_S * 4,
        )
        await run.processing(other, after=run.history.now())
        # Frozen for 2x the session in all (the fault's length, not synchronisation).
        await asyncio.sleep(max(0.0, frozen_at + 2 * SESSION_S - run.history.now()))
        run.thaw(frozen)
        woke = run.history.now()
        await run.owners(2, timeout=90)
        await run.processing(frozen, after=woke)
        report = await run.judge_processing()
        assert_processing_clean(report, run)
        assert report.zombie_commits == [], report.summary()


# -- a poison record -----------------------------------------------------------------------


@pytest.mark.chaos_long
async def test_processor_poison_record_goes_to_the_dead_letter_topic(
    kafka_broker: KafkaBroker, tmp_path: Path, seed: int
) -> None:
    """Every 25th record always fails: after its attempts it is dead-lettered (with
    headers naming where it came from) and counts as finished; nothing else stalls."""
    async with ProcessingRun(
        kafka_broker, tmp_path, "processor-poison", seed, every=25, special=POISON_KEY
    ) as run:
        dlq = await kafka_broker.create_topic(unique_name("dlq"), 1)
        await run.processor("A", poison_key=POISON_KEY, dead_letter=dlq, attempts=2)
        await run.processor("B", poison_key=POISON_KEY, dead_letter=dlq, attempts=2)
        await run.owners(2, timeout=90)
        await run.until(
            "a poison record dead-lettered",
            lambda evs: any(e.kind == "finished" and e.detail.startswith("dead") for e in evs),
            timeout=60,
        )
        report = await run.judge_processing()
        assert_processing_clean(report, run)
        poisoned = {
            (p, o)
            for e in run.events()
            if e.kind == "started" and e.key == key_text(POISON_KEY.encode())
            for _t, p, o, _ in e.spans
        }
        assert poisoned
        dead = await read_dead_letters(run.bootstrap, dlq, len(poisoned))
        sources = {(int(h["aiogroup.dlq.partition"]), int(h["aiogroup.dlq.offset"])) for h in dead}
        assert poisoned <= sources, f"not dead-lettered: {sorted(poisoned - sources)[:5]}"
        assert all(h["aiogroup.dlq.topic"] == run.topic for h in dead)


async def read_dead_letters(bootstrap: str, topic: str, at_least: int) -> list[dict[str, str]]:
    """The dead-letter topic's records' headers (aiogroup.dlq.*), as text."""
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    out: list[dict[str, str]] = []
    try:

        async def read() -> None:
            async for record in consumer:
                out.append({k: v.decode() for k, v in record.headers})
                if len(out) >= at_least:
                    return

        await asyncio.wait_for(read(), 30)
    finally:
        await consumer.stop()
    return out


# -- a hot key -----------------------------------------------------------------------------


@pytest.mark.chaos_long
async def test_processor_hot_key_with_a_rebalance(
    kafka_broker: KafkaBroker, tmp_path: Path, seed: int
) -> None:
    """Every 3rd record has one key: its records run one at a time, in order, while
    the others keep going; a member joining mid-way moves partitions without
    breaking the order or overlapping."""
    async with ProcessingRun(
        kafka_broker, tmp_path, "processor-hot-key", seed, every=3, special=HOT_KEY
    ) as run:
        a = await run.processor("A", handler_ms=20, concurrency=50)
        await run.owners(1, timeout=90)
        await run.processing(a)
        await asyncio.sleep(run.rng.uniform(0.5, 1.5))
        run.faults += 1
        joined = run.history.now()
        b = await run.processor("B", handler_ms=20, concurrency=50)
        await run.owners(2, timeout=90)
        await run.processing(b, after=joined)
        report = await run.judge_processing()
        assert_processing_clean(report, run)
