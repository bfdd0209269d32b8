"""A share-group history checker: judge KIP-932 share consumers from outside.

A share group has no partition ownership to judge: consumers read the same
partitions, and each *record* is acquired by one consumer under a time-limited
lock, then acknowledged (ACCEPT, RELEASE, REJECT; RENEW extends the lock).  What
can go wrong is per record - two consumers holding it at once, a record accepted
twice or never settled, a redelivery that does not count up - so the history is
per record too, and the checker (:func:`check_share_history`, pure) replays it.

**The history** (:class:`ShareEvent`, one JSON object per line as in
:mod:`aiogroup.testing.history`; :class:`ShareRecorder` writes it).  Times are
``time.monotonic()`` - CLOCK_MONOTONIC is one clock for every process on the
machine; a peer that stamps wall-clock times (Java's verifiable share consumer)
is shifted onto it by its harness.  Every event names a ``consumer`` (any string
unique in the group; the member id does not survive a restart, a name does).

* ``produced`` (consumer :data:`PRODUCER`; ``topic, partition, offset`` to
  ``last``): records the producer had acknowledged.
* ``acquired`` (``topic, partition, offset``; ``delivery_count``; ``t`` when the
  ShareFetch answer was read, ``sent`` when that ShareFetch left; ``lock_ms``, the
  group's ``share.record.lock.duration.ms``): the broker gave the consumer the
  record.  The broker took the lock at some instant in ``[sent, t]``, so its lock
  ends no earlier than ``sent + lock_ms`` (the *sure* end) and no later than
  ``t + lock_ms`` (the *latest* end).  ``delivery_count`` may be None where a
  peer does not show it (Java's verifiable consumer).
* ``acknowledged`` (``topic, partition, offset``; ``ack``: "accept", "release",
  "reject" or "renew"; ``t`` when it was sent, ``answered`` when its result was
  read; ``result``: "ok", an error name such as "INVALID_RECORD_STATE", or
  "unknown" when no answer came).  A RENEW that is ok moves the lock's sure end to
  ``t + lock_ms`` and its latest end to ``answered + lock_ms``.
* ``crashed`` / ``frozen`` / ``woke`` (no record): the test killed (kill -9),
  stopped (SIGSTOP) or continued the consumer's process.
* ``closed`` (no record): the consumer began a clean close (its final share
  session request left); the broker gives back what it still held without
  counting those deliveries (KAFKA-17541).
* ``gone`` (an observer of ShareGroupDescribe; ``since``: the last sample that
  still showed the member): the broker dropped the consumer from the group,
  which releases the records it held.
* ``broker_start`` (consumer :data:`OBSERVER`; ``topic, partition``,
  ``offset`` = the share-partition start offset and ``lag`` = its lag, from
  DescribeShareGroupOffsets v1 read after the run): every record below the start
  offset is settled as far as the broker is concerned (acknowledged, or archived
  at the delivery limit), and ``lag`` records at or past it are not.  Kafka 4.4
  moves the reported start offset lazily (it stayed 0 after every record was
  accepted, with lag 0), so the lag is what says "all settled".

**The rules** (each broken one is a :class:`ShareViolation` under its rule name):

* ``overlap`` - no record held by two consumers inside overlapping lock windows.
  A hold runs from ``acquired`` until the first of: an ACCEPT/RELEASE/REJECT sent
  by its holder (whatever its result - the benefit of the doubt goes to the
  system), the holder's clean close, its crash (a killed process's connections
  drop, and Kafka 4.1+ then ends its share session and gives its records back,
  KAFKA-19015 - measured: well before the lock would have run out), its fence
  (``gone``'s ``since``), the lock's sure end (renewals extend it).  A frozen
  (SIGSTOPped) consumer keeps its connections: its locks run their course.
  Another acquisition of the record read before that end is an overlap: the
  broker handed it out while the first lock surely held.
* ``accepted_twice`` / ``settled_twice`` - every produced record is accepted
  exactly once, or rejected, or archived at the delivery-count limit: never two
  counted acceptances, never accepted and rejected.
* ``unsettled`` - every produced record is settled one of those ways.  Archived
  means: its last delivery had ``delivery_count >= delivery_limit`` and was not
  accepted or rejected (released, or its lock expired).
* ``count_not_increased`` - a record delivered again after a RELEASE, a lock
  expiry, or its holder's crash or fence comes with a higher delivery count than
  before (after a clean close, one no lower).
  ``past_limit``: no delivery counts above ``delivery_limit``.
* ``not_redelivered`` - a killed (or fenced) consumer's held records are
  delivered again (to someone) - after its crash, its fence, or its lock timeout
  - unless they were already at the limit (archived).
* ``late_ack_counted`` - an acknowledgement sent after the lock's latest end
  (a frozen consumer waking, a handler outliving its lock) is not counted as an
  acceptance; if the broker answered it "ok" all the same (beyond
  ``lock_slack``), that is reported: the broker accepted a record it had given
  back.
* ``ack_unheld`` - a consumer acknowledges only records it acquired and has not
  acknowledged already (a second ACCEPT of one delivery is the client's bug).
* ``broker_disagrees`` - with ``broker_start`` events: no record the history leaves
  unsettled lies below the start offset the broker reports after the run, and the
  broker's lag is the number of produced records at or past it the history leaves
  unsettled (the producer must have written every record of the partition).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from aiogroup.testing.event_log import EventLog

__all__ = [
    "OBSERVER",
    "PRODUCER",
    "AckType",
    "ShareEvent",
    "ShareEventKind",
    "ShareHistoryError",
    "ShareOverlap",
    "ShareRecorder",
    "ShareReport",
    "ShareViolation",
    "check_share_history",
    "load_share_history",
]

ShareEventKind = Literal[
    "produced",
    "acquired",
    "acknowledged",
    "crashed",
    "frozen",
    "woke",
    "closed",
    "gone",
    "broker_start",
]
AckType = Literal["accept", "release", "reject", "renew"]
KINDS: frozenset[str] = frozenset(get_args(ShareEventKind))
ACK_TYPES: frozenset[str] = frozenset(get_args(AckType))
#: Kinds that name one record (``topic, partition, offset``).
_RECORD_KINDS = frozenset({"produced", "acquired", "acknowledged", "broker_start"})

#: The consumer name of "produced" events.
PRODUCER = "<producer>"
#: The consumer name of "broker_start" events (the broker's view, read from outside).
OBSERVER = "<observer>"

Record = tuple[str, int, int]


class ShareHistoryError(ValueError):
    """A share-history event (or line of a history file) that is not well formed."""


@dataclass(frozen=True, slots=True)
class ShareEvent:
    """One thing that happened to one record (or one consumer) at instant ``t``."""

    t: float
    consumer: str
    kind: ShareEventKind
    topic: str = ""
    partition: int = -1
    offset: int = -1
    #: "produced": the last offset of the run (inclusive); None: just ``offset``.
    last: int | None = None
    #: "acquired": the broker's delivery count (1 on the first delivery); None: not shown.
    delivery_count: int | None = None
    #: "acquired": when the ShareFetch left (None: ``t``).
    sent: float | None = None
    #: "acquired" / "acknowledged" (renew): the lock duration in ms.
    lock_ms: int | None = None
    #: "acknowledged": the type.
    ack: AckType | None = None
    #: "acknowledged": when its result was read (None: ``t``).
    answered: float | None = None
    #: "acknowledged": "ok", an error name, or "unknown".
    result: str = "ok"
    #: "gone": the last observation that still showed the consumer.
    since: float | None = None
    #: "broker_start": the broker's lag for the partition (None: not reported).
    lag: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ShareHistoryError(
                f"unknown share event kind {self.kind!r}; expected one of {sorted(KINDS)}"
            )
        if not self.consumer:
            raise ShareHistoryError(f"{self.kind} event without a consumer name")
        if self.kind in _RECORD_KINDS and (not self.topic or self.partition < 0 or self.offset < 0):
            raise ShareHistoryError(
                f"{self.kind} event needs topic, partition and offset, got "
                f"{self.topic!r}[{self.partition}]@{self.offset}"
            )
        if self.last is not None and self.last < self.offset:
            raise ShareHistoryError(f"produced run from {self.offset} to {self.last} is empty")
        if self.kind == "acquired":
            if self.lock_ms is None or self.lock_ms <= 0:
                raise ShareHistoryError("acquired event needs lock_ms > 0")
            if self.delivery_count is not None and self.delivery_count < 1:
                raise ShareHistoryError(f"delivery_count {self.delivery_count} is below 1")
        if self.kind == "acknowledged" and self.ack not in ACK_TYPES:
            raise ShareHistoryError(
                f"acknowledged event with ack {self.ack!r}; expected one of {sorted(ACK_TYPES)}"
            )

    @property
    def record(self) -> Record:
        return (self.topic, self.partition, self.offset)

    def to_json(self) -> str:
        doc: dict[str, Any] = {"t": self.t, "c": self.consumer, "k": self.kind}
        for name in ("topic", "partition", "offset", "last", "delivery_count", "sent"):
            value = getattr(self, name)
            if value not in (None, "", -1):
                doc[name] = value
        for name in ("lock_ms", "ack", "answered", "since", "lag"):
            if getattr(self, name) is not None:
                doc[name] = getattr(self, name)
        if self.kind == "acknowledged":
            doc["result"] = self.result
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> ShareEvent:
        try:
            doc = json.loads(line)
            return cls(
                t=float(doc["t"]),
                consumer=str(doc["c"]),
                kind=doc["k"],
                topic=str(doc.get("topic", "")),
                partition=int(doc.get("partition", -1)),
                offset=int(doc.get("offset", -1)),
                last=_opt_int(doc.get("last")),
                delivery_count=_opt_int(doc.get("delivery_count")),
                sent=_opt_float(doc.get("sent")),
                lock_ms=_opt_int(doc.get("lock_ms")),
                ack=doc.get("ack"),
                answered=_opt_float(doc.get("answered")),
                result=str(doc.get("result", "ok")),
                since=_opt_float(doc.get("since")),
                lag=_opt_int(doc.get("lag")),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ShareHistoryError(f"not a share history event: {line[:200]!r} ({exc})") from None


def _opt_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _opt_float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


class ShareRecorder(EventLog[ShareEvent]):
    """Collects share events in memory and, given a ``path``, appends them to a file.

    Thread-safe, and safe for several processes appending to one file
    (:class:`aiogroup.testing.event_log.EventLog`).
    """

    def add(self, consumer: str, kind: ShareEventKind, **fields: Any) -> ShareEvent:
        """Record ``kind`` for ``consumer`` now (or at ``t=`` if given)."""
        t = fields.pop("t", None)
        return self.record(ShareEvent(self.now() if t is None else t, consumer, kind, **fields))

    def produced(self, topic: str, partition: int, first: int, last: int) -> None:
        self.add(PRODUCER, "produced", topic=topic, partition=partition, offset=first, last=last)

    def acquired(
        self,
        consumer: str,
        topic: str,
        partition: int,
        offset: int,
        delivery_count: int | None,
        *,
        sent: float,
        lock_ms: int,
        t: float | None = None,
    ) -> None:
        """The consumer read ``offset`` from a ShareFetch sent at ``sent`` (monotonic)."""
        self.add(
            consumer,
            "acquired",
            t=t,
            topic=topic,
            partition=partition,
            offset=offset,
            delivery_count=delivery_count,
            sent=sent,
            lock_ms=lock_ms,
        )

    def acknowledged(
        self,
        consumer: str,
        topic: str,
        partition: int,
        offset: int,
        ack: AckType,
        *,
        sent: float,
        result: str,
        answered: float | None = None,
        lock_ms: int | None = None,
    ) -> None:
        """An acknowledgement sent at ``sent``, with the broker's answer (``result``)."""
        self.add(
            consumer,
            "acknowledged",
            t=sent,
            topic=topic,
            partition=partition,
            offset=offset,
            ack=ack,
            result=result,
            answered=self.now() if answered is None else answered,
            lock_ms=lock_ms,
        )

    def broker_start(
        self, topic: str, partition: int, start_offset: int, lag: int | None = None
    ) -> None:
        """The share-partition start offset and lag DescribeShareGroupOffsets answered."""
        self.add(
            OBSERVER,
            "broker_start",
            topic=topic,
            partition=partition,
            offset=start_offset,
            lag=lag,
        )


