"""The records a share consumer holds, and their acknowledgements (KIP-932, KIP-1222).

Why a module of its own: every rule about *which* acknowledgement may be sent for
*which* record, and what its answer means, is bookkeeping over plain data - offsets,
delivery counts, lock deadlines, the session a record was acquired in.  The fetch loop
and the facade feed it what happened and ask it what to send; the application's bad
acknowledgements are refused here with an error naming the problem, before anything
goes on the wire.

The life of one acquired record: acquired by a ShareFetch (with its
delivery count and the lock's sure end: when that fetch left + the lock duration the
broker answered) -> handed out to the application (or found expired first: the broker
gave it back, so it is never handed out) -> acknowledged (a type pending) -> sent (in
flight, on a ShareFetch or a ShareAcknowledge) -> answered: ACCEPT, RELEASE, REJECT
and GAP end the hold; a RENEW answered without error keeps the record with a new
lock deadline.  An error, or no answer at all, ends the hold too: the broker no longer
counts the record as ours (its lock expired, or the session that held it is gone).

* **Implicit mode** (the default, as Java's ``share.acknowledgement.mode=implicit``):
  every record handed out is ACCEPTed on the next fetch or commit
  (:meth:`AcknowledgementTracker.accept_delivered`); the application acknowledges
  nothing itself, and a RENEW is refused (nothing stays held long enough to renew).
* **Explicit mode**: the application acknowledges each record it was handed.
* Offsets a fetch acquired without a record to hand out (compacted away, transaction
  markers, aborted records) are acknowledged as GAP at once.
* Refused with :class:`InvalidAcknowledgement`: a record not handed out by this
  consumer, one from a session that ended since (fenced, reopened, stopped), a second
  acknowledgement of one delivery (a RENEW is not final: a later ACCEPT is fine),
  RENEW in implicit mode, GAP from the application.

**Ranges, not records.**  A ShareFetch acquires offset ranges (first, last, delivery
count), so the tracker keeps one :class:`AcquiredRun` per range with one state byte
per offset (handed out, pending type, type in flight, gone) in a ``bytearray``.  The
bulk steps - accept everything handed out, release, take what is pending, settle an
answer, renew - are ``bytes.translate`` / ``count`` / slice assignments over a run,
so their cost per record is C's, not a Python object and dict entries per record
(the profile of a 200,000-record drain had ~4 s of 12 in per-record bookkeeping).
Only the application's own per-record calls (``hand_out``, ``acknowledge``) touch
one byte each.  A record's :class:`Acquisition` points at its run, which also keeps
why a dropped offset is gone (for the error message) as long as the application
holds the record.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from aiogroup._protocol.share_types import AckBatch, AcknowledgeType

__all__ = [
    "NO_ANSWER",
    "AckResult",
    "AcknowledgementTracker",
    "AcquiredRun",
    "Acquisition",
    "InvalidAcknowledgement",
]

Partition = tuple[str, int]
T = AcknowledgeType
#: ``AckResult.error_code`` of acknowledgements that got no answer (or were dropped
#: unsent because their session ended).
NO_ANSWER = -1

# One state byte per acquired offset.  A type is stored as its value + 1 (0: none).
_PENDING = 0x07  # the type waiting to be sent
_FLY = 0x38  # the type sent and not answered yet (<< 3)
_DELIVERED = 0x40  # handed to the application (a GAP counts as handed out)
_GONE = 0x80  # no longer held: ``AcquiredRun.why`` says why
#: Handed out, nothing owed: the state implicit mode accepts and auto-renew renews.
_HANDED = _DELIVERED
_HANDED_SPAN = bytes([_HANDED])
_FINAL_KINDS = frozenset({T.GAP, T.ACCEPT, T.RELEASE, T.REJECT})
#: Distinct reasons kept for "no longer held (why)" (each run stores a byte).
_MAX_REASONS = 250


def _p(kind: int) -> int:
    return kind + 1


def _f(kind: int) -> int:
    return (kind + 1) << 3


def _table(change: dict[int, int]) -> bytes:
    return bytes(change.get(c, c) for c in range(256))


def _takeable(code: int, renew: bool) -> int:
    """The type (+1) a take would send for ``code``, else 0."""
    if code & (_GONE | _FLY):
        return 0
    pending = code & _PENDING
    if not pending:
        return 0
    return pending if (pending == _p(T.RENEW)) == renew else 0


_ACCEPT_HANDED = _table({_HANDED: _HANDED | _p(T.ACCEPT)})
_RENEW_HANDED = _table({_HANDED: _HANDED | _p(T.RENEW)})
_RELEASE_HANDED = _table(
    {_HANDED: _HANDED | _p(T.RELEASE), _HANDED | _p(T.RENEW): _HANDED | _p(T.RELEASE)}
)
_RELEASE_UNDELIVERED = _table({0: _p(T.RELEASE)})
_TAKEABLE = {r: bytes(_takeable(c, r) for c in range(256)) for r in (False, True)}
_TAKE = {
    r: _table({c: (c & ~_PENDING) | (k << 3) for c in range(256) if (k := _takeable(c, r))})
    for r in (False, True)
}
_IN_FLIGHT = bytes(1 if c & _FLY and not c & _GONE else 0 for c in range(256))
#: Maximal runs of one type in a ``_TAKEABLE`` mask.
_SEGMENTS = re.compile(rb"\x01+|\x02+|\x03+|\x04+|\x05+")


class InvalidAcknowledgement(ValueError):
    """An acknowledgement the share consumer cannot send; the message says why."""


@dataclass(frozen=True, slots=True)
class Acquisition:
    """What a handed-out record carries to be acknowledged: its identity in the tracker."""

    topic: str
    partition: int
    offset: int
    #: Unique per acquisition in this consumer: a record delivered again is a new one.
    id: int
    #: The acquired range it belongs to (None: made outside the tracker).
    run: AcquiredRun | None = field(default=None, compare=False, repr=False)


class AcquiredRun:
    """The offsets ``first``..``last`` one ShareFetch acquired for one partition with
    one delivery count, in one session, under one lock: a state byte per offset."""

    __slots__ = (
        "base",
        "deadline",
        "deadlines",
        "delivery_count",
        "first",
        "last",
        "live",
        "owner",
        "session",
        "state",
        "tp",
        "why",
    )

    def __init__(
        self,
        owner: AcknowledgementTracker,
        tp: Partition,
        first: int,
        last: int,
        delivery_count: int,
        deadline: float,
        session: Hashable,
        base: int,
    ) -> None:
        n = last - first + 1
        self.owner = owner
        self.tp = tp
        self.first = first
        self.last = last
        self.delivery_count = delivery_count
        #: The lock's sure end on the caller's clock (fetch sent + lock duration).
        self.deadline = deadline
        #: Offsets (index) whose lock a RENEW moved: their own deadline.
        self.deadlines: dict[int, float] | None = None
        self.session = session
        #: The acquisition id of ``first``; ``first + i`` has ``base + i``.
        self.base = base
        self.state = bytearray(n)
        #: Per offset: 0 while held, else the reason's code (the tracker's table).
        self.why = bytearray(n)
        self.live = n

    def acquisition(self, offset: int) -> Acquisition:
        return Acquisition(self.tp[0], self.tp[1], offset, self.base + offset - self.first, self)

    def deadline_at(self, i: int) -> float:
        d = self.deadlines
        return self.deadline if d is None else d.get(i, self.deadline)


@dataclass(frozen=True, slots=True)
class AckResult:
    """How acknowledgements of one partition ended: ``offsets`` acknowledged with
    ``ack_type``, answered ``error_code`` (0: ok; :data:`NO_ANSWER`: none came, or the
    session ended before they were sent)."""

    topic: str
    partition: int
    ack_type: AcknowledgeType
    offsets: tuple[int, ...]
    error_code: int
    error_message: str | None = None
    #: False: never sent - the session (or membership) ended first.
    sent: bool = True

    @property
    def ok(self) -> bool:
        return self.error_code == 0


class _Carrier(Protocol):
    """A record as :meth:`AcknowledgementTracker.hand_out_many` sees it."""

    @property
    def acquisition(self) -> Acquisition: ...


_C = TypeVar("_C", bound=_Carrier)


#: What one request carried for one partition: (run, first index, last index, type).
_Segment = tuple[AcquiredRun, int, int, int]


@dataclass(slots=True)
class _Sent:
    at: float
    lock_ms: int
    parts: dict[Partition, list[_Segment]] = field(default_factory=dict)


class AcknowledgementTracker:
    """Every record this consumer holds, per partition, and what is owed for each."""

    def __init__(self, *, explicit: bool) -> None:
        self.explicit = explicit
        #: Per partition, the runs still holding an offset, by first offset.
        self._runs: dict[Partition, list[AcquiredRun]] = {}
        self._next_id = 1
        self._tokens = 0
        self._sent: dict[int, _Sent] = {}
        self._reasons: list[str] = [""]
        self._reason_codes: dict[str, int] = {}

    # -- what fetches bring -----------------------------------------------------------------

    def acquired_range(
        self,
        tp: Partition,
        first: int,
        last: int,
        delivery_count: int,
        deadline: float,
        session: Hashable,
    ) -> AcquiredRun:
        """A ShareFetch acquired ``first``..``last`` for this consumer.  Every offset
        starts as acquired, not handed out; :meth:`gap` marks those without a record."""
        if last < first:
            raise ValueError(f"an acquired range ends before it starts: {first}..{last}")
        runs = self._runs.setdefault(tp, [])
        for old in [r for r in runs if r.first <= last and first <= r.last]:
            for o in range(max(first, old.first), min(last, old.last) + 1):
                if not old.state[o - old.first] & _GONE:
                    self._gone(old, o - old.first, "delivered again since")
            self._prune(old)
        if not runs:
            self._runs[tp] = runs  # _prune may have removed the emptied list
        run = AcquiredRun(self, tp, first, last, delivery_count, deadline, session, self._next_id)
        self._next_id += last - first + 1
        bisect.insort(runs, run, key=_first)
        return run

    def acquired(
        self,
        tp: Partition,
        offset: int,
        delivery_count: int,
        deadline: float,
        session: Hashable,
    ) -> Acquisition:
        """A ShareFetch acquired ``offset`` (with a record to hand out) for this consumer."""
        return self.acquired_range(
            tp, offset, offset, delivery_count, deadline, session
        ).acquisition(offset)

    def acquired_gap(self, tp: Partition, offset: int, deadline: float, session: Hashable) -> None:
        """A ShareFetch acquired ``offset`` but there is no record to hand out: GAP."""
        self.gap(self.acquired_range(tp, offset, offset, 0, deadline, session), offset)

    def gap(self, run: AcquiredRun, offset: int) -> None:
        """``offset`` of ``run`` has no record to hand out: it is acknowledged as GAP."""
        run.state[offset - run.first] = _DELIVERED | _p(T.GAP)

    def hand_out(self, acq: Acquisition, now: float) -> bool:
        """May this record be handed to the application now?  No when its session ended,
        or its lock surely ended (the broker may have given it to someone else): it is
        forgotten then, and never acknowledged."""
        found = self._locate(acq)
        if found is None:
            return False
        run, i = found
        code = run.state[i]
        if code & _GONE:
            return False
        if not code & _FLY and now >= run.deadline_at(i):
            self._gone(run, i, "its acquisition lock expired")
            self._prune(run)
            return False
        run.state[i] = code | _DELIVERED
        return True

    def hand_out_many(self, records: Iterable[_C], now: float) -> list[_C]:
        """:meth:`hand_out` for each of ``records`` (anything with an ``acquisition``),
        in order; the ones that may be handed out.  The common case - the record's run
        is this tracker's, its lock holds - is one byte test and set, inline."""
        out: list[_C] = []
        append = out.append
        for record in records:
            acq = record.acquisition
            run = acq.run
            if run is None or run.owner is not self or run.deadlines is not None:
                if self.hand_out(acq, now):
                    append(record)
                continue
            i = acq.offset - run.first
            st = run.state
            code = st[i]
            if code & _GONE or run.base + i != acq.id:
                continue
            if now >= run.deadline and not code & _FLY:
                self._gone(run, i, "its acquisition lock expired")
                self._prune(run)
                continue
            st[i] = code | _DELIVERED
            append(record)
        return out

    def hand_out_span(self, run: AcquiredRun, lo: int, hi: int, now: float) -> bool:
        """Hand out offsets ``lo..hi`` (indexes) of ``run`` together, if all of them may
        be (this tracker's run, its one lock holding, each offset acquired and nothing
        else yet); False, changing nothing, otherwise - then :meth:`hand_out` decides
        each."""
        if run.owner is not self or run.deadlines is not None or now >= run.deadline:
            return False
        st = run.state
        n = hi - lo + 1
        if lo < 0 or hi >= len(st) or st.count(0, lo, hi + 1) != n:
            return False
        st[lo : hi + 1] = _HANDED_SPAN * n
        return True

    # -- what the application says ---------------------------------------------------------

    def acknowledge(self, acq: Acquisition, ack_type: AcknowledgeType | int) -> None:
        """Record the application's acknowledgement (sent with the next request)."""
        try:
            kind = AcknowledgeType(ack_type)
        except ValueError:
            raise InvalidAcknowledgement(
                f"{ack_type!r} is not an acknowledge type (ACCEPT, RELEASE, REJECT, RENEW)"
            ) from None
        where = f"{acq.topic}-{acq.partition}@{acq.offset}"
        if kind is T.GAP:
            raise InvalidAcknowledgement(
                f"{where}: GAP is not for applications (it marks offsets without a record)"
            )
        if kind is T.RENEW and not self.explicit:
            raise InvalidAcknowledgement(
                f"{where}: RENEW needs explicit acknowledgement (acknowledgement_mode="
                "'explicit'); in implicit mode every record is accepted at the next fetch"
            )
        found = self._locate(acq)
        if found is None:
            raise InvalidAcknowledgement(f"{where} was not delivered by this consumer")
        run, i = found
        code = run.state[i]
        if code & _GONE:
            why = self._reasons[run.why[i]]
            raise InvalidAcknowledgement(
                f"{where} is no longer held by this consumer ({why}); the broker has "
                "released it and will deliver it again"
            )
        if not code & _DELIVERED:
            raise InvalidAcknowledgement(f"{where} has not been handed to the application yet")
        pending, in_flight = (code & _PENDING) - 1, ((code & _FLY) >> 3) - 1
        owed = pending if pending >= 0 else in_flight
        if owed >= 0 and owed != T.RENEW:
            raise InvalidAcknowledgement(
                f"{where} was already acknowledged ({T(owed).name}); a delivery is "
                "acknowledged once"
            )
        if kind is T.RENEW and owed == T.RENEW:
            return  # a renewal is already on its way
        # A final type while a RENEW is in flight is sent once the RENEW is answered.
        run.state[i] = (code & ~_PENDING) | _p(kind)

    def accept_delivered(self) -> int:
        """Implicit mode: ACCEPT every record handed out and not acknowledged yet."""
        return self._translate(None, _ACCEPT_HANDED, (_HANDED,))

    def release_unacknowledged(self) -> int:
        """Closing: RELEASE every record handed out and not acknowledged, so other
        consumers get them now rather than after the lock.  Records never handed out
        are left to the session's close (epoch -1), which gives them back as well
        (measured on Kafka 4.4: both ways count the delivery - the next one comes
        with delivery count 2 - so the close need not name them)."""
        return self._translate(None, _RELEASE_HANDED, (_HANDED, _HANDED | _p(T.RENEW)))

    def renew_expiring(self, now: float, margin: float) -> int:
        """Auto-renew: a record handed out, still not acknowledged, whose lock ends
        within ``margin``, gets a RENEW (sent with the next request)."""
        n = 0
        for run in self._all_runs():
            if run.deadlines is None:
                if run.deadline - margin <= now < run.deadline:
                    c = run.state.count(_HANDED)
                    if c:
                        run.state = run.state.translate(_RENEW_HANDED)
                        n += c
                continue
            st = run.state
            for i, code in enumerate(st):
                if code == _HANDED:
                    d = run.deadline_at(i)
                    if d - margin <= now < d:
                        st[i] = _HANDED | _p(T.RENEW)
                        n += 1
        return n

    def next_renewal(
        self, margin: float, now: float | None = None, *, buffered: bool = False
    ) -> float | None:
        """When :meth:`renew_expiring` next has something to do (None: nothing held).
        With ``now``, a lock already past its sure end is left out: no RENEW can keep
        it, and counting it would make the due time "now" for ever.  With ``buffered``,
        records acquired and not handed out yet count too: their locks already run, and
        a fetch that leaves now may still be in flight when they are handed out."""
        codes = (_HANDED, 0) if buffered else (_HANDED,)
        best: float | None = None
        for run in self._all_runs():
            st = run.state
            if not any(c in st for c in codes):
                continue
            if run.deadlines is None:
                ends = [run.deadline]
            else:
                ends = [run.deadline_at(i) for i, c in enumerate(st) if c in codes]
            if now is not None:
                ends = [d for d in ends if d > now]
            if ends:
                due = min(ends) - margin
                best = due if best is None else min(best, due)
        return best

    # -- what goes out ---------------------------------------------------------------------

    def pending(self, tps: Iterable[Partition] | None = None, *, renew: bool = False) -> bool:
        """Is an acknowledgement (a RENEW with ``renew``, else any other) waiting?"""
        mask = _TAKEABLE[renew]
        for tp in self._wanted(tps):
            for run in self._runs[tp]:
                st = run.state
                if st.translate(mask).count(0) != len(st):
                    return True
        return False

    def take(
        self,
        tps: Iterable[Partition] | None,
        *,
        now: float,
        lock_ms: int,
        renew: bool = False,
    ) -> tuple[int, dict[Partition, list[AckBatch]]]:
        """The pending acknowledgements of ``tps`` (None: all) as batches, marked in
        flight under the returned token.  RENEW goes apart from the final types
        (``renew=True``): a renewing request must not acquire more records (KIP-1222).
        ``lock_ms`` is the lock duration a renewal's answer extends the lock by."""
        self._tokens += 1
        token = self._tokens
        sent = _Sent(now, lock_ms)
        mask, move = _TAKEABLE[renew], _TAKE[renew]
        out: dict[Partition, list[AckBatch]] = {}
        for tp in self._wanted(tps):
            segments: list[_Segment] = []
            for run in self._runs[tp]:
                st = run.state
                kinds = st.translate(mask)
                if kinds.count(0) == len(kinds):
                    continue
                for m in _SEGMENTS.finditer(kinds):
                    segments.append((run, m.start(), m.end() - 1, kinds[m.start()] - 1))
                run.state = st.translate(move)
            if segments:
                segments.sort(key=_segment_start)
                sent.parts[tp] = segments
                out[tp] = _segment_batches(segments)
        if sent.parts:
            self._sent[token] = sent
        return token, out

    def _wanted(self, tps: Iterable[Partition] | None) -> list[Partition]:
        if tps is None:
            return list(self._runs)
        return [tp for tp in dict.fromkeys(tps) if tp in self._runs]

    # -- what came back --------------------------------------------------------------------

    def answered(
        self,
        token: int,
        errors: dict[Partition, tuple[int, str | None]],
        *,
        lock_ms: int | None = None,
    ) -> list[AckResult]:
        """The request sent under ``token`` was answered; ``errors``: a partition's
        acknowledge error (absent: ok).  ``lock_ms``: the lock the answer reports, else
        the one known at send time."""
        sent = self._sent.pop(token, None)
        if sent is None:
            return []
        lock = sent.lock_ms if lock_ms is None or lock_ms <= 0 else lock_ms
        out: list[AckResult] = []
        for tp, segments in sent.parts.items():
            code, message = errors.get(tp, (0, None))
            out.extend(self._settle(tp, segments, code, message, sent.at + lock / 1000))
        return out

    def failed(self, token: int, why: str) -> list[AckResult]:
        """The request sent under ``token`` got no answer: its records are no longer ours."""
        sent = self._sent.pop(token, None)
        if sent is None:
            return []
        out: list[AckResult] = []
        for tp, segments in sent.parts.items():
            out.extend(self._settle(tp, segments, NO_ANSWER, why, 0.0))
        return out

    def _settle(
        self,
        tp: Partition,
        segments: list[_Segment],
        code: int,
        message: str | None,
        renewed_until: float,
    ) -> list[AckResult]:
        by_type: dict[int, list[int]] = {}
        touched: list[AcquiredRun] = []
        for run, lo, hi, kind in segments:
            if run.owner is not self or run.live == 0:
                continue  # dropped meanwhile (a session ended): reported then
            touched.append(run)
            keep = kind == T.RENEW and code == 0
            why = (
                "acknowledged"
                if code == 0 and kind != T.RENEW
                else f"its acknowledgement failed (error {code})"
            )
            st, fly, n = run.state, _f(kind), hi - lo + 1
            if not keep and st.count(_DELIVERED | fly, lo, hi + 1) == n:
                # The common case: the whole segment still in flight, nothing behind it.
                if kind != T.GAP:
                    by_type.setdefault(kind, []).extend(range(run.first + lo, run.first + hi + 1))
                st[lo : hi + 1] = bytes([_GONE]) * n
                run.why[lo : hi + 1] = bytes([self._reason(why)]) * n
                run.live -= n
                continue
            for i in range(lo, hi + 1):
                c = st[i]
                if c & _GONE or c & _FLY != fly:
                    continue  # dropped meanwhile: reported then
                st[i] = c & ~_FLY
                if kind != T.GAP:
                    by_type.setdefault(kind, []).append(run.first + i)
                if keep:
                    if run.deadlines is None:
                        run.deadlines = {}
                    run.deadlines[i] = renewed_until
                    continue
                self._gone(run, i, why)
        for run in touched:
            self._prune(run)
        return [
            AckResult(tp[0], tp[1], T(kind), tuple(offsets), code, message)
            for kind, offsets in sorted(by_type.items())
        ]

    # -- sessions and membership -----------------------------------------------------------

    def drop_session(self, session: Hashable, why: str) -> list[AckResult]:
        """The session ``session`` ended (reopened, lost): its records are the broker's
        again.  Acknowledgements still pending are reported as never answered."""
        return self._drop(None, lambda run: run.session == session, why)

    def drop_all(self, why: str) -> list[AckResult]:
        """The membership ended (fenced, failed, left): nothing is held any more."""
        self._sent.clear()
        return self._drop(None, lambda run: True, why)

    def release_undelivered(self, tps: Iterable[Partition]) -> int:
        """RELEASE the records of ``tps`` never handed out (they left the assignment)."""
        return self._translate(tps, _RELEASE_UNDELIVERED, (0,))

    def drop_delivered(self, tps: Iterable[Partition], why: str) -> list[AckResult]:
        """Forget the records of ``tps`` handed out to the application (and not owed)."""
        for tp in self._wanted(tps):
            for run in list(self._runs.get(tp, ())):
                st = run.state
                for i in range(len(st)):
                    if st[i] == _HANDED:
                        self._gone(run, i, why)
                self._prune(run)
        return []  # nothing was owed for them

    def drop_partitions(self, tps: Iterable[Partition], why: str) -> list[AckResult]:
        return self._drop(set(tps), lambda run: True, why)

    def _drop(self, tps: set[Partition] | None, which: object, why: str) -> list[AckResult]:
        results: list[AckResult] = []
        for tp in list(self._runs):
            if tps is not None and tp not in tps:
                continue
            owed: dict[tuple[int, bool], list[int]] = {}
            for run in list(self._runs.get(tp, ())):
                if not which(run):  # type: ignore[operator]
                    continue
                st = run.state
                for i, c in enumerate(st):
                    if c & _GONE:
                        continue
                    sent = bool(c & _FLY)
                    kind = ((c & _FLY) >> 3) - 1 if sent else (c & _PENDING) - 1
                    if kind >= 0 and kind != T.GAP:
                        owed.setdefault((kind, sent), []).append(run.first + i)
                    self._gone(run, i, why)
                self._prune(run)
            results.extend(
                AckResult(tp[0], tp[1], T(kind), tuple(sorted(o)), NO_ANSWER, why, sent=sent)
                for (kind, sent), o in sorted(owed.items())
            )
        return results

    # -- the runs --------------------------------------------------------------------------

    def _translate(
        self, tps: Iterable[Partition] | None, table: bytes, codes: tuple[int, ...]
    ) -> int:
        """Apply ``table`` to the runs of ``tps`` (None: all); how many offsets had one of
        ``codes`` (the states the table changes)."""
        n = 0
        for tp in self._wanted(tps):
            for run in self._runs[tp]:
                st = run.state
                c = sum(st.count(code) for code in codes)
                if c:
                    run.state = st.translate(table)
                    n += c
        return n

    def _all_runs(self) -> list[AcquiredRun]:
        return [run for runs in self._runs.values() for run in runs]

    def _reason(self, why: str) -> int:
        code = self._reason_codes.get(why)
        if code is None:
            if len(self._reasons) > _MAX_REASONS:
                why = "dropped"
                code = self._reason_codes.get(why)
            if code is None:
                code = len(self._reasons)
                self._reasons.append(why)
                self._reason_codes[why] = code
        return code

    def _gone(self, run: AcquiredRun, i: int, why: str) -> None:
        """Offset ``i`` of ``run`` is no longer held (call :meth:`_prune` after)."""
        run.state[i] = _GONE
        run.why[i] = self._reason(why)
        run.live -= 1

    def _prune(self, run: AcquiredRun) -> None:
        """Forget ``run`` once it holds nothing (its records still name why)."""
        if run.live:
            return
        runs = self._runs.get(run.tp)
        if runs is None:
            return
        try:
            runs.remove(run)
        except ValueError:
            return
        if not runs:
            del self._runs[run.tp]

    def _locate(self, acq: Acquisition) -> tuple[AcquiredRun, int] | None:
        """``acq``'s run and index, if this tracker made it (held or gone)."""
        run = acq.run
        tp = (acq.topic, acq.partition)
        if run is None or run.owner is not self:
            run = next(
                (
                    r
                    for r in self._runs.get(tp, ())
                    if r.first <= acq.offset <= r.last and r.base + acq.offset - r.first == acq.id
                ),
                None,
            )
            if run is None:
                return None
        i = acq.offset - run.first
        if run.tp != tp or not 0 <= i < len(run.state) or run.base + i != acq.id:
            return None
        return run, i

    def _current(self, acq: Acquisition) -> tuple[AcquiredRun, int] | None:
        found = self._locate(acq)
        if found is None or found[0].state[found[1]] & _GONE:
            return None
        return found

    # -- views -----------------------------------------------------------------------------

    def held(self, tp: Partition | None = None) -> int:
        """How many records are held (of ``tp``, or in all)."""
        if tp is not None:
            return sum(run.live for run in self._runs.get(tp, ()))
        return sum(run.live for run in self._all_runs())

    def session_partitions(self, session: Hashable) -> list[Partition]:
        """The partitions holding records acquired in ``session``."""
        return [
            tp
            for tp, runs in self._runs.items()
            if any(run.session == session and run.live for run in runs)
        ]

    def unacknowledged(self, tps: Iterable[Partition] | None = None) -> bool:
        """Does a record handed out wait for its acknowledgement (no type given yet)?

        Why: a request that leaves now would carry only part of that record's acquired
        run's acknowledgements, the rest following on a later one - measured (issue 28)
        to cost the broker about twice the CPU.  The fetcher reads ahead at an answer
        only when this is False."""
        for tp in self._wanted(tps):
            for run in self._runs[tp]:
                if _HANDED in run.state:
                    return True
        return False

    def in_flight(self) -> int:
        return sum(
            len(run.state) - run.state.translate(_IN_FLIGHT).count(0) for run in self._all_runs()
        )

    def delivery_count(self, acq: Acquisition) -> int | None:
        found = self._current(acq)
        return None if found is None else found[0].delivery_count

    def deadline(self, acq: Acquisition) -> float | None:
        found = self._current(acq)
        return None if found is None else found[0].deadline_at(found[1])


