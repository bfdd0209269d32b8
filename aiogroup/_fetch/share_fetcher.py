"""The share fetcher: one request at a time per partition leader, acknowledgements riding.

Why a module of its own: the only place a share consumer awaits ShareFetch and
ShareAcknowledge.  Everything it decides comes from the pure parts - which epoch,
which partitions, which acknowledgements (:mod:`.share_session`,
:mod:`.share_acknowledgements`) - so what is here is the wiring: a task per leader,
the buffer of records handed to the application, the commit surface and the close.

* One task per leader node reads that leader's assigned partitions through one share
  session, one request at a time (the session epoch orders them).  Each turn it sends
  the first that applies: RENEW acknowledgements (a ShareAcknowledge marked
  ``is_renew_ack``, KIP-1222), a commit's acknowledgements (ShareAcknowledge), a
  ShareFetch when the buffer has room (carrying every pending acknowledgement of the
  leader's partitions), acknowledgements alone when the buffer is full; otherwise it
  waits to be woken.  "Room" reads ahead: a buffer of at most ``max_poll_records``
  records, with more than half their lock left, does not hold the next fetch back, so
  the broker's round trip overlaps the application's work (an answer rounded past
  that bound lets the next fetch leave at once after full answers with everything
  before it acknowledged: :meth:`ShareFetcher._past_room`) (Java's share consumer
  also keeps a ShareFetch per node going while the application polls, with the
  previous poll's acknowledgements riding on it).
* A poll that finds the buffer empty writes the leader's next ShareFetch itself when
  the leader's loop is idle and would send one (:meth:`ShareFetcher._prefetch`): the
  loop then only awaits its answer.
* ``max_records`` is ``max_poll_records``; where the leader speaks ShareFetch v2 it is
  a strict limit (``share_acquire_mode`` record_limit, KIP-1206) unless the consumer
  asked for batch-optimized acquisition (whole batches).
* A ShareProcessor stopping while its consumer runs on holds the ShareFetches until
  the application polls again (:meth:`ShareFetcher.hold_fetching`): what it released
  is not acquired back for a consumer nobody reads.
* A record's lock deadline is when its ShareFetch *left* plus the lock duration the
  answer names: the broker took the lock no earlier, so the lock surely holds until
  then.  A record past it is never handed out.
* A lost session (an error, no answer) drops what it acquired: the broker gives those
  records back; an epoch-0 request opens a new session.
* Closing: implicit mode accepts what was handed out; explicit mode RELEASEs what was
  handed out and not acknowledged; each open session ends with a ShareAcknowledge at
  epoch -1 carrying them, which also gives back what was never handed out - so another
  consumer gets those records at once, not after the lock.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import CloseReason
from aiokafka.errors import (
    CorruptRecordException,
    IncompatibleBrokerVersion,
)

from aiogroup._fetch.share_acknowledgements import (
    AcknowledgementTracker,
    AckResult,
    AcquiredRun,
)
from aiogroup._fetch.share_records import RecordBuffer, ShareRecord, acquired_records, hand_out
from aiogroup._fetch.share_session import SessionReaction, SessionRequest, ShareSession
from aiogroup._protocol.share import (
    AckBatch,
    AcknowledgeType,
    AcquireMode,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    parse_share_acknowledge,
    parse_share_fetch,
)
from aiogroup._support.supervision import TaskScope
from aiogroup.errors import KafkaError
from aiogroup.structs import TopicPartition

__all__ = ["ShareFetcher", "ShareFetcherConfig", "ShareHooks"]

log = logging.getLogger("aiogroup.share")

#: Partition errors after which the leader is looked up again (the partition moves on).
_LEADER_ERRORS = frozenset({3, 6, 74, 100})
#: The lock duration assumed until a ShareFetch answer names one (Kafka's default).
_DEFAULT_LOCK_MS = 30_000
#: How many answers in a row must have brought a full fetch (at least
#: ``max_poll_records``) before the next ShareFetch may leave at an answer that alone
#: exceeds one poll's worth (:meth:`ShareFetcher._fetch_at_answer`): at first, and
#: again after each such fetch that came back full ...
_FULL_ANSWERS_TO_READ_AHEAD = 2
#: ... and at most this many: each such fetch that came back short doubles the count.
_FULL_ANSWERS_MAX = 64
#: The least a ShareFetch asks for as its MaxBytes (:meth:`ShareFetcher._fetch_max_bytes`).
_FETCH_BYTES_FLOOR = 1 << 20
#: How many times the bytes its records are expected to take a ShareFetch asks for.
_FETCH_BYTES_HEADROOM = 4


class _Signal:
    """An ``asyncio.Event`` whose wait takes a timeout without a task of its own.

    Why: the leader's loop and a poll that finds nothing each wait once per ShareFetch
    cycle; with ``asyncio.Event`` and a timeout that was a task per event waited on,
    ``asyncio.wait`` and the tasks' cancellations - loop steps between a ShareFetch's
    answer and the next request (issue 28).  Here a wait is one future and, with a
    timeout, one timer."""

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future[None]] = []

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def clear(self) -> None:
        self._set = False

    async def wait(self, timeout: float | None) -> None:
        """Until set (at once if it is), or ``timeout`` seconds (None: no limit)."""
        if self._set:
            return
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        timer = None if timeout is None else loop.call_later(timeout, _resolve, waiter)
        try:
            await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if waiter in self._waiters:
                self._waiters.remove(waiter)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


@dataclass(frozen=True, slots=True)
class ShareFetcherConfig:
    group_id: str
    explicit: bool
    max_poll_records: int
    fetch_max_wait_ms: int
    fetch_min_bytes: int
    fetch_max_bytes: int
    retry_backoff: float
    auto_renew: bool
    #: Renew this long before a lock's sure end (auto_renew; None: a quarter of the lock).
    renew_margin: float | None
    check_crcs: bool = True
    #: ShareFetch v2's acquire mode (KIP-1206): RECORD_LIMIT makes ``max_poll_records``
    #: a strict limit per fetch; BATCH_OPTIMIZED lets the broker round up to whole
    #: record batches (what v1 always does, and Java's default).
    acquire_mode: AcquireMode = AcquireMode.RECORD_LIMIT
    key_deserializer: Callable[[bytes | None], Any] | None = None
    value_deserializer: Callable[[bytes | None], Any] | None = None


@dataclass
class ShareHooks:
    """Callbacks the facade wires: metrics, the recorder, the result callback."""

    #: Records one ShareFetch acquired for one partition (sent: when it left).
    acquired: Callable[[list[ShareRecord], float, int], None] = lambda records, sent, lock_ms: None
    acknowledged: Callable[[AckResult, float], None] = lambda result, sent: None
    results: Callable[[list[AckResult]], None] = lambda results: None
    closing: Callable[[], None] = lambda: None


@dataclass(slots=True)
class _Undecoded:
    """One partition's part of a ShareFetch answer, its acquired runs registered."""

    tp: tuple[str, int]
    data: bytes | None
    runs: list[AcquiredRun]
    #: When the fetch left (monotonic), and the lock it reported: for the hooks.
    sent: float
    lock_ms: int

    @property
    def size(self) -> int:
        return sum(r.last - r.first + 1 for r in self.runs)


