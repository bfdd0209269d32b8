"""The consumer-group member of one streaming query, in Spark's streaming-source process.

Spark calls the stream reader synchronously, from one thread, whenever it plans or
commits a micro-batch - possibly minutes apart.  Group membership cannot wait for
those calls: heartbeats, rebalances and listener callbacks must run all the time.
So the member owns an asyncio loop in a daemon thread; the reader's methods submit
coroutines to it and wait, each with a deadline.

The member never consumes records itself (executors do, from the exact offsets Spark
planned): its partitions are paused as they arrive, and a poll loop keeps telling
the consumer the application is alive.  What it does is answer "which partitions do
I own, where does each begin, where does each end" and commit offsets Spark is done
with - only for partitions it still owns, and never below where it started them.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import signal
import threading
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiogroup._fetch import offset_lookups as _offsets
from aiogroup.errors import ConsumerStoppedError, KafkaError
from aiogroup.listeners import AsyncConsumerRebalanceListener
from aiogroup.spark import watermarks
from aiogroup.spark._consumers import new_client, new_consumer, subscribe
from aiogroup.spark._loop_thread import LoopThread
from aiogroup.spark.options import EARLIEST, LATEST, SourceOptions
from aiogroup.spark.ranges import BatchOffset
from aiogroup.structs import TopicPartition

__all__ = ["PartitionView", "SourceMember"]

log = logging.getLogger("aiogroup.spark")

T = TypeVar("T")

_POLL_MS = 500


@dataclass(frozen=True)
class PartitionView:
    """Owned partitions, where each one's next range begins, and where the log ends."""

    begins: dict[TopicPartition, int]
    ends: dict[TopicPartition, int]


class _Listener(AsyncConsumerRebalanceListener):
    def __init__(self, member: SourceMember) -> None:
        self._member = member

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._member._on_assigned(assigned)

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._member._on_revoked(revoked)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self._member._on_revoked(lost)


