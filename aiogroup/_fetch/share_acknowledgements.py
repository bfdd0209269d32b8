"""The records a share consumer holds, and their acknowledgements (KIP-932, KIP-1222).

Why a module of its own: every rule about *which* acknowledgement may be sent for
*which* record, and what its answer means, is bookkeeping over plain data - offsets,
delivery counts, lock deadlines, the session a record was acquired in.  The fetch loop
and the facade feed it what happened and ask it what to send; the application's bad
acknowledgements are refused here with an error naming the problem, before anything
goes on the wire.

The life of one acquired record (``_Held``): acquired by a ShareFetch (with its
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
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass, field

from aiogroup._protocol.share_types import AckBatch, AcknowledgeType

__all__ = [
    "NO_ANSWER",
    "AckResult",
    "AcknowledgementTracker",
    "Acquisition",
    "InvalidAcknowledgement",
]

Partition = tuple[str, int]
T = AcknowledgeType
#: ``AckResult.error_code`` of acknowledgements that got no answer (or were dropped
#: unsent because their session ended).
NO_ANSWER = -1
#: How many dropped acquisitions are remembered, to say "from an earlier session".
_FORGOTTEN_KEPT = 100_000


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


@dataclass(slots=True)
class _Held:
    acquisition: int
    delivery_count: int
    #: The lock's sure end on the caller's clock (fetch sent + lock duration).
    deadline: float
    session: Hashable
    delivered: bool = False
    #: An acknowledgement type waiting to be sent.
    pending: int | None = None
    #: The type sent and not answered yet, with the send's token.
    in_flight: int | None = None
    token: int | None = None
    #: A RENEW was answered without error at least once (the application's choice
    #: stands: a renewed record is still the application's to acknowledge).
    renewed: int = 0


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


@dataclass(slots=True)
class _Sent:
    at: float
    lock_ms: int
    batches: dict[Partition, list[tuple[int, int]]] = field(default_factory=dict)


class AcknowledgementTracker:
    """Every record this consumer holds, per partition, and what is owed for each."""

    def __init__(self, *, explicit: bool) -> None:
        self.explicit = explicit
        self._held: dict[Partition, dict[int, _Held]] = {}
        self._ids = itertools.count(1)
        self._tokens = itertools.count(1)
        self._sent: dict[int, _Sent] = {}
        #: acquisition id -> why it was dropped (bounded memory).
        self._forgotten: dict[int, str] = {}
        self._forgotten_order: deque[int] = deque()

    # -- what fetches bring -----------------------------------------------------------------

    def acquired(
        self,
        tp: Partition,
        offset: int,
        delivery_count: int,
        deadline: float,
        session: Hashable,
    ) -> Acquisition:
        """A ShareFetch acquired ``offset`` (with a record to hand out) for this consumer."""
        held = self._held.setdefault(tp, {})
        old = held.get(offset)
        if old is not None:
            self._forget(old.acquisition, "delivered again since")
        h = _Held(next(self._ids), delivery_count, deadline, session)
        held[offset] = h
        return Acquisition(tp[0], tp[1], offset, h.acquisition)

    def acquired_gap(self, tp: Partition, offset: int, deadline: float, session: Hashable) -> None:
        """A ShareFetch acquired ``offset`` but there is no record to hand out: GAP."""
        h = _Held(next(self._ids), 0, deadline, session, delivered=True, pending=T.GAP)
        self._held.setdefault(tp, {})[offset] = h

    def hand_out(self, acq: Acquisition, now: float) -> bool:
        """May this record be handed to the application now?  No when its session ended,
        or its lock surely ended (the broker may have given it to someone else): it is
        forgotten then, and never acknowledged."""
        h = self._current(acq)
        if h is None:
            return False
        if now >= h.deadline and h.in_flight is None:
            self._drop_one((acq.topic, acq.partition), acq.offset, "its acquisition lock expired")
            return False
        h.delivered = True
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
        h = self._current(acq)
        if h is None:
            why = self._forgotten.get(acq.id)
            if why is not None:
                raise InvalidAcknowledgement(
                    f"{where} is no longer held by this consumer ({why}); the broker has "
                    "released it and will deliver it again"
                )
            raise InvalidAcknowledgement(f"{where} was not delivered by this consumer")
        if not h.delivered:
            raise InvalidAcknowledgement(f"{where} has not been handed to the application yet")
        owed = h.pending if h.pending is not None else h.in_flight
        if owed is not None and owed != T.RENEW:
            raise InvalidAcknowledgement(
                f"{where} was already acknowledged ({T(owed).name}); a delivery is "
                "acknowledged once"
            )
        if kind is T.RENEW and owed == T.RENEW:
            return  # a renewal is already on its way
        if h.in_flight == T.RENEW:
            # A final type while a RENEW is answered: send it once the RENEW is back.
            h.pending = kind
            return
        h.pending = kind

    def accept_delivered(self) -> int:
        """Implicit mode: ACCEPT every record handed out and not acknowledged yet."""
        n = 0
        for held in self._held.values():
            for h in held.values():
                if h.delivered and h.pending is None and h.in_flight is None:
                    h.pending = T.ACCEPT
                    n += 1
        return n

    def release_unacknowledged(self) -> int:
        """Closing: RELEASE every record handed out and not acknowledged, so other
        consumers get them now rather than after the lock.  Records never handed out
        are left to the session's close (epoch -1), which gives them back as well
        (measured on Kafka 4.4: both ways count the delivery - the next one comes
        with delivery count 2 - so the close need not name them)."""
        n = 0
        for held in self._held.values():
            for h in held.values():
                if not h.delivered:
                    continue
                if (h.pending is None or h.pending == T.RENEW) and h.in_flight is None:
                    h.pending = T.RELEASE
                    n += 1
        return n

    def renew_expiring(self, now: float, margin: float) -> int:
        """Auto-renew: a record handed out, still not acknowledged, whose lock ends
        within ``margin``, gets a RENEW (sent with the next request)."""
        n = 0
        for held in self._held.values():
            for h in held.values():
                if (
                    h.delivered
                    and h.pending is None
                    and h.in_flight is None
                    and h.deadline - margin <= now < h.deadline
                ):
                    h.pending = T.RENEW
                    n += 1
        return n

    def next_renewal(self, margin: float) -> float | None:
        """When :meth:`renew_expiring` next has something to do (None: nothing held)."""
        times = [
            h.deadline - margin
            for held in self._held.values()
            for h in held.values()
            if h.delivered and h.pending is None and h.in_flight is None
        ]
        return min(times) if times else None

    # -- what goes out ---------------------------------------------------------------------

    def pending(self, tps: Iterable[Partition] | None = None, *, renew: bool = False) -> bool:
        """Is an acknowledgement (a RENEW with ``renew``, else any other) waiting?"""
        return any(True for _ in self._pending(tps, renew))

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
        token = next(self._tokens)
        sent = _Sent(now, lock_ms)
        rows: dict[Partition, list[tuple[int, int]]] = {}
        for tp, offset, h in self._pending(tps, renew):
            assert h.pending is not None
            rows.setdefault(tp, []).append((offset, h.pending))
            h.in_flight, h.pending, h.token = h.pending, None, token
        for tp in rows:
            rows[tp].sort()
        sent.batches = rows
        if rows:
            self._sent[token] = sent
        return token, {tp: _batches(r) for tp, r in rows.items()}

    def _pending(
        self, tps: Iterable[Partition] | None, renew: bool
    ) -> Iterator[tuple[Partition, int, _Held]]:
        wanted = self._held.keys() if tps is None else [tp for tp in tps if tp in self._held]
        for tp in list(wanted):
            for offset, h in self._held[tp].items():
                if h.pending is None or h.in_flight is not None:
                    continue
                if (h.pending == T.RENEW) == renew:
                    yield tp, offset, h

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
        for tp, rows in sent.batches.items():
            code, message = errors.get(tp, (0, None))
            out.extend(self._settle(tp, rows, token, code, message, sent.at + lock / 1000))
        return out

    def failed(self, token: int, why: str) -> list[AckResult]:
        """The request sent under ``token`` got no answer: its records are no longer ours."""
        sent = self._sent.pop(token, None)
        if sent is None:
            return []
        out: list[AckResult] = []
        for tp, rows in sent.batches.items():
            out.extend(self._settle(tp, rows, token, NO_ANSWER, why, 0.0))
        return out

    def _settle(
        self,
        tp: Partition,
        rows: list[tuple[int, int]],
        token: int,
        code: int,
        message: str | None,
        renewed_until: float,
    ) -> list[AckResult]:
        by_type: dict[int, list[int]] = {}
        held = self._held.get(tp, {})
        for offset, kind in rows:
            h = held.get(offset)
            if h is None or h.token != token:
                continue  # dropped meanwhile (a session ended): reported then
            h.in_flight, h.token = None, None
            if kind != T.GAP:
                by_type.setdefault(kind, []).append(offset)
            if kind == T.RENEW and code == 0:
                h.deadline = renewed_until
                h.renewed += 1
                continue
            why = (
                "acknowledged"
                if code == 0 and kind != T.RENEW
                else f"its acknowledgement failed (error {code})"
            )
            self._drop_one(tp, offset, why)
        return [
            AckResult(tp[0], tp[1], T(kind), tuple(offsets), code, message)
            for kind, offsets in sorted(by_type.items())
        ]

    # -- sessions and membership -----------------------------------------------------------

    def drop_session(self, session: Hashable, why: str) -> list[AckResult]:
        """The session ``session`` ended (reopened, lost): its records are the broker's
        again.  Acknowledgements still pending are reported as never answered."""
        return self._drop(lambda h: h.session == session, why)

    def drop_all(self, why: str) -> list[AckResult]:
        """The membership ended (fenced, failed, left): nothing is held any more."""
        self._sent.clear()
        return self._drop(lambda h: True, why)

    def release_undelivered(self, tps: Iterable[Partition]) -> int:
        """RELEASE the records of ``tps`` never handed out (they left the assignment)."""
        n = 0
        for tp in set(tps) & set(self._held):
            for h in self._held[tp].values():
                if not h.delivered and h.pending is None and h.in_flight is None:
                    h.pending = T.RELEASE
                    n += 1
        return n

    def drop_delivered(self, tps: Iterable[Partition], why: str) -> list[AckResult]:
        """Forget the records of ``tps`` handed out to the application (and not owed)."""
        results: list[AckResult] = []
        for tp in set(tps) & set(self._held):
            offsets = [
                o
                for o, h in self._held[tp].items()
                if h.delivered and h.pending is None and h.in_flight is None
            ]
            results.extend(self._drop_rows(tp, offsets, why))
        return results

    def drop_partitions(self, tps: Iterable[Partition], why: str) -> list[AckResult]:
        gone = set(tps)
        results: list[AckResult] = []
        for tp in gone & set(self._held):
            results.extend(self._drop_rows(tp, list(self._held[tp]), why))
        return results

    def _drop(self, which: object, why: str) -> list[AckResult]:
        results: list[AckResult] = []
        for tp in list(self._held):
            offsets = [o for o, h in self._held[tp].items() if which(h)]  # type: ignore[operator]
            results.extend(self._drop_rows(tp, offsets, why))
        return results

    def _drop_rows(self, tp: Partition, offsets: list[int], why: str) -> list[AckResult]:
        owed: dict[tuple[int, bool], list[int]] = {}
        for offset in sorted(offsets):
            h = self._held[tp][offset]
            sent = h.in_flight is not None
            kind = h.in_flight if sent else h.pending
            if kind is not None and kind != T.GAP:
                owed.setdefault((kind, sent), []).append(offset)
            self._drop_one(tp, offset, why)
        return [
            AckResult(tp[0], tp[1], T(kind), tuple(o), NO_ANSWER, why, sent=sent)
            for (kind, sent), o in sorted(owed.items())
        ]

    def _drop_one(self, tp: Partition, offset: int, why: str) -> None:
        held = self._held.get(tp)
        if held is None:
            return
        h = held.pop(offset, None)
        if h is not None:
            self._forget(h.acquisition, why)
        if not held:
            del self._held[tp]

    def _forget(self, acquisition: int, why: str) -> None:
        self._forgotten[acquisition] = why
        self._forgotten_order.append(acquisition)
        while len(self._forgotten_order) > _FORGOTTEN_KEPT:
            self._forgotten.pop(self._forgotten_order.popleft(), None)

    def _current(self, acq: Acquisition) -> _Held | None:
        h = self._held.get((acq.topic, acq.partition), {}).get(acq.offset)
        return h if h is not None and h.acquisition == acq.id else None

    # -- views -----------------------------------------------------------------------------

    def held(self, tp: Partition | None = None) -> int:
        """How many records are held (of ``tp``, or in all)."""
        if tp is not None:
            return len(self._held.get(tp, {}))
        return sum(len(h) for h in self._held.values())

    def session_partitions(self, session: Hashable) -> list[Partition]:
        """The partitions holding records acquired in ``session``."""
        return [
            tp
            for tp, held in self._held.items()
            if any(h.session == session for h in held.values())
        ]

    def in_flight(self) -> int:
        return sum(1 for held in self._held.values() for h in held.values() if h.in_flight)

    def delivery_count(self, acq: Acquisition) -> int | None:
        h = self._current(acq)
        return None if h is None else h.delivery_count

    def deadline(self, acq: Acquisition) -> float | None:
        h = self._current(acq)
        return None if h is None else h.deadline


def _batches(rows: list[tuple[int, int]]) -> list[AckBatch]:
    """Sorted (offset, type) rows as wire batches: a run of consecutive offsets is one
    batch, with one type when the whole run shares it, else one type per offset."""
    out: list[AckBatch] = []
    run: list[tuple[int, int]] = []
    for row in rows:
        if run and row[0] != run[-1][0] + 1:
            out.append(_batch(run))
            run = []
        run.append(row)
    if run:
        out.append(_batch(run))
    return out


def _batch(run: list[tuple[int, int]]) -> AckBatch:
    types = {t for _, t in run}
    kinds = (next(iter(types)),) if len(types) == 1 else tuple(t for _, t in run)
    return AckBatch(run[0][0], run[-1][0], kinds)