def load_share_history(*paths: str | os.PathLike[str]) -> list[ShareEvent]:
    """Every event of the given JSON-lines files, in time order."""
    events: list[ShareEvent] = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.endswith("\n"):
                    # The last line, still being written: each event is one write(2), but a
                    # reader polling the file while members append can see it part-way.
                    break
                if not line.strip():
                    continue
                try:
                    events.append(ShareEvent.from_json(line))
                except ShareHistoryError as exc:
                    raise ShareHistoryError(f"{path}:{n}: {exc}") from None
    events.sort(key=lambda e: e.t)
    return events


# -- the checker ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ShareOverlap:
    """Two consumers held one record at once: ``second`` read it before ``first``'s lock
    surely ended."""

    record: Record
    first: str
    second: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class ShareViolation:
    """One broken rule, with the record (if any), who and when."""

    rule: str
    consumer: str
    t: float
    detail: str
    record: Record | None = None


@dataclass
class ShareReport:
    """What :func:`check_share_history` found; ``ok`` when no rule was broken."""

    records: int = 0
    acquisitions: int = 0
    redeliveries: int = 0
    accepted: int = 0
    rejected: int = 0
    archived: int = 0
    releases: int = 0
    renewals: int = 0
    #: Deliveries never acknowledged whose lock ran out (nor closed, nor fenced).
    lock_expiries: int = 0
    #: Acknowledgements sent after the lock's latest end (not counted).
    late_acks: int = 0
    crashes: int = 0
    #: Per delivery count, how many acquisitions came with it (None: not shown).
    delivery_counts: dict[int | None, int] = field(default_factory=dict)
    overlaps: list[ShareOverlap] = field(default_factory=list)
    violations: list[ShareViolation] = field(default_factory=list)

    def by_rule(self, rule: str) -> list[ShareViolation]:
        return [v for v in self.violations if v.rule == rule]

    @property
    def ok(self) -> bool:
        return not (self.overlaps or self.violations)

    def counts(self) -> dict[str, int]:
        out = {
            "records": self.records,
            "acquisitions": self.acquisitions,
            "redeliveries": self.redeliveries,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "archived": self.archived,
            "releases": self.releases,
            "renewals": self.renewals,
            "lock_expiries": self.lock_expiries,
            "late_acks": self.late_acks,
            "crashes": self.crashes,
            "overlaps": len(self.overlaps),
        }
        for rule in sorted({v.rule for v in self.violations}):
            out[rule] = len(self.by_rule(rule))
        return out

    def summary(self, limit: int = 5) -> str:
        lines = [", ".join(f"{k}={v}" for k, v in self.counts().items())]
        for o in self.overlaps[:limit]:
            t, p, off = o.record
            lines.append(
                f"overlap {t}[{p}]@{off} {o.first} & {o.second} for {o.seconds:.3f}s "
                f"from t={o.start:.3f}"
            )
        for v in self.violations[:limit]:
            where = "" if v.record is None else f" {v.record[0]}[{v.record[1]}]@{v.record[2]}"
            lines.append(f"{v.rule}:{where} {v.consumer} at t={v.t:.3f}: {v.detail}")
        return "\n".join(lines)

    def assert_clean(self) -> None:
        """Raise ``AssertionError`` with :meth:`summary` unless every rule held."""
        if not self.ok:
            raise AssertionError("share history broke the rules:\n" + self.summary())