def _first(run: AcquiredRun) -> int:
    return run.first


def _segment_start(segment: _Segment) -> int:
    return segment[0].first + segment[1]


def _segment_batches(segments: list[_Segment]) -> list[AckBatch]:
    """Segments sorted by offset as wire batches: touching segments are one batch, with
    one type when they share it, else one type per offset."""
    out: list[AckBatch] = []
    group: list[tuple[int, int, int]] = []
    for run, lo, hi, kind in segments:
        first, last = run.first + lo, run.first + hi
        if group and first != group[-1][1] + 1:
            out.append(_group_batch(group))
            group = []
        group.append((first, last, kind))
    if group:
        out.append(_group_batch(group))
    return out


def _group_batch(group: list[tuple[int, int, int]]) -> AckBatch:
    kinds = {k for _, _, k in group}
    if len(kinds) == 1:
        return AckBatch(group[0][0], group[-1][1], (group[0][2],))
    return AckBatch(
        group[0][0],
        group[-1][1],
        tuple(k for first, last, k in group for _ in range(last - first + 1)),
    )


def _batches(rows: list[tuple[int, int]]) -> list[AckBatch]:
    """Sorted (offset, type) rows as wire batches: a run of consecutive offsets is one
    batch, with one type when the whole run shares it, else one type per offset."""
    return [_group_batch([(o, o, k) for o, k in run]) for run in _consecutive(rows)]


def _consecutive(rows: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    runs: list[list[tuple[int, int]]] = []
    for row in rows:
        if runs and row[0] == runs[-1][-1][0] + 1:
            runs[-1].append(row)
        else:
            runs.append([row])
    return runs
