"""Shared pieces of the cooperative, upgrade and mixed-client tests.

A :class:`Member` is an aiogroup consumer that journals every rebalance callback
with the generation it ran in and the partitions the member held at that moment,
and records when each record was handed to the application.  A :class:`Load`
produces steadily to every partition and remembers the end offset of each
partition from the producer's answers (the test broker's ListOffsets(latest) is
not the log end).

Given a :class:`~aiogroup.testing.history.HistoryRecorder`, a member also writes
its ownership history (under its client id, the name the broker's DescribeGroups
shows) and commits explicitly - after every batch and in
its revoke callback - so that every commit is in the history too; a :class:`Load`
given one records what it produced.  ``revoke_delay``/``assign_delay`` make the
listener slow (``await asyncio.sleep`` or, with ``sync_listener``, a blocking
``time.sleep`` in a plain ``ConsumerRebalanceListener``, which commits on revoke
through ``run_on_loop`` as the usage guide says).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer

from aiogroup import (
    AsyncConsumerRebalanceListener,
    ConsumerRebalanceListener,
    GroupConsumer,
    TopicPartition,
)
from aiogroup.errors import KafkaError
from aiogroup.listeners import run_on_loop
from aiogroup.testing.broker import unique_name
from aiogroup.testing.history import HistoryRecorder, MemberRecorder

SESSION_MS = 6000
HEARTBEAT_MS = 1000

Key = tuple[int, int]  # (partition, offset)
HALT_TIMEOUT = 30.0
#: Records an ``async for`` member hands out between its commits.
COMMIT_EVERY = 20
T = TypeVar("T")


@dataclass(frozen=True)
class Call:
    kind: str  # "revoked" | "assigned" | "lost"
    partitions: frozenset[int]
    generation: int | None
    #: What the member held while the callback ran (before a revoke, after an assign).
    held: frozenset[int]
    at: float
    stopping: bool


class Member(AsyncConsumerRebalanceListener):
    """One aiogroup member: a consumer, its listener journal and its delivery log."""

    def __init__(
        self,
        name: str,
        bootstrap: str,
        group: str,
        topic: str,
        strategy: Iterable[str] | None,
        progress: asyncio.Event,
        *,
        history: HistoryRecorder | None = None,
        revoke_delay: float = 0.0,
        assign_delay: float = 0.0,
        sync_listener: bool = False,
        process_delay: float = 0.0,
        read: str = "getmany",
        **options: Any,
    ) -> None:
        self.name = name
        #: "getmany", or "async-for": one record per step, committed every COMMIT_EVERY.
        self.read = read
        self.topic = topic
        self.progress = progress
        self.owned: set[int] = set()
        self.calls: list[Call] = []
        self.seen: list[Key] = []
        #: partition -> loop times at which records of it were handed out.
        self.deliveries: dict[int, list[float]] = defaultdict(list)
        self.errors: list[BaseException] = []
        self.stopping = False
        opts: dict[str, Any] = dict(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=f"{name}-{unique_name('client')}",
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
            auto_commit_interval_ms=500,
        )
        if strategy is not None:  # None: the consumer's default assignors
            opts["partition_assignment_strategy"] = tuple(strategy)
        if history is not None:
            opts["enable_auto_commit"] = False  # every commit explicit, so in the history
        opts.update(options)
        if opts.get("group_protocol") == "consumer":
            # The broker decides session, heartbeat and assignment (KIP-848).
            for key in (
                "partition_assignment_strategy",
                "session_timeout_ms",
                "heartbeat_interval_ms",
            ):
                opts.pop(key, None)
        self.client_id: str = opts["client_id"]
        self.history: MemberRecorder | None = (
            None if history is None else history.member(self.client_id)
        )
        self.revoke_delay = revoke_delay
        self.assign_delay = assign_delay
        self.sync_listener = sync_listener
        #: Seconds the "application" works on a batch before committing it.
        self.process_delay = process_delay
        #: partition -> next offset to commit (what the application has been handed).
        self.positions: dict[int, int] = {}
        self.commit_failures: list[BaseException] = []
        self.consumer = GroupConsumer(**opts)
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- listener -----------------------------------------------------------------------

    def _record(self, kind: str, parts: set[TopicPartition], held: set[int]) -> None:
        # time.monotonic(), not the loop's clock: sync listeners may run in a worker thread.
        self.calls.append(
            Call(
                kind,
                frozenset(tp.partition for tp in parts),
                self.consumer.generation,
                frozenset(held),
                time.monotonic(),
                self.stopping,
            )
        )
        self._wake()

    def _wake(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None or self._loop is None:
            self.progress.set()
        else:
            self._loop.call_soon_threadsafe(self.progress.set)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._revoke_begin(revoked)
        try:
            offsets = self._revoked_positions(revoked)
            if self.history is not None and offsets:
                await self._commit(offsets)
            if self.revoke_delay:
                await asyncio.sleep(self.revoke_delay)  # the application's slow work
        finally:
            self._revoke_end(revoked)

    def _revoked_positions(self, revoked: set[TopicPartition]) -> dict[TopicPartition, int]:
        gone = {tp.partition for tp in revoked}
        return {TopicPartition(self.topic, p): o for p, o in self.positions.items() if p in gone}

    def _revoke_begin(self, revoked: set[TopicPartition]) -> None:
        if self.history is not None:
            self.history.revoke_started(revoked)
        self._record("revoked", revoked, self.owned)

    def _revoke_end(self, revoked: set[TopicPartition]) -> None:
        self.owned -= {tp.partition for tp in revoked}
        # Handed on: a later assignment of it starts from the group's commit, and a
        # revoke then must not re-commit this member's old (now stale) position.
        for tp in revoked:
            self.positions.pop(tp.partition, None)
        if self.history is not None:
            self.history.revoke_ended(revoked)
        self._wake()

    def _assign(self, assigned: set[TopicPartition]) -> None:
        if self.history is not None:
            self.history.assigned(assigned)
        self.owned |= {tp.partition for tp in assigned}
        self._record("assigned", assigned, self.owned)

    def _lose(self, lost: set[TopicPartition]) -> None:
        if self.history is not None:
            self.history.lost(lost)
        self._record("lost", lost, self.owned)
        self.owned -= {tp.partition for tp in lost}
        for tp in lost:
            self.positions.pop(tp.partition, None)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._assign(assigned)
        if self.assign_delay:
            await asyncio.sleep(self.assign_delay)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self._lose(lost)

    def _listener(self) -> AsyncConsumerRebalanceListener | ConsumerRebalanceListener:
        if not self.sync_listener:
            return self
        member = self

        class Blocking(ConsumerRebalanceListener):
            """The same journal from plain methods whose slow work blocks its thread."""

            def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                member._revoke_begin(revoked)
                try:
                    offsets = member._revoked_positions(revoked)
                    if member.history is not None and offsets:
                        # The consumer belongs to the loop: reach it through run_on_loop.
                        run_on_loop(member._commit(offsets), timeout=10)
                    if member.revoke_delay:
                        time.sleep(member.revoke_delay)
                finally:
                    member._revoke_end(revoked)

            def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                member._assign(assigned)
                if member.assign_delay:
                    time.sleep(member.assign_delay)

            def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
                member._lose(lost)

        return Blocking()

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit and, if the broker accepted it, record it (a refusal is a Kafka-level
        fact during a rebalance, kept for the test to see)."""
        sent = time.monotonic()
        try:
            await self.consumer.commit(offsets)
        except KafkaError as exc:
            self.commit_failures.append(exc)
            return
        if self.history is not None:
            self.history.committed(offsets, sent_at=sent)

    # -- consuming ------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.consumer.start()
        self.consumer.subscribe([self.topic], listener=self._listener())
        self._task = asyncio.create_task(self._consume(), name=f"consume-{self.name}")

    async def _consume(self) -> None:
        if self.read == "async-for":
            await self._iterate()
            return
        loop = asyncio.get_running_loop()
        while True:
            try:
                batches = await self.consumer.getmany(timeout_ms=100)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # kept for the test to inspect; the member goes on
                self.errors.append(exc)
                self.progress.set()
                continue
            now = loop.time()
            for tp, records in batches.items():
                self.seen.extend((tp.partition, r.offset) for r in records)
                if records:
                    self.deliveries[tp.partition].append(now)
                    self.positions[tp.partition] = records[-1].offset + 1
                    if self.history is not None:
                        self.history.delivered(tp.topic, tp.partition, [r.offset for r in records])
            if batches:
                self.progress.set()
                if self.process_delay:
                    await asyncio.sleep(self.process_delay)  # the application's work
                if self.history is not None:
                    # A partition revoked meanwhile (during process_delay) was committed
                    # by the revoke listener and its position dropped: not again here.
                    await self._commit(
                        {
                            TopicPartition(self.topic, p): self.positions[p]
                            for p in batches_parts(batches)
                            if p in self.positions
                        }
                    )

    async def _iterate(self) -> None:
        """``async for``: each record recorded as handed out, a commit every few."""
        loop = asyncio.get_running_loop()
        since_commit = 0
        while True:
            try:
                async for record in self.consumer:
                    p = record.partition
                    self.seen.append((p, record.offset))
                    self.deliveries[p].append(loop.time())
                    self.positions[p] = record.offset + 1
                    if self.history is not None:
                        self.history.delivered(self.topic, p, [record.offset])
                    self.progress.set()
                    if self.process_delay:
                        await asyncio.sleep(self.process_delay)  # the application's work
                    since_commit += 1
                    if self.history is not None and since_commit >= COMMIT_EVERY:
                        since_commit = 0
                        await self._commit(
                            {TopicPartition(self.topic, q): o for q, o in self.positions.items()}
                        )
                return  # the consumer stopped
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # kept for the test to inspect; the member goes on
                self.errors.append(exc)
                self.progress.set()

    async def _halt(self) -> None:
        if self._task is not None:
            self._task.cancel()
            # Bounded: a poll that swallowed its cancellation must fail the test, not hang it.
            done, _ = await asyncio.wait({self._task}, timeout=HALT_TIMEOUT)
            assert done, f"{self.name}: the consuming task ignored its cancellation"
            self._task = None

    async def stop(self) -> None:
        """Leave cleanly: auto-commit, revoke, LeaveGroup."""
        self.stopping = True
        if self.history is not None:
            self.history.leaving()
        await self._halt()
        await self.consumer.stop()

    async def abort(self) -> None:
        """Vanish without commit or LeaveGroup (also the cleanup after a failed test)."""
        self.stopping = True
        await self._halt()
        await self.consumer.abort()

    # -- views ------------------------------------------------------------------------------

    def of(self, kind: str, *, stopping: bool = False) -> list[Call]:
        return [c for c in self.calls if c.kind == kind and c.stopping == stopping]

    @property
    def protocol_name(self) -> str | None:
        coordinator = self.consumer._coordinator
        return None if coordinator is None else coordinator.membership.protocol_name

    @property
    def rebalance_protocol(self) -> str | None:
        coordinator = self.consumer._coordinator
        return None if coordinator is None else coordinator.rebalance_protocol.value