@dataclass
class _Hold:
    """One acquisition of one record by one consumer, and how it ended."""

    consumer: str
    t: float
    count: int | None
    lock_ms: int
    sure_end: float  # the broker's lock surely held until here (renewals move it)
    latest_end: float  # ... and surely ended by here (renewals move it)
    #: The first ACCEPT/RELEASE/REJECT the holder sent for this delivery, and when.
    ack: str = ""
    ack_sent: float = float("inf")
    #: When the holder closed cleanly (its share session's records go back).
    closed: float = float("inf")
    #: When the holder's process was killed: its connections drop, and Kafka (4.1+,
    #: KAFKA-19015) ends its share session then, giving its records back.
    crashed: float = float("inf")
    #: A counted ACCEPT / REJECT of this delivery.
    accepted: bool = False
    rejected: bool = False

    def end(self, fences: Mapping[str, list[float]]) -> tuple[float, str]:
        """When the broker surely no longer held the record for this consumer, and why."""
        fence = _fence_between(fences, self.consumer, self.t, self.sure_end)
        return min(
            (self.ack_sent, self.ack),
            (self.closed, "closed"),
            (self.crashed, "crashed"),
            (fence, "fenced"),
            (self.sure_end, "expired"),
        )


def check_share_history(
    events: Iterable[ShareEvent],
    *,
    delivery_limit: int,
    lock_slack: float = 0.25,
) -> ShareReport:
    """Apply every rule of this module to ``events`` (any order) and report.

    ``delivery_limit``: the group's ``share.delivery.count.limit`` (the broker's
    ``group.share.delivery.count.limit`` unless the group sets its own).
    ``lock_slack``: how far past a lock's latest end the broker may still answer an
    acknowledgement "ok" before ``late_ack_counted`` calls it (its expiry timer is
    not exact).
    """
    if delivery_limit < 1:
        raise ValueError(f"delivery_limit must be >= 1, not {delivery_limit}")
    if lock_slack < 0:
        raise ValueError(f"lock_slack must be >= 0, not {lock_slack}")
    history = sorted(events, key=lambda e: e.t)
    report = ShareReport()
    produced = _produced(history)
    report.records = len(produced)
    fences = _fences(history)
    holds: dict[Record, list[_Hold]] = defaultdict(list)
    crashed_at: dict[str, float] = {}
    counts: dict[int | None, int] = defaultdict(int)
    for e in history:
        if e.kind == "crashed":
            report.crashes += 1
            crashed_at.setdefault(e.consumer, e.t)
        if e.kind in ("crashed", "closed"):
            for hs in holds.values():
                for h in hs:
                    if h.consumer == e.consumer and getattr(h, e.kind) == float("inf"):
                        setattr(h, e.kind, max(e.t, h.t))
        elif e.kind == "acquired":
            counts[e.delivery_count] += 1
            _acquire(e, holds[e.record], fences, delivery_limit, report)
        elif e.kind == "acknowledged":
            _acknowledge(e, holds[e.record], lock_slack, report)
    report.delivery_counts = dict(counts)
    report.lock_expiries = sum(
        1 for hs in holds.values() for h in hs if not h.ack and h.end(fences)[1] == "expired"
    )
    _settlement(produced, holds, delivery_limit, report)
    _crash_redelivery(holds, crashed_at, fences, delivery_limit, report)
    _broker_view(history, produced, holds, delivery_limit, report)
    return report