@dataclass(slots=True)
class _InFlight:
    """A ShareFetch on its way: its answer to await, and what taking it in needs."""

    answer: Awaitable[Any]
    #: The tracker's token for the acknowledgements riding on it (0: none).
    token: int
    #: The session it was sent in: (node, generation).
    key: tuple[int, int]
    #: When it left: loop time (lock deadlines) and monotonic (the hooks).
    at: float
    mono: float
    #: Read ahead past the room rule (:meth:`ShareFetcher._past_room`).
    ahead: bool = False


@dataclass
class _Flush:
    """A commit waiting for some leaders to send what was pending when it began."""

    nodes: set[int]
    results: list[AckResult] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def node_done(self, node: int) -> None:
        self.nodes.discard(node)
        if not self.nodes:
            self.done.set()


class ShareFetcher:
    """Reads the assigned share partitions for one consumer; hands records out."""

    def __init__(
        self, client: AIOKafkaClient, config: ShareFetcherConfig, hooks: ShareHooks
    ) -> None:
        self._client = client
        self._cfg = config
        self.hooks = hooks
        self.tracker = AcknowledgementTracker(explicit=config.explicit)
        self._member_id: Callable[[], str] = lambda: ""
        #: Assigned partitions -> topic id.
        self._assigned: dict[TopicPartition, uuid.UUID] = {}
        #: name -> topic id of every topic ever assigned.
        self._topic_ids: dict[str, uuid.UUID] = {}
        self._sessions: dict[int, ShareSession] = {}
        self._loops: dict[int, asyncio.Task[None]] = {}
        self._wake: dict[int, _Signal] = {}
        self._buffer = RecordBuffer()
        #: What fetches acquired and are not decoded yet: decoded once the leader's task
        #: waits on its next request (or by the application's take, if first), so the
        #: next ShareFetch leaves before this one's records are decoded.
        self._undecoded: deque[_Undecoded] = deque()
        self._undecoded_n = 0
        self._arrived = False
        #: Wakes a waiting poll: records arrived, an error reported, the gate changed.
        self._poll_wake = _Signal()
        #: Set by an error (a stop included): wakes a waiting poll whatever the gate says.
        self._alert = asyncio.Event()
        self._flushes: list[_Flush] = []
        self._lock_ms = _DEFAULT_LOCK_MS
        self._valid_until: float | None = None
        self._closing = False
        self._closing_reported = False
        #: No ShareFetch leaves (acknowledgements still do) until the application polls
        #: (again): so from the start - a started consumer nobody polls yet acquires
        #: nothing, as Java's, else its records' locks run out in its buffer and their
        #: delivery counts rise for nothing - and after :meth:`hold_fetching` (a
        #: ShareProcessor stopping while its consumer runs on).
        self._fetch_held = True
        #: How many keep the locks of the records handed out (a ShareProcessor while it
        #: runs: :meth:`keep_locks`); with ``auto_renew``, the fetcher always does.
        self._lock_keepers = 0
        #: Leaders whose session must be reopened (the membership ended meanwhile).
        self._reset_nodes: set[int] = set()
        #: A ShareFetch the application's take wrote (:meth:`_prefetch`), per leader: its
        #: loop takes the answer in before anything else.
        self._prefetched: dict[int, _InFlight] = {}
        #: Leaders whose loop waits in :meth:`_idle` (nothing of theirs in flight).
        self._idling: set[int] = set()
        #: Per leader, how many ShareFetch answers in a row acquired a full fetch, and
        #: how many it takes to read ahead past the room rule (:meth:`_past_room`).
        self._full_answers: dict[int, int] = {}
        self._full_needed: dict[int, int] = {}
        #: Bytes a record took in the last answer that acquired any (None: none yet).
        self._record_bytes: float | None = None
        self._scope = TaskScope(self._crashed)
        self._leader_watch: asyncio.Task[Any] | None = None
        self._error: BaseException | None = None
        #: The first fatal error: raised by every poll from then on.
        self._fatal: BaseException | None = None

    # -- wiring from the routine -------------------------------------------------------

    def set_member_id(self, member_id: Callable[[], str]) -> None:
        self._member_id = member_id

    def set_assignment(self, partitions: dict[tuple[str, int], uuid.UUID]) -> None:
        new = {TopicPartition(t, p): tid for (t, p), tid in partitions.items()}
        gone = set(self._assigned) - set(new)
        self._assigned = new
        self._topic_ids.update({tp.topic: tid for tp, tid in new.items()})
        if gone:
            self._decode_all()  # the recorder hears of every acquisition before its release
            self._buffer.drop_partitions({(tp.topic, tp.partition) for tp in gone})
            # Not ours to hand out any more.  The broker keeps them locked to us until
            # their lock ends (measured on Kafka 4.4: forgetting the partition from the
            # session does not give them back), so what was never handed out is RELEASEd
            # (with the next request, which forgets the partition too); what the
            # application holds is forgotten (its acknowledgement is refused).
            self.tracker.release_undelivered(gone)
            self.hooks.results(self.tracker.drop_delivered(gone, "no longer assigned"))
        self._ensure_loops()
        self._wake_all()

    def drop_acquired(self, reason: str) -> None:
        self._clear_buffer()
        results = self.tracker.drop_all(reason)
        self._reset_nodes = set(self._sessions)
        for flush in self._flushes:
            flush.results.extend(results)
        self.hooks.results(results)
        self._wake_all()

    def set_membership_valid_until(self, deadline: float | None) -> None:
        self._valid_until = deadline
        self._poll_wake.set()

    def report_error(self, exc: BaseException, *, fatal: bool) -> None:
        self._error = exc
        if fatal and self._fatal is None:
            self._fatal = exc
        self._alert.set()
        self._poll_wake.set()

    # -- the application side ----------------------------------------------------------

    def hold_fetching(self) -> None:
        """Send no ShareFetch until the application's next poll (:meth:`polled`).

        Why: whoever stops taking records (a ShareProcessor's ``stop()``, its consumer
        running on) RELEASEs what it held; a read-ahead ShareFetch after that would
        acquire those records again for a consumer nobody polls - locked to it until
        their lock runs out, and delivered to the next member with their count raised
        twice.  As Java's share consumer, which fetches only for a poll, this consumer
        then acquires nothing until something asks for records again.  A fetch already
        in flight is answered as usual (its records are buffered for the next poll)."""
        self._fetch_held = True

    def keep_locks(self, on: bool) -> None:
        """Renew the locks of the records handed out (the ``auto_renew`` rule) while at
        least one keeper asked for it - a ShareProcessor does from its start to its stop,
        whether or not the consumer was made with ``auto_renew``."""
        self._lock_keepers += 1 if on else -1
        if self._lock_keepers < 0:
            raise RuntimeError("keep_locks(False) without keep_locks(True)")
        self._wake_all()

    @property
    def _renewing(self) -> bool:
        return self._cfg.auto_renew or self._lock_keepers > 0

    def _until_renewal(self, now: float) -> float | None:
        """Seconds until a held record's lock falls due for renewal (0 if now), None when
        nothing is renewed: a request must be back by then, since a RENEW waits for the
        request in flight to its leader.  Buffered records count: the application may
        take them while the request is out."""
        if not self._renewing:
            return None
        due = self.tracker.next_renewal(self._renew_margin(), now, buffered=True)
        return None if due is None else max(0.0, due - now)

    def polled(self) -> None:
        """The application began a poll: fetching resumes if it was held."""
        if self._fetch_held:
            self._fetch_held = False
            self._wake_all()

    @property
    def fatal_error(self) -> BaseException | None:
        """The error every poll raises from now on (None: none yet)."""
        return self._fatal

    def raise_pending_error(self) -> None:
        """Raise what was reported: a fatal error every time, another one once."""
        if self._fatal is not None:
            # Raised again on each poll: without the last raise's traceback, so a loop
            # that polls on does not grow it without end.
            raise self._fatal.with_traceback(None)
        exc, self._error = self._error, None
        self._alert.clear()
        if exc is not None:
            raise exc

    def has_error(self) -> bool:
        return self._error is not None

    def take_records(self, max_records: int) -> list[ShareRecord]:
        """Up to ``max_records`` buffered records that may be handed out now."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        if self._valid_until is None or now >= self._valid_until:
            return []
        out: list[ShareRecord] = []
        buffer = self._buffer
        if self._idling and not buffer and not self._undecoded:
            # A poll that finds the buffer empty: the next ShareFetch goes on the wire
            # now, from this call, carrying what was acknowledged before it (issue 28).
            self._prefetch()
        while len(out) < max_records:
            if not buffer:
                if not self._undecoded:
                    break
                self._decode_next()
                buffer = self._buffer
                continue
            out += hand_out(self.tracker, buffer.take(max_records - len(out)), now)
        if self._read_ahead_room(now):
            self._wake_all()  # room again: fetch more
        return out

    async def wait_for_records(self, timeout: float) -> None:
        """Until records may be handed out, an error (or a stop) is reported, or
        ``timeout``.  While the delivery gate is closed only its reopening (a heartbeat
        answered) or an error wakes the caller: buffered records must wait for it."""
        now = asyncio.get_running_loop().time()
        if self._alert.is_set():
            await asyncio.sleep(0)  # always a step of the loop: a caller may wait in a loop
            return
        if self._valid_until is not None and now < self._valid_until:
            if not self._buffer and not self._undecoded:
                self._arrived = False
            if self._arrived:
                await asyncio.sleep(0)
                return
            timeout = min(timeout, self._valid_until - now)
        self._poll_wake.clear()
        await self._poll_wake.wait(timeout)

    def acknowledged(self) -> None:
        """The application acknowledged something: let it ride on the next request."""
        self._wake_all()

    async def commit(self) -> list[AckResult]:
        """Send every pending acknowledgement now (ShareAcknowledge per leader) and
        return how they ended."""
        if not self._cfg.explicit:
            self.tracker.accept_delivered()
        # Leaders with acknowledgements pending, or in flight (their answers count too).
        nodes = {
            n for n in self._sessions if self._has_work(n, renew=False) or self._has_in_flight(n)
        }
        if not nodes:
            return []
        flush = _Flush(set(nodes))
        self._flushes.append(flush)
        self._wake_all()
        try:
            await flush.done.wait()
        finally:
            if flush in self._flushes:
                self._flushes.remove(flush)
        return flush.results

    # -- lifecycle -----------------------------------------------------------------------

    async def close(self, timeout: float) -> None:
        """Settle what was handed out (accept in implicit mode, release in explicit),
        end the sessions (epoch -1, which gives back the rest), stop the tasks."""
        if not self._cfg.explicit:
            self.tracker.accept_delivered()
        self.tracker.release_unacknowledged()
        self._clear_buffer()
        self._closing = True
        self._wake_all()
        loops = [t for t in self._loops.values() if not t.done()]
        if loops:
            await asyncio.wait(loops, timeout=timeout)
        self._report_closing()
        await self._scope.aclose()

    def _report_closing(self) -> None:
        """Tell the hooks the close began, once: when the first session's closing
        request leaves (or, with none open, once the loops are done).  Not earlier: a
        ShareFetch still in flight when ``close()`` began acquires records on its
        answer, and the history must show them acquired before the close that gives
        them back."""
        if not self._closing_reported:
            self._closing_reported = True
            self.hooks.closing()

    async def abort(self) -> None:
        for sent in self._prefetched.values():
            if isinstance(sent.answer, asyncio.Future):
                sent.answer.cancel()
        await self._scope.aclose()

    def _crashed(self, exc: BaseException) -> None:
        log.error("share fetcher failed", exc_info=exc)
        self.report_error(KafkaError(f"the share fetcher failed: {exc!r}"), fatal=True)

    # -- per leader --------------------------------------------------------------------

    def _leaders(self) -> dict[int, set[TopicPartition]]:
        cluster = self._client.cluster
        out: dict[int, set[TopicPartition]] = {}
        missing = False
        for tp in self._assigned:
            leader = cluster.leader_for_partition(tp)
            if leader is None or leader < 0:
                missing = True
                continue
            out.setdefault(leader, set()).add(tp)
        if missing and (self._leader_watch is None or self._leader_watch.done()):
            self._leader_watch = self._scope.spawn(self._find_leaders(), "share-leaders")
        return out

    async def _find_leaders(self) -> None:
        """Some assigned partitions have no known leader: refresh metadata until they do
        (a topic just assigned is not in the client's metadata yet)."""
        while not self._closing:
            await self._client.force_metadata_update()
            cluster = self._client.cluster
            if all((cluster.leader_for_partition(tp) or -1) >= 0 for tp in self._assigned):
                break
            await asyncio.sleep(self._cfg.retry_backoff)
        self._leader_watch = None
        self._ensure_loops()
        self._wake_all()

    def _ensure_loops(self) -> None:
        if self._closing:
            return
        for node in self._leaders():
            task = self._loops.get(node)
            if task is None or task.done():
                self._sessions.setdefault(node, ShareSession(node))
                self._wake.setdefault(node, _Signal())
                self._loops[node] = self._scope.spawn(
                    self._leader_loop(node), f"share-fetch-{node}"
                )

    def _read_ahead_room(self, now: float) -> bool:
        """May a ShareFetch go out now?  While the buffer is empty, and also while it
        holds at most ``max_poll_records`` records whose lock has more than half left:
        the next fetch's round trip and the broker's acquisition then overlap the
        application working through the buffer (a fetch only once the buffer is empty
        left the loop waiting on the broker: 3.6 s of a 6.8 s drain).  The bound keeps
        what waits under its lock to about two polls' worth, and a buffer whose
        records are half through their lock is drained before more is acquired.

        A batch-optimized answer may alone exceed the bound (it rounds up to whole
        record batches: 592 records for 500 asked in the drain benchmark); the next
        fetch then waits for the application's first take.  Not counting that rounding
        was tried (issue 28): one consumer's drain gained (the next fetch left at the
        answer: 0.25-0.33 ms from answer to request instead of 1.5 ms), but four
        consumers on two partitions lost about a quarter of their rate: each held about
        a batch more under lock, and their fetches came back short (1,934 ShareFetches
        for 1,000,000 records against 1,707-1,717; round trips 23-29 ms median against
        15-18) - the share-partitions' lock limit (2,000 records each by default) the
        likely cause.  So did a bound of two polls' worth before (10.7-18.0 ms against
        5.5-8.6).  At an answer, after full answers, it is counted out after all
        (:meth:`_past_room`), backing off where answers come back short."""
        buffer = self._buffer
        if not buffer and not self._undecoded:
            return True
        run = buffer.first()._run if buffer else self._undecoded[0].runs[0]
        waiting = len(buffer) + self._undecoded_n
        return self._room(now, waiting, None if run is None else run.deadline)

    def _room(self, now: float, waiting: int, first_deadline: float | None) -> bool:
        """The read-ahead rule: ``waiting`` records within ``max_poll_records``, and
        the first of them (its lock ending at ``first_deadline``; None: not the
        tracker's) more than half through its lock."""
        if waiting > self._cfg.max_poll_records:
            return False
        return first_deadline is None or first_deadline - now > self._lock_ms / 2000

    def _clear_buffer(self) -> None:
        self._decode_all()  # the acquired hook hears of every acquisition
        self._buffer.clear()

    def _decode_all(self) -> None:
        while self._undecoded:
            self._decode_next()

    def _decode_next(self) -> None:
        """Decode the oldest undecoded fetch result into the buffer."""
        u = self._undecoded.popleft()
        self._undecoded_n -= u.size
        try:
            records = self._decode(u)
        except CorruptRecordException as exc:
            # Its records are never handed out: the broker gets them back when their
            # lock ends (or the session closes); the next poll raises this once.
            log.error("share group %s: %s", self._cfg.group_id, exc)
            self.report_error(exc, fatal=False)
            return
        if records:
            self._buffer.extend(records)

    def _decode(self, u: _Undecoded) -> list[ShareRecord]:
        cfg = self._cfg
        records = acquired_records(
            u.data,
            u.runs,
            check_crcs=cfg.check_crcs,
            key_deserializer=cfg.key_deserializer,
            value_deserializer=cfg.value_deserializer,
        )
        if records:
            self.hooks.acquired(records, u.sent, u.lock_ms)
        if len(records) < u.size:
            self._wake_all()  # gaps to acknowledge
        return records

    def _wake_all(self) -> None:
        for event in self._wake.values():
            event.set()

    def _partitions_of(self, node: int) -> set[TopicPartition]:
        return self._leaders().get(node, set())

    def _has_work(self, node: int, *, renew: bool) -> bool:
        session = self._sessions.get(node)
        if session is None or not session.is_open:
            return False
        return self.tracker.pending(self._session_tps(node), renew=renew)

    def _to_forget(self, node: int, wanted: set[TopicPartition]) -> bool:
        """Does the session hold partitions no longer read from this leader?"""
        session = self._sessions[node]
        if not session.is_open:
            return False
        ids = {(self._assigned[tp], tp.partition) for tp in wanted}
        return bool(session.partitions - ids)

    def _has_in_flight(self, node: int) -> bool:
        session = self._sessions.get(node)
        return session is not None and session.in_flight is not None

    def _session_tps(self, node: int) -> list[tuple[str, int]]:
        """The partitions whose held records this leader's session acquired."""
        session = self._sessions[node]
        return self.tracker.session_partitions((node, session.generation))

    async def _leader_loop(self, node: int) -> None:
        session = self._sessions[node]
        wake = self._wake[node]
        loop = asyncio.get_running_loop()
        while True:
            wake.clear()
            ahead = self._prefetched.pop(node, None)
            if ahead is not None:
                # Written by the application's take: its answer first (the session
                # allows one request at a time), then on as usual.
                try:
                    await self._fetch(node, session, set(), ahead)
                except (KafkaError, OSError, asyncio.TimeoutError) as exc:
                    log.debug("share fetch from node %d failed: %r", node, exc)
                    await asyncio.sleep(self._cfg.retry_backoff)
                continue
            if node in self._reset_nodes and session.in_flight is None:
                self._reset_nodes.discard(node)
                session.reset()
            if self._closing:
                await self._close_session(node, session)
                return
            if self._renewing:
                self.tracker.renew_expiring(loop.time(), self._renew_margin())
            wanted = self._partitions_of(node)
            flush = [f for f in self._flushes if node in f.nodes]
            try:
                if self._has_work(node, renew=True):
                    await self._acknowledge(node, session, renew=True)
                elif flush and self._has_work(node, renew=False):
                    await self._acknowledge(node, session, renew=False)
                elif flush:
                    for f in flush:
                        f.node_done(node)
                    continue
                elif (
                    not self._fetch_held
                    and self._read_ahead_room(loop.time())
                    and (wanted or self._to_forget(node, wanted))
                ):
                    # Also with nothing left to read here: the fetch forgets the
                    # partitions that left the assignment, and the broker releases
                    # what this member still held of them.
                    await self._fetch(node, session, wanted)
                elif self._has_work(node, renew=False):
                    await self._acknowledge(node, session, renew=False)
                else:
                    await self._idle(node, wake)
            except (KafkaError, OSError, asyncio.TimeoutError) as exc:
                log.debug("share fetch from node %d failed: %r", node, exc)
                await asyncio.sleep(self._cfg.retry_backoff)

    async def _idle(self, node: int, wake: _Signal) -> None:
        """Wait to be woken (or a renewal falling due).  Meanwhile the application's
        poll may write this leader's next ShareFetch (:meth:`_prefetch`)."""
        timeout = self._until_renewal(asyncio.get_running_loop().time())
        self._idling.add(node)
        try:
            await wake.wait(timeout)
        finally:
            self._idling.discard(node)

    def _fetch_may_leave(self, node: int) -> bool:
        """Would the leader's loop send a ShareFetch next if there were read-ahead room?
        Not if something else comes first: a close, a session to reopen, held fetching,
        a commit's flush, RENEWs (with locks kept, the loop decides), or nothing to read."""
        return not (
            self._closing
            or self._fetch_held
            or self._renewing
            or node in self._reset_nodes
            or any(node in f.nodes for f in self._flushes)
            or self._has_work(node, renew=True)
            or not self._partitions_of(node)
        )

    def _prefetch(self) -> None:
        """Write the next ShareFetch of each idle leader whose loop would send one, now,
        from the application's poll that found the buffer empty (before it waits).

        Why (issue 28): polls served from the buffer never yield to the loop, so the
        leader's task, woken by them, sent the next fetch only once the poll that found
        nothing had waited and the task had been scheduled.  Written here, on the
        connection (aiokafka's ``send`` writes synchronously), it carries exactly what
        was acknowledged before this poll - in implicit mode the whole previous answer,
        as one batch per acquired run.  Not earlier (at the take that leaves the buffer
        empty, or at the answer): measured, that splits an acquired run's
        acknowledgements across two requests, which cost the broker about twice the CPU
        and doubled the round trip, or holds twice the locks.  The leader's loop awaits
        the answer (:meth:`_leader_loop`).  Only continuing sessions on a connected
        socket: opening a session, or connecting, stays the loop's."""
        for node in list(self._idling):
            session = self._sessions.get(node)
            if (
                session is None
                or not session.is_open
                or session.in_flight is not None
                or node in self._prefetched
                or not self._fetch_may_leave(node)
            ):
                continue
            conn = self._connection(node)
            if conn is None:
                continue
            self._prefetched[node] = self._fetch_request(
                node, session, self._partitions_of(node), task=True, conn=conn
            )
            self._wake[node].set()

    def _connection(self, node: int) -> Any:
        """aiokafka's connected connection to ``node``, to write a request on at once
        (None: not connected, or a client without the connection table)."""
        conns = getattr(self._client, "_conns", None)
        if conns is None:
            return None
        conn = conns.get((node, ConnectionGroup.DEFAULT))
        if conn is None or not conn.connected():
            return None
        return conn

    def _renew_margin(self) -> float:
        """How long before a lock's sure end a RENEW goes out.  By default a quarter of
        the lock, but at least a ShareFetch's wait and a round trip (a renewal waits for
        the request in flight to its leader), and at most three quarters of the lock."""
        margin = self._cfg.renew_margin
        if margin is not None:
            return margin
        lock = self._lock_ms / 1000
        floor = self._cfg.fetch_max_wait_ms / 1000 + 0.25
        return min(max(lock / 4, floor), lock * 0.75)

    def _key(self, node: int, session: ShareSession) -> tuple[int, int]:
        return (node, session.generation)

    def _ids(self, acks: dict[tuple[str, int], Any]) -> dict[tuple[uuid.UUID, int], Any]:
        out = {}
        for (t, p), batches in acks.items():
            tid = self._topic_ids.get(t)
            if tid is not None:
                out[(tid, p)] = batches
        return out

    def _names(self) -> dict[uuid.UUID, str]:
        """Topic id -> name of every topic ever assigned (an acknowledgement for a
        partition that left the assignment is still answered by id)."""
        return {tid: name for name, tid in self._topic_ids.items()}

    async def _fetch(
        self,
        node: int,
        session: ShareSession,
        wanted: set[TopicPartition],
        sent: _InFlight | None = None,
    ) -> None:
        """One ShareFetch (``sent``: one already written), and the ones each answer lets
        leave at once (:meth:`_answered`)."""
        if sent is None:
            sent = self._fetch_request(node, session, wanted, task=False)
        while sent is not None:
            sent = await self._answered(node, session, sent)

    def _fetch_request(
        self,
        node: int,
        session: ShareSession,
        wanted: set[TopicPartition],
        *,
        task: bool,
        conn: Any = None,
        max_wait_ms: int | None = None,
    ) -> _InFlight:
        """Build the next ShareFetch (the pending acknowledgements riding on it) and start
        sending it: written now on ``conn`` if given (its answer awaited by a task), else
        as a task with ``task`` (it is written once the loop runs it), else as a
        coroutine for the caller to await at once."""
        loop = asyncio.get_running_loop()
        cfg = self._cfg
        key = self._key(node, session)
        wanted_ids = {(self._assigned[tp], tp.partition) for tp in wanted}
        token, acks = 0, dict[tuple[str, int], list[AckBatch]]()
        if session.is_open:
            token, acks = self.tracker.take(
                self._session_tps(node), now=loop.time(), lock_ms=self._lock_ms
            )
        plan = session.fetch_request(wanted_ids, self._ids(acks))
        if max_wait_ms is None:
            max_wait_ms = cfg.fetch_max_wait_ms
        until = self._until_renewal(loop.time())
        if until is not None:  # back before a renewal falls due, not up to max_wait after
            max_wait_ms = min(max_wait_ms, int(until * 1000))
        request = ShareFetchRequest(
            cfg.group_id,
            self._member_id(),
            plan.epoch,
            plan.topics,
            forgotten=plan.forgotten,
            max_wait_ms=max_wait_ms,
            min_bytes=cfg.fetch_min_bytes,
            max_bytes=self._fetch_max_bytes(len(wanted)),
            max_records=cfg.max_poll_records,
            batch_size=cfg.max_poll_records,
            acquire_mode=cfg.acquire_mode,
        )
        answer: Awaitable[Any]
        if conn is not None:
            answer = self._write(conn, request, lambda: self._fetch_v1(request, plan))
        else:
            sending = self._send(node, request, fallback=lambda: self._fetch_v1(request, plan))
            answer = asyncio.ensure_future(sending) if task else sending
        return _InFlight(answer, token, key, loop.time(), time.monotonic())

    def _fetch_max_bytes(self, partitions: int) -> int:
        """The MaxBytes of the next ShareFetch to a leader reading ``partitions``: what
        ``max_poll_records`` records of the size the last answer brought take, times
        the partitions (the broker splits MaxBytes evenly among a fetch's partitions)
        and ``_FETCH_BYTES_HEADROOM``, at least ``_FETCH_BYTES_FLOOR``, at most
        ``fetch_max_bytes`` (until an answer brought records: the floor).

        Why (issue 28): the broker's work per ShareFetch grows with MaxBytes, not with
        what it acquires.  Measured on Kafka 4.4 (its request log, 300,000 records of
        100 B, 500 a fetch): at the 52,428,800 every client sends by default its time
        in a ShareFetch fell from ~3 ms to ~1 ms over each drain (as the backlog left
        to read shrank), and asking for 1 MiB halved its median local time (0.38-0.81 ms
        against 0.88-1.77 ms).  An answer is never empty for it: the broker returns the
        first record batch whatever MaxBytes says, and the next fetch asks for enough
        of what came."""
        cfg = self._cfg
        if self._record_bytes is None:
            return min(cfg.fetch_max_bytes, _FETCH_BYTES_FLOOR)
        want = self._record_bytes * cfg.max_poll_records * max(1, partitions)
        want *= _FETCH_BYTES_HEADROOM
        return min(cfg.fetch_max_bytes, max(_FETCH_BYTES_FLOOR, int(want)))

    def _write(self, conn: Any, request: Any, fallback: Callable[[], Any]) -> asyncio.Future[Any]:
        """Write ``request`` on ``conn`` now (aiokafka's connection writes in ``send``,
        synchronously) and return its answer to come; a timeout closes the connection,
        as ``AIOKafkaClient.send`` does.  A write that fails gives a future
        holding the error, for the loop to take in as a request without an answer."""
        loop = asyncio.get_running_loop()
        try:
            try:
                waiter = conn.send(request)
            except IncompatibleBrokerVersion:
                waiter = conn.send(fallback())
        except Exception as exc:
            failed = loop.create_future()
            failed.set_exception(exc)
            return failed

        answer: asyncio.Future[Any] = asyncio.ensure_future(waiter)

        def timed_out(done: asyncio.Future[Any]) -> None:
            if not done.cancelled() and isinstance(done.exception(), asyncio.TimeoutError):
                conn.close(reason=CloseReason.CONNECTION_TIMEOUT)

        answer.add_done_callback(timed_out)
        return answer

    async def _answered(
        self, node: int, session: ShareSession, sent: _InFlight
    ) -> _InFlight | None:
        """Await the answer to ``sent`` and take it in.  Returns the next ShareFetch if
        the answer let it leave at once (:meth:`_fetch_at_answer`): it goes on the wire
        before the answer's results are reported and its records registered, decoded
        and handed out (issue 28: on the one event loop, that work and the application's
        batch had come between each answer and the next request)."""
        cfg = self._cfg
        key, token = sent.key, sent.token
        try:
            resp = await sent.answer
        except BaseException as exc:  # cancelled included: the session is gone either way
            self._lost(node, session, key, token, f"ShareFetch got no answer: {exc!r}")
            raise
        result = parse_share_fetch(resp)
        reaction = session.answered(result.error_code)
        if reaction is not SessionReaction.OK:
            self._lost(
                node,
                session,
                key,
                token,
                f"share session lost ({result.error_code})",
                answered=True,
            )
            if result.error_code and result.error_code not in (122, 123):
                log.warning(
                    "share group %s: ShareFetch to node %d refused: %s %s",
                    cfg.group_id,
                    node,
                    result.error_code,
                    result.error_message,
                )
            if reaction is SessionReaction.REOPEN_LATER or result.error_code not in (122, 123):
                await asyncio.sleep(cfg.retry_backoff)
            return None
        if result.acquisition_lock_timeout_ms > 0:
            self._lock_ms = result.acquisition_lock_timeout_ms
        names = self._names()
        ack_errors: dict[tuple[str, int], tuple[int, str | None]] = {}
        refresh = False
        deadline = sent.at + self._lock_ms / 1000
        parts = []
        acquired = 0
        answer_bytes = 0
        elsewhere = False  # acquired for a partition that left the assignment meanwhile
        for part in result.partitions:
            topic = names.get(part.topic_id)
            if topic is None:
                continue
            tp = (topic, part.partition)
            parts.append((tp, part))
            if part.acknowledge_error_code:
                ack_errors[tp] = (part.acknowledge_error_code, part.acknowledge_error_message)
            if part.error_code:
                refresh = refresh or part.error_code in _LEADER_ERRORS
                log.debug("share fetch %s: error %d", tp, part.error_code)
            if part.acquired:
                if TopicPartition(*tp) in self._assigned:
                    acquired += sum(a.last_offset - a.first_offset + 1 for a in part.acquired)
                    answer_bytes += len(part.records or b"")
                else:
                    elsewhere = True
        if acquired and answer_bytes:
            self._record_bytes = answer_bytes / acquired
        # The acknowledgements this fetch carried are settled before what it acquired is
        # registered: an answer may acquire again a record it released (or whose late
        # ACCEPT it refused), and that answer must be reported for the old delivery.
        # Where the next fetch leaves at this answer, they are settled after it is
        # written: settling builds a result per acknowledged offset, on the way from
        # the answer to the next request (issue 28), and nothing the next fetch takes
        # depends on it - the records it settles are in flight, never taken again,
        # and none turns back to awaiting an acknowledgement (only a RENEW's would,
        # and with locks kept no fetch leaves at an answer).
        results: list[AckResult] | None = None
        full = self._full_answers.get(node, 0) + 1 if acquired >= cfg.max_poll_records else 0
        self._full_answers[node] = full
        if sent.ahead:
            self._full_needed[node] = _read_ahead_needed(
                self._full_needed.get(node, _FULL_ANSWERS_TO_READ_AHEAD), full > 0
            )
        after: _InFlight | None = None
        leave = not (refresh or elsewhere) and self._fetch_at_answer(node, acquired, deadline, full)
        if leave:
            # Reading ahead past one poll's worth: the broker answers at once with what
            # it can acquire (maybe nothing: other consumers may hold the partitions'
            # lock limit) rather than holding the request up to the fetch's wait.
            ahead = self._past_room(node, acquired, full)
            wait = 0 if ahead else None
            conn = self._connection(node)
            if conn is not None:
                # Written now, on the connection: no task and no loop step before it.
                try:
                    after = self._fetch_request(
                        node,
                        session,
                        self._partitions_of(node),
                        task=True,
                        conn=conn,
                        max_wait_ms=wait,
                    )
                finally:
                    results = self.tracker.answered(token, ack_errors) if token else []
            else:
                results = self.tracker.answered(token, ack_errors) if token else []
                after = self._fetch_request(
                    node, session, self._partitions_of(node), task=True, max_wait_ms=wait
                )
                try:
                    await asyncio.sleep(0)  # the task writes the request
                except BaseException as exc:
                    if isinstance(after.answer, asyncio.Future):
                        after.answer.cancel()
                    self._lost(node, session, after.key, after.token, f"cancelled: {exc!r}")
                    raise
            after.ahead = ahead
        if results is None:
            results = self.tracker.answered(token, ack_errors) if token else []
        self._report(results, sent.mono, node)
        arrived = 0
        for tp, part in parts:
            if not part.acquired:
                continue
            runs = [
                self.tracker.acquired_range(
                    tp, a.first_offset, a.last_offset, a.delivery_count, deadline, key
                )
                for a in part.acquired
            ]
            u = _Undecoded(tp, part.records, runs, sent.mono, self._lock_ms)
            if TopicPartition(*tp) in self._assigned:
                self._undecoded.append(u)
                self._undecoded_n += u.size
                arrived += u.size
            else:
                # Acquired for a partition that left the assignment meanwhile: back.
                self._decode(u)
                self.tracker.release_undelivered([tp])
                self._wake_all()
        if arrived:
            # Decoded as soon as this task next waits - by then the next fetch (if the
            # buffer leaves room) is on the wire - or by the application's take first.
            # Either way before any acknowledgement of them can be sent.
            loop = asyncio.get_running_loop()
            loop.call_soon(self._decode_all)
            self._arrived = True
            if self._valid_until is not None and loop.time() < self._valid_until:
                self._poll_wake.set()  # (a closed gate: only its reopening wakes a poll)
        if refresh:
            # A leader moved (or a topic is not known there yet): look again, and do
            # not ask this broker again at once.
            self._client.force_metadata_update()
            self._ensure_loops()
            await asyncio.sleep(cfg.retry_backoff)
        return after

    def _fetch_at_answer(self, node: int, acquired: int, deadline: float, full: int = 0) -> bool:
        """Would the leader's loop, given this answer, send a ShareFetch next?  The same
        rules, counting the answer's ``acquired`` records (their locks end at
        ``deadline``) as if buffered: nothing else comes first (a close, a session to
        reopen, held fetching, a commit's flush, RENEWs - with locks kept, the loop
        decides), and there is read-ahead room.  The acknowledgements that ride on that
        fetch are those the application made by now; this answer's records are not
        handed out yet, so theirs ride on a later request.

        One exception to the room rule: an answer that alone exceeds one poll's worth
        only by a batch-optimized fetch's rounding up (at most twice
        ``max_poll_records``) lets the next fetch leave when everything before it was
        handed out *and* acknowledged (no acquired run's acknowledgements split over
        two requests) and the last ``_FULL_ANSWERS_TO_READ_AHEAD`` answers (``full``
        counts them) were full.  Why (issue 28): otherwise the next fetch waited for
        the application's polls through the whole answer - the client's time per
        cycle added to the round trip.  Why only after full answers: reading ahead
        holds one fetch more under lock, and where consumers share partitions up to
        the broker's lock limit (2,000 records a share-partition by default) answers
        come back short - then this consumer stops reading ahead until answers are
        full again (always reading ahead was measured to cost four consumers on two
        partitions a quarter of their rate).  Such a fetch asks the broker not to wait
        (``max_wait_ms`` 0): where the lock limit leaves nothing to acquire, it answers
        at once, empty, instead of holding the request for the fetch's whole wait."""
        if not self._fetch_may_leave(node):
            return False
        if self._past_room(node, acquired, full):
            return True
        buffer = self._buffer
        waiting = len(buffer) + self._undecoded_n + acquired
        if buffer:
            first = buffer.first()._run
            first_deadline = None if first is None else first.deadline
        elif self._undecoded:
            first_deadline = self._undecoded[0].runs[0].deadline
        else:
            first_deadline = deadline
        return self._room(asyncio.get_running_loop().time(), waiting, first_deadline)

    def _past_room(self, node: int, acquired: int, full: int) -> bool:
        """The exception to the room rule (:meth:`_fetch_at_answer`): this answer's
        ``acquired`` records exceed one poll's worth only by a batch-optimized fetch's
        rounding, everything before them was handed out and acknowledged, and
        ``full`` answers in a row were full - as many as the leader's last such
        fetches ask for (:func:`_read_ahead_needed`)."""
        return (
            full >= self._full_needed.get(node, _FULL_ANSWERS_TO_READ_AHEAD)
            and not self._buffer
            and not self._undecoded
            and acquired <= 2 * self._cfg.max_poll_records
            and not self.tracker.unacknowledged()
        )

    def _fetch_v1(self, request: ShareFetchRequest, plan: SessionRequest) -> ShareFetchRequest:
        """The same fetch without strict acquisition, for a leader without ShareFetch v2."""
        return ShareFetchRequest(
            request.group_id,
            request.member_id,
            request.session_epoch,
            plan.topics,
            forgotten=plan.forgotten,
            max_wait_ms=request.max_wait_ms,
            min_bytes=request.min_bytes,
            max_bytes=request.max_bytes,
            max_records=request.max_records,
            batch_size=request.batch_size,
        )

    async def _send(
        self, node: int, request: Any, *, fallback: Callable[[], Any] | None = None
    ) -> Any:
        """``request``; to a leader too old for it, ``fallback()`` (built only then)."""
        try:
            return await self._client.send(node, request)
        except IncompatibleBrokerVersion:
            if fallback is None:
                raise
            return await self._client.send(node, fallback())

    async def _acknowledge(self, node: int, session: ShareSession, *, renew: bool) -> None:
        loop = asyncio.get_running_loop()
        key = self._key(node, session)
        token, acks = self.tracker.take(
            self._session_tps(node), now=loop.time(), lock_ms=self._lock_ms, renew=renew
        )
        plan = session.acknowledge_request(self._ids(acks))
        request = ShareAcknowledgeRequest(
            self._cfg.group_id, self._member_id(), plan.epoch, plan.topics, is_renew_ack=renew
        )
        sent_mono = time.monotonic()
        try:
            resp = await self._client.send(node, request)
        except BaseException as exc:
            self._lost(node, session, key, token, f"ShareAcknowledge got no answer: {exc!r}")
            raise
        result = parse_share_acknowledge(resp)
        names = self._names()
        errors = {
            (names[p.topic_id], p.partition): (p.error_code, p.error_message)
            for p in result.partitions
            if p.error_code and p.topic_id in names
        }
        reaction = session.answered(result.error_code)
        if reaction is not SessionReaction.OK:
            self._lost(
                node,
                session,
                key,
                token,
                f"share session lost ({result.error_code})",
                answered=True,
            )
            return
        lock = result.acquisition_lock_timeout_ms if renew else None
        self._report(self.tracker.answered(token, errors, lock_ms=lock), sent_mono, node)

    async def _close_session(self, node: int, session: ShareSession) -> None:
        # What a fetch answered since close() began: its acquisitions are reported
        # (decoded) now, before the close that gives them back.
        self._clear_buffer()
        if not session.is_open or session.in_flight is not None:
            return
        self._report_closing()
        loop = asyncio.get_running_loop()
        token, acks = self.tracker.take(
            self._session_tps(node), now=loop.time(), lock_ms=self._lock_ms
        )
        plan = session.acknowledge_request(self._ids(acks), close=True)
        request = ShareAcknowledgeRequest(
            self._cfg.group_id, self._member_id(), plan.epoch, plan.topics
        )
        sent_mono = time.monotonic()
        try:
            resp = await self._client.send(node, request)
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            session.failed()
            self._report(self.tracker.failed(token, repr(exc)), sent_mono, node)
            return
        result = parse_share_acknowledge(resp)
        names = self._names()
        errors = {
            (names[p.topic_id], p.partition): (p.error_code, p.error_message)
            for p in result.partitions
            if p.error_code and p.topic_id in names
        }
        session.answered(result.error_code)
        if result.error_code:
            errors = {tp: (result.error_code, result.error_message) for tp in acks}
        self._report(self.tracker.answered(token, errors), sent_mono, node)

    def _lost(
        self,
        node: int,
        session: ShareSession,
        key: tuple[int, int],
        token: int,
        why: str,
        *,
        answered: bool = False,
    ) -> None:
        """The session is gone (no answer, or the broker said so): its records too."""
        if not answered and session.in_flight is not None:
            session.failed()
        results = self.tracker.failed(token, why) if token else []
        results += self.tracker.drop_session(key, "its share session ended")
        self._report(results, time.monotonic(), node)

    def _report(self, results: list[AckResult], sent: float, node: int) -> None:
        for result in results:
            self.hooks.acknowledged(result, sent)
        committed = results
        if self._renewing:
            # Renewals the consumer makes by itself are not what a commit() sent: it
            # returns the outcome of the application's acknowledgements (a RENEW
            # answered meanwhile still reaches the callback and the metrics).
            committed = [r for r in results if r.ack_type is not AcknowledgeType.RENEW]
        for flush in self._flushes:
            if node in flush.nodes:
                flush.results.extend(committed)
        if results:
            self.hooks.results(results)


def _read_ahead_needed(needed: int, full: bool) -> int:
    """How many full answers in a row the next read-ahead past the room rule needs,
    after one came back ``full`` (one fewer, down to the start) or short (twice as
    many, up to :data:`_FULL_ANSWERS_MAX`).  Why: a short answer to it says other
    consumers hold the partitions up to the broker's lock limit, where reading ahead
    costs them all round trips for nothing; a consumer alone on its partitions gets
    full answers and keeps reading ahead."""
    if full:
        return max(_FULL_ANSWERS_TO_READ_AHEAD, needed - 1)
    return min(_FULL_ANSWERS_MAX, needed * 2)