class SourceMember:
    """Group membership on a private loop, driven by synchronous calls."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: LoopThread | None = None
        self._consumer: Any = None
        self._client: Any = None
        self._poller: asyncio.Task[None] | None = None
        # Set while the member holds a settled assignment; cleared from a revocation
        # until the next assignment, so no batch is planned mid-rebalance.
        self._settled: asyncio.Event | None = None
        self._error: BaseException | None = None
        #: Set with ``_error``: wakes a wait for an assignment that will never come.
        self._failed: asyncio.Event | None = None
        self._stopped = False
        self._stop_lock = threading.Lock()
        # Loop-thread state: partitions gained since their begin was last decided; the
        # lowest offset each owned partition may be committed at (its begin, then its
        # last commit) - committing below it would rewind another member's progress.
        self._gained: set[TopicPartition] = set()
        self._floor: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}

    # -- lifecycle (caller's thread) ------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._loop is not None

    def start(self) -> None:
        """Start the loop thread, join the group, and leave it again on SIGTERM or exit."""
        if self._loop is not None:
            return
        self._loop_thread = LoopThread("aiogroup-spark-member")
        self._loop = self._loop_thread.loop
        try:
            self.call(self._start(), self._options.start_timeout_s, "joining the consumer group")
        except BaseException:
            self.stop()
            raise
        self._install_sigterm_handler()
        atexit.register(self.stop)

    def stop(self, timeout: float = 30.0) -> None:
        """Leave the group (LeaveGroup, so the others rebalance now) and end the loop."""
        with self._stop_lock:
            if self._stopped or self._loop is None:
                self._stopped = True
                return
            self._stopped = True
        assert self._loop_thread is not None
        try:
            self._loop_thread.call(self._stop(), timeout, "leaving the consumer group")
        except Exception as exc:  # the process is going away: report, do not mask
            log.warning("aiogroup source member did not stop cleanly: %r", exc)
        finally:
            self._loop_thread.stop(timeout)

    def _install_sigterm_handler(self) -> None:
        # Spark ends the streaming-source process with SIGTERM when a query stops; without
        # this the group would wait a whole session timeout before rebalancing.
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum: int, frame: Any) -> None:
            self.stop()
            signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_sigterm)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float, what: str) -> T:
        """Run ``coro`` on the member's loop and wait at most ``timeout`` seconds."""
        if self._loop_thread is None or self._stopped:
            coro.close()
            raise ConsumerStoppedError("the aiogroup source member is not running")
        return self._loop_thread.call(coro, timeout, what)

    # -- operations (run on the loop) ----------------------------------------------------

    async def _start(self) -> None:
        opts = self._options
        self._settled = asyncio.Event()
        self._failed = asyncio.Event()
        self._consumer = new_consumer(opts, **opts.group_consumer_kwargs())
        await self._consumer.start()
        subscribe(self._consumer, opts.topics, opts.pattern, _Listener(self))
        self._client = new_client(opts)
        await self._client.bootstrap()
        self._poller = asyncio.get_running_loop().create_task(self._poll_forever())

    async def _stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        try:
            if self._consumer is not None:
                await self._consumer.stop()
        finally:
            if self._client is not None:
                await self._client.close()

    async def _poll_forever(self) -> None:
        # Polling is what tells the consumer the application is alive (max_poll_interval);
        # partitions are paused, so nothing is fetched.  Errors the group raises (fenced,
        # unauthorized, ...) are kept and fail Spark's next call.
        while True:
            try:
                await self._consumer.getmany(timeout_ms=_POLL_MS, max_records=1)
            except asyncio.CancelledError:
                raise
            except ConsumerStoppedError:
                return
            except Exception as exc:
                log.error("aiogroup source member failed: %r", exc)
                self._error = exc
                if self._failed is not None:
                    self._failed.set()
                return

    def _on_assigned(self, assigned: set[TopicPartition]) -> None:
        if assigned:
            self._consumer.pause(*assigned)
        self._gained |= assigned
        log.info("aiogroup source: assigned %s", sorted(assigned))
        assert self._settled is not None
        self._settled.set()

    def _on_revoked(self, revoked: set[TopicPartition]) -> None:
        log.info("aiogroup source: revoked %s", sorted(revoked))
        if revoked and self._settled is not None:
            self._settled.clear()
        for tp in revoked:
            self._gained.discard(tp)
            self._floor.pop(tp, None)
            self._committed.pop(tp, None)

    def _raise_pending(self) -> None:
        if self._error is not None:
            raise self._error

    async def wait_assigned(self) -> None:
        """Wait until the member holds a settled assignment (possibly empty).

        An eager rebalance revokes everything before assigning again; planning in
        between would see no partitions - and an availableNow run would end early.
        """
        assert self._settled is not None and self._failed is not None
        self._raise_pending()
        # The member's error ends the wait: a member refused by the group (no READ on
        # it, say) is never assigned, and Spark's call would otherwise wait out
        # startTimeoutMs before failing the query with a timeout that names nothing.
        settled = asyncio.ensure_future(self._settled.wait())
        failed = asyncio.ensure_future(self._failed.wait())
        try:
            await asyncio.wait({settled, failed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            settled.cancel()
            failed.cancel()
        self._raise_pending()

    def owned(self) -> set[TopicPartition]:
        return set(self._consumer.assignment())

    async def end_offsets(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        self._raise_pending()
        return await watermarks.end_offsets(
            self._client,
            list(tps),
            read_committed=self._options.read_committed,
            timeout=self._timeout,
        )

    async def owned_end_offsets(self, settle: bool = True) -> dict[TopicPartition, int]:
        """End offsets of the owned partitions (once the assignment is settled, if asked)."""
        if settle:
            await self.wait_assigned()
        return await self.end_offsets(self.owned())

    @property
    def _timeout(self) -> float:
        return float(self._consumer.config.request_timeout_ms) / 1000

    async def view(self, start: BatchOffset) -> PartitionView:
        """Owned partitions with the offset each next range begins at and the log end.

        A partition this member has owned without interruption continues where
        ``start`` (Spark's checkpoint) says.  A gained one begins at the later of the
        checkpoint and the group's committed offset: the committed offset is where
        another member (another application in the group) stopped, and the checkpoint
        wins when it is ahead (the last batch finished but its group commit did not).
        With neither, ``startingOffsets`` decides.
        """
        await self.wait_assigned()
        owned = self.owned()
        ends = await self.end_offsets(owned)
        gained = sorted(self._gained & owned)
        committed = dict(
            zip(
                gained,
                await asyncio.gather(*(self._consumer.committed(tp) for tp in gained)),
                strict=True,
            )
        )
        begins: dict[TopicPartition, int] = {}
        unknown: list[TopicPartition] = []
        for tp in owned:
            candidates = [c for c in (start.positions.get(tp), committed.get(tp)) if c is not None]
            if candidates:
                begins[tp] = max(candidates)
            else:
                unknown.append(tp)
        begins.update(await self._starting_positions(unknown, ends))
        for tp in gained:
            self._floor[tp] = begins[tp]
        self._gained -= set(gained)
        return PartitionView(begins=begins, ends=ends)

    async def _starting_positions(
        self, tps: list[TopicPartition], ends: dict[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        starting = self._options.starting_offsets
        wanted = {}
        for tp in tps:
            if starting == "earliest":
                wanted[tp] = EARLIEST
            elif starting == "latest":
                wanted[tp] = LATEST
            else:
                assert isinstance(starting, dict)
                wanted[tp] = starting.get(tp, EARLIEST)
        earliest = [tp for tp, v in wanted.items() if v == EARLIEST]
        firsts = (
            await _offsets.beginning_offsets(self._client, earliest, timeout=self._timeout)
            if earliest
            else {}
        )
        result = {}
        for tp, value in wanted.items():
            if value == EARLIEST:
                result[tp] = firsts[tp]
            elif value == LATEST:
                result[tp] = ends[tp]
            else:
                result[tp] = value
        return result

    async def commit(self, done: BatchOffset) -> dict[TopicPartition, int]:
        """Commit the positions Spark has finished, for owned partitions; returns them.

        A failed commit is logged, not raised: Spark's checkpoint already holds the
        progress, and the next batch's commit carries it to the group.
        """
        self._raise_pending()
        owned = self.owned()
        todo = {
            tp: pos
            for tp, pos in done.positions.items()
            if tp in owned
            and tp not in self._gained
            and tp in self._floor
            and pos >= self._floor[tp]
            and self._committed.get(tp) != pos
        }
        if not todo:
            return {}
        try:
            await self._consumer.commit(todo)
        except KafkaError as exc:
            log.warning("aiogroup source: commit of %s failed: %r", todo, exc)
            return {}
        for tp, pos in todo.items():
            if tp in self._floor:  # still owned after the await
                self._committed[tp] = pos
                self._floor[tp] = pos
        return todo