def _produced(history: list[ShareEvent]) -> set[Record]:
    out: set[Record] = set()
    for e in history:
        if e.kind == "produced":
            last = e.offset if e.last is None else e.last
            out.update((e.topic, e.partition, o) for o in range(e.offset, last + 1))
    return out


def _fences(history: list[ShareEvent]) -> dict[str, list[float]]:
    """Per consumer, the earliest instants the broker may have dropped it.  A consumer
    gone after it began a clean close left; that is no fence."""
    out: dict[str, list[float]] = defaultdict(list)
    closed: set[str] = set()
    for e in history:
        if e.kind == "closed":
            closed.add(e.consumer)
        elif e.kind == "acquired":
            closed.discard(e.consumer)  # a name reused by a new consumer
        elif e.kind == "gone" and e.consumer not in closed:
            out[e.consumer].append(e.t if e.since is None else e.since)
    return out


def _fence_between(fences: Mapping[str, list[float]], consumer: str, a: float, b: float) -> float:
    return min((f for f in fences.get(consumer, ()) if a <= f < b), default=float("inf"))


def _acquire(
    e: ShareEvent,
    hs: list[_Hold],
    fences: Mapping[str, list[float]],
    delivery_limit: int,
    report: ShareReport,
) -> None:
    report.acquisitions += 1
    assert e.lock_ms is not None  # checked by ShareEvent
    lock = e.lock_ms / 1000.0
    sent = e.t if e.sent is None else min(e.sent, e.t)
    if e.delivery_count is not None and e.delivery_count > delivery_limit:
        report.violations.append(
            ShareViolation(
                "past_limit",
                e.consumer,
                e.t,
                f"delivered with count {e.delivery_count} > limit {delivery_limit}",
                e.record,
            )
        )
    for h in hs:
        end, _ = h.end(fences)
        if end > e.t:
            report.overlaps.append(ShareOverlap(e.record, h.consumer, e.consumer, e.t, end))
    if hs:
        report.redeliveries += 1
        prev = hs[-1]
        _, how = prev.end(fences)
        # A clean close gives fetched-but-undelivered records back without counting
        # the delivery (KAFKA-17541): the next count may repeat, never go down.
        if (
            e.delivery_count is not None
            and prev.count is not None
            and e.delivery_count < prev.count + (0 if how == "closed" else 1)
        ):
            report.violations.append(
                ShareViolation(
                    "count_not_increased",
                    e.consumer,
                    e.t,
                    f"delivery count {e.delivery_count} after {prev.consumer}'s delivery "
                    f"{prev.count} ended by {how}",
                    e.record,
                )
            )
    hs.append(_Hold(e.consumer, e.t, e.delivery_count, e.lock_ms, sent + lock, e.t + lock))