def batches_parts(batches: dict[TopicPartition, list[Any]]) -> list[int]:
    return [tp.partition for tp, records in batches.items() if records]


class Load:
    """Steady production to every partition of a topic until stopped."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        history: HistoryRecorder | None = None,
        pace: float = 0.05,
    ) -> None:
        self.history = history
        self.pace = pace
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.end: Counter[int] = Counter()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._producer: AIOKafkaProducer | None = None

    async def __aenter__(self) -> Load:
        self._producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=2)
        await self._producer.start()
        self._task = asyncio.create_task(self._run(), name=f"load-{self.topic}")
        return self

    async def _run(self) -> None:
        assert self._producer is not None
        i = 0
        while not self._stop.is_set():
            futures = []
            for p in range(self.partitions):
                futures.append(await self._producer.send(self.topic, f"v{i}".encode(), partition=p))
                i += 1
            for md in await asyncio.gather(*futures):
                self.end[md.partition] = max(self.end[md.partition], md.offset + 1)
                if self.history is not None:
                    self.history.produced(self.topic, md.partition, md.offset, md.offset)
            await asyncio.sleep(self.pace)  # the pace of the load, not synchronisation

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
            self._task = None
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def expected(self) -> set[Key]:
        return {(p, o) for p, end in self.end.items() for o in range(end)}


async def all_or_nothing(*aws: Awaitable[T]) -> list[T]:
    """Like ``asyncio.gather``, but the first failure cancels the others, so a test
    with parallel flows fails as soon as one flow does instead of waiting for the rest."""
    tasks = [asyncio.ensure_future(aw) for aw in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
    for task in tasks:
        failure = None if task.cancelled() else task.exception()
        if failure is not None:
            raise failure
    return [task.result() for task in tasks]


async def wait_until(
    condition: Callable[[], bool],
    progress: asyncio.Event,
    timeout: float,
    what: str,
    *,
    poll: float | None = None,
    describe: Callable[[], object] | None = None,
) -> None:
    """Re-check ``condition`` whenever a member reports progress (or every ``poll`` seconds,
    for members in other threads that cannot set an asyncio event)."""

    async def watch() -> None:
        while True:
            progress.clear()
            if condition():
                return
            if poll is None:
                await progress.wait()
            else:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(progress.wait(), poll)

    try:
        await asyncio.wait_for(watch(), timeout)
    except asyncio.TimeoutError:
        extra = f"; state: {describe()}" if describe is not None else ""
        raise AssertionError(f"timed out after {timeout}s waiting for {what}{extra}") from None


def exactly_once_cover(owned: Iterable[set[int]], partitions: int) -> bool:
    """Every partition owned by exactly one of the given members, each owning some."""
    sets = list(owned)
    flat = sorted(p for s in sets for p in s)
    return flat == list(range(partitions)) and all(sets)


def overlaps_by_generation(members: Iterable[Member]) -> list[tuple[int, str, str, set[int]]]:
    """Partitions two members held in the same generation, from their callback journals."""
    held: dict[int, dict[str, set[int]]] = defaultdict(lambda: defaultdict(set))
    for m in members:
        for c in m.calls:
            if c.generation is not None and c.generation >= 0:
                held[c.generation][m.name] |= c.held
    found = []
    for gen, by_member in sorted(held.items()):
        names = sorted(by_member)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                both = by_member[a] & by_member[b]
                if both:
                    found.append((gen, a, b, both))
    return found


async def committed_offsets(
    bootstrap: str, group: str, topic: str, partitions: int
) -> dict[int, int | None]:
    checker = GroupConsumer(bootstrap_servers=bootstrap, group_id=group)
    await checker.start()
    try:
        return {p: await checker.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        await checker.stop()