def _acknowledge(e: ShareEvent, hs: list[_Hold], lock_slack: float, report: ShareReport) -> None:
    mine = [h for h in hs if h.consumer == e.consumer]
    h = mine[-1] if mine else None
    if h is None or h.ack:
        report.violations.append(
            ShareViolation(
                "ack_unheld",
                e.consumer,
                e.t,
                f"{e.ack} of a delivery it "
                + ("never had" if h is None else f"had acknowledged already ({h.ack})"),
                e.record,
            )
        )
        return
    ok = e.result == "ok"
    answered = e.t if e.answered is None else max(e.answered, e.t)
    if e.ack == "renew":
        if ok and e.t <= h.latest_end:
            report.renewals += 1
            lock = (e.lock_ms or h.lock_ms) / 1000.0
            h.sure_end = max(h.sure_end, e.t + lock)
            h.latest_end = max(h.latest_end, answered + lock)
        return
    h.ack, h.ack_sent = str(e.ack), e.t
    late = e.t > h.latest_end
    if late:
        report.late_acks += 1
        if ok and e.t > h.latest_end + lock_slack:
            report.violations.append(
                ShareViolation(
                    "late_ack_counted",
                    e.consumer,
                    e.t,
                    f"{e.ack} sent {e.t - h.latest_end:.3f}s after the lock surely ended "
                    "was answered ok",
                    e.record,
                )
            )
        return
    if not ok:
        return
    if e.ack == "accept":
        h.accepted = True
    elif e.ack == "reject":
        h.rejected = True
    else:
        report.releases += 1


def _settlement(
    produced: set[Record],
    holds: Mapping[Record, list[_Hold]],
    delivery_limit: int,
    report: ShareReport,
) -> None:
    for record in sorted(produced | set(holds)):
        hs = holds.get(record, [])
        accepts = [h for h in hs if h.accepted]
        rejects = [h for h in hs if h.rejected]
        if len(accepts) > 1:
            report.violations.append(
                ShareViolation(
                    "accepted_twice",
                    accepts[1].consumer,
                    accepts[1].t,
                    f"accepted by {', '.join(h.consumer for h in accepts)}",
                    record,
                )
            )
        if accepts and rejects:
            report.violations.append(
                ShareViolation(
                    "settled_twice",
                    rejects[0].consumer,
                    rejects[0].t,
                    "both accepted and rejected",
                    record,
                )
            )
        if accepts:
            report.accepted += 1
        elif rejects:
            report.rejected += 1
        elif _archived(hs, delivery_limit):
            report.archived += 1
        elif record in produced:
            last = hs[-1] if hs else None
            report.violations.append(
                ShareViolation(
                    "unsettled",
                    last.consumer if last else PRODUCER,
                    last.t if last else 0.0,
                    "never accepted, rejected or archived"
                    + (f" ({len(hs)} deliveries, last count {last.count})" if last else ""),
                    record,
                )
            )


def _archived(hs: list[_Hold], delivery_limit: int) -> bool:
    """The last delivery was at the limit and not accepted or rejected: the broker
    archives the record when that delivery ends."""
    return bool(hs) and hs[-1].count is not None and hs[-1].count >= delivery_limit


def _crash_redelivery(
    holds: Mapping[Record, list[_Hold]],
    crashed_at: Mapping[str, float],
    fences: Mapping[str, list[float]],
    delivery_limit: int,
    report: ShareReport,
) -> None:
    """Records a killed or fenced consumer held unacknowledged come back to someone."""
    for record, hs in holds.items():
        h = hs[-1]
        crash = crashed_at.get(h.consumer, float("inf"))
        end, how = h.end(fences)
        if how not in ("expired", "fenced", "crashed") or (crash > end and how == "expired"):
            continue  # acknowledged, closed, or still alive when its lock ran out
        if h.count is not None and h.count >= delivery_limit:
            continue  # archived at the limit: nothing to deliver again
        report.violations.append(
            ShareViolation(
                "not_redelivered",
                h.consumer,
                min(crash, end),
                f"held when its consumer {'was fenced' if how == 'fenced' else 'crashed'} "
                "and never delivered again",
                record,
            )
        )


def _broker_view(
    history: list[ShareEvent],
    produced: set[Record],
    holds: Mapping[Record, list[_Hold]],
    delivery_limit: int,
    report: ShareReport,
) -> None:
    starts: dict[tuple[str, int], ShareEvent] = {}
    for e in history:
        if e.kind == "broker_start":
            starts[(e.topic, e.partition)] = e  # the last reading counts
    for (topic, partition), e in sorted(starts.items()):
        mine = sorted(o for t, p, o in produced if (t, p) == (topic, partition))
        unsettled = []
        for o in mine:
            hs = holds.get((topic, partition, o), [])
            if not (any(h.accepted or h.rejected for h in hs) or _archived(hs, delivery_limit)):
                unsettled.append(o)
        below = [o for o in unsettled if o < e.offset]
        if below:
            report.violations.append(
                ShareViolation(
                    "broker_disagrees",
                    OBSERVER,
                    e.t,
                    f"{len(below)} record(s) below the broker's start offset {e.offset} "
                    f"never settled in the history (first {below[0]})",
                    (topic, partition, below[0]),
                )
            )
        if e.lag is not None and e.lag != len(unsettled) - len(below):
            report.violations.append(
                ShareViolation(
                    "broker_disagrees",
                    OBSERVER,
                    e.t,
                    f"the broker's lag is {e.lag}; the history leaves "
                    f"{len(unsettled) - len(below)} record(s) at or past its start offset "
                    f"{e.offset} unsettled",
                    (topic, partition, e.offset),
                )
            )
