"""An ownership-history checker: judge a consumer group from outside its members.

A member can only say what it *believes* it owns.  Whether two members processed
the same partition at once, whether a record was skipped, or whether a member the
broker had already fenced went on handing records to its application is a fact
about the whole group and its timeline, so it is judged here from a *history*: a
list of time-stamped events appended by every member (in-process or in other
processes) and by an outside observer of the broker
(:class:`aiogroup.testing.observer.GroupObserver`).

Times are ``time.monotonic()``, which on Linux is CLOCK_MONOTONIC - one clock for
every process on the machine - so events from separate processes line up.  Members
in other processes append JSON lines to a shared file (:class:`HistoryRecorder`
with a ``path``); each event is one ``write(2)`` on an ``O_APPEND`` descriptor, so
concurrent appenders never interleave inside a line.

The rules :func:`check_history` applies (see ``docs/reliability.md``):

* **No overlap.**  A member *holds* a partition from the assignment until its
  revoke listener returns or ``on_partitions_lost`` is called.  A member that
  crashed or was frozen holds nothing from the moment the broker fenced it (its
  member id vanished from DescribeGroups without it having started a clean
  leave).  A *running* member is not excused by a fence: until it learns of it (its
  lost listener), whatever it holds is still being processed.  No partition is held
  by two members at the same instant.
* **Nothing lost.**  Every produced record was handed to some member's application.
* **Duplicates only where a crash allows them.**  A record handed out twice is
  allowed only if an earlier copy went to a member that crashed, was fenced or lost
  the partition, at an offset at or after that member's last commit of it.
* **Commits never go backwards** (per partition, in time order; a commit counts
  as later than another only if it was sent after the other was acknowledged).
* **No zombie.**  A member that was fenced neither commits nor is handed records
  after the fence, until the group assigns it partitions again.  A commit counts
  from when it was sent (a frozen member may read the answer to a commit it sent
  before the fence only after waking).

The observer samples the broker, so a fence is known to lie between the last sample
that still showed the member and the first that did not.  Each rule gives the member
the benefit of that doubt (at most one sampling interval): ownership ends at the
earliest possible fence, zombie actions count only after the latest.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from aiogroup.structs import TopicPartition

__all__ = [
    "GROUP",
    "PRODUCER",
    "Event",
    "EventKind",
    "HistoryError",
    "HistoryRecorder",
    "HistoryReport",
    "MemberRecorder",
    "Overlap",
    "Violation",
    "broker_rebalances",
    "check_history",
    "load_history",
]

EventKind = Literal[
    # Written by a member about itself.
    "assigned",  # partitions: an assignment was installed (on_partitions_assigned ran)
    "revoke_started",  # partitions: on_partitions_revoked was entered
    "revoke_ended",  # partitions: on_partitions_revoked returned
    "lost",  # partitions: on_partitions_lost was entered
    "delivered",  # spans: records handed to the application
    "committed",  # offsets: a commit the broker accepted
    "leaving",  # the member started a clean leave (close / unsubscribe)
    # Written by whoever runs the test.
    "crashed",  # the process was killed (kill -9) or the member vanished without leaving
    "frozen",  # the process was stopped (SIGSTOP): it holds nothing from its fence on
    "produced",  # spans: records the producer got acknowledged
    # Written by an observer of the broker (DescribeGroups).
    "joined",  # the member's id appeared in the group (detail: member id)
    "gone",  # the member's id vanished (``since``: last sample that still showed it)
    "broker_assignment",  # partitions: what the broker says this member was given
    "group_state",  # member GROUP; detail: the group's state (and "epoch=N" for KIP-848)
]
KINDS: frozenset[str] = frozenset(get_args(EventKind))

#: The member name the producer's "produced" events carry.
PRODUCER = "<producer>"
#: The member name the observer's "group_state" events carry (the group as a whole).
GROUP = "<group>"
#: Classic group states in which no rebalance is under way (DescribeGroups' names).
_RESTING_STATES = frozenset({"Stable", "Empty", "Dead"})

Partition = tuple[str, int]
#: (topic, partition, first offset, last offset), both ends inclusive.
Span = tuple[str, int, int, int]
#: (topic, partition, committed offset - the next offset to read).
Commit = tuple[str, int, int]


class HistoryError(ValueError):
    """A history event (or a line of a history file) that is not well formed."""


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened to one member at one instant (``time.monotonic()``)."""

    t: float
    member: str
    kind: EventKind
    partitions: tuple[Partition, ...] = ()
    spans: tuple[Span, ...] = ()
    offsets: tuple[Commit, ...] = ()
    #: For "gone": the last observation that still showed the member.
    since: float | None = None
    detail: str = ""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise HistoryError(f"unknown event kind {self.kind!r}; expected one of {sorted(KINDS)}")
        if not self.member:
            raise HistoryError(f"{self.kind} event without a member name")
        for topic, first, last in ((s[0], s[2], s[3]) for s in self.spans):
            if first > last or first < 0:
                raise HistoryError(f"{self.kind} span of {topic} from {first} to {last} is empty")

    def to_json(self) -> str:
        doc: dict[str, Any] = {"t": self.t, "m": self.member, "k": self.kind}
        if self.partitions:
            doc["p"] = [list(p) for p in self.partitions]
        if self.spans:
            doc["s"] = [list(s) for s in self.spans]
        if self.offsets:
            doc["o"] = [list(o) for o in self.offsets]
        if self.since is not None:
            doc["since"] = self.since
        if self.detail:
            doc["d"] = self.detail
        return json.dumps(doc, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> Event:
        try:
            doc = json.loads(line)
            return cls(
                t=float(doc["t"]),
                member=str(doc["m"]),
                kind=doc["k"],
                partitions=tuple((str(p[0]), int(p[1])) for p in doc.get("p", ())),
                spans=tuple((str(s[0]), int(s[1]), int(s[2]), int(s[3])) for s in doc.get("s", ())),
                offsets=tuple((str(o[0]), int(o[1]), int(o[2])) for o in doc.get("o", ())),
                since=None if doc.get("since") is None else float(doc["since"]),
                detail=str(doc.get("d", "")),
            )
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise HistoryError(f"not a history event: {line[:200]!r} ({exc})") from None


def _parts(partitions: Iterable[TopicPartition | Partition]) -> tuple[Partition, ...]:
    return tuple(sorted((str(tp[0]), int(tp[1])) for tp in partitions))


class HistoryRecorder:
    """Collects events in memory and, given a ``path``, appends them to a JSON-lines file.

    Thread-safe (rebalance listeners may run in worker threads), and safe for several
    processes appending to one file: every event is a single ``O_APPEND`` write.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.path = None if path is None else Path(path)
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._events: list[Event] = []
        self._fd: int | None = None
        if self.path is not None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def now(self) -> float:
        return self._clock()

    def record(self, event: Event) -> Event:
        line = (event.to_json() + "\n").encode()
        with self._lock:
            self._events.append(event)
            if self._fd is not None:
                os.write(self._fd, line)
        return event

    def add(self, member: str, kind: EventKind, **fields: Any) -> Event:
        """Record ``kind`` for ``member`` now (or at ``t=`` if given)."""
        t = fields.pop("t", None)
        return self.record(Event(self.now() if t is None else t, member, kind, **fields))

    def member(self, name: str) -> MemberRecorder:
        """The recording handle one member writes its own events through."""
        return MemberRecorder(self, name)

    def produced(self, topic: str, partition: int, first: int, last: int) -> None:
        self.add(PRODUCER, "produced", spans=((topic, partition, first, last),))

    def crashed(self, member: str) -> None:
        self.add(member, "crashed")

    def events(self) -> list[Event]:
        """What this recorder wrote (in this process only; use :func:`load_history`
        to read a file several processes appended to)."""
        with self._lock:
            return list(self._events)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> HistoryRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class MemberRecorder:
    """Records one member's events: call these from its listener and its poll loop."""

    recorder: HistoryRecorder
    name: str

    def assigned(self, partitions: Iterable[TopicPartition | Partition]) -> None:
        self.recorder.add(self.name, "assigned", partitions=_parts(partitions))

    def revoke_started(self, partitions: Iterable[TopicPartition | Partition]) -> None:
        self.recorder.add(self.name, "revoke_started", partitions=_parts(partitions))

    def revoke_ended(self, partitions: Iterable[TopicPartition | Partition]) -> None:
        self.recorder.add(self.name, "revoke_ended", partitions=_parts(partitions))

    def lost(self, partitions: Iterable[TopicPartition | Partition]) -> None:
        self.recorder.add(self.name, "lost", partitions=_parts(partitions))

    def delivered(self, topic: str, partition: int, offsets: Sequence[int]) -> None:
        """Records of one partition handed to the application (offsets in order)."""
        if offsets:
            self.delivered_spans(_spans(topic, partition, offsets))

    def delivered_spans(self, spans: Iterable[Span]) -> None:
        spans = tuple(spans)
        if spans:
            self.recorder.add(self.name, "delivered", spans=spans)

    def committed(
        self,
        offsets: Mapping[TopicPartition, int] | Iterable[Commit],
        *,
        sent_at: float | None = None,
    ) -> None:
        """A commit the broker accepted: partition -> next offset to read.

        ``sent_at``: when the commit request left (``time.monotonic()``).  The event is
        stamped when the answer came back; two commits in flight at once may have been
        applied by the broker in either order, so the checker orders commits only
        where one was acknowledged before the other was sent.
        """
        if isinstance(offsets, Mapping):
            rows = tuple(sorted((tp.topic, tp.partition, int(o)) for tp, o in offsets.items()))
        else:
            rows = tuple(sorted(offsets))
        if rows:
            self.recorder.add(self.name, "committed", offsets=rows, since=sent_at)

    def leaving(self) -> None:
        self.recorder.add(self.name, "leaving")

    def crashed(self) -> None:
        self.recorder.add(self.name, "crashed")


def _spans(topic: str, partition: int, offsets: Sequence[int]) -> list[Span]:
    """Consecutive runs of ``offsets`` (in delivery order) as spans."""
    out: list[Span] = []
    first = prev = offsets[0]
    for o in offsets[1:]:
        if o != prev + 1:
            out.append((topic, partition, first, prev))
            first = o
        prev = o
    out.append((topic, partition, first, prev))
    return out


def load_history(*paths: str | os.PathLike[str]) -> list[Event]:
    """Every event of the given JSON-lines files, in time order."""
    events: list[Event] = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    events.append(Event.from_json(line))
                except HistoryError as exc:
                    raise HistoryError(f"{path}:{n}: {exc}") from None
    events.sort(key=lambda e: e.t)
    return events


# -- the checker ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Overlap:
    """Two members held one partition over the same interval."""

    topic: str
    partition: int
    first: str
    second: str
    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Violation:
    """One broken rule (other than an overlap), with what, who and when."""

    rule: str
    member: str
    t: float
    detail: str


@dataclass
class HistoryReport:
    """What :func:`check_history` found; ``ok`` when no rule was broken."""

    records_checked: int = 0
    deliveries: int = 0
    rebalances: int = 0
    #: Rebalances the broker showed (see :func:`broker_rebalances`); None: not observed.
    broker_rebalances: int | None = None
    duplicates: int = 0
    overlaps: list[Overlap] = field(default_factory=list)
    lost: list[tuple[str, int, int]] = field(default_factory=list)
    disallowed_duplicates: list[Violation] = field(default_factory=list)
    backwards_commits: list[Violation] = field(default_factory=list)
    zombie_commits: list[Violation] = field(default_factory=list)
    zombie_deliveries: list[Violation] = field(default_factory=list)
    unowned_deliveries: list[Violation] = field(default_factory=list)
    #: Members the broker dropped while they neither left cleanly nor crashed, with when.
    evictions: list[tuple[str, float]] = field(default_factory=list)
    #: Every fence the observer saw (evictions plus crashed members' session expiries).
    fences: list[tuple[str, float]] = field(default_factory=list)

    @property
    def overlap_seconds(self) -> float:
        return sum(o.seconds for o in self.overlaps)

    @property
    def violations(self) -> list[Violation]:
        return [
            *self.disallowed_duplicates,
            *self.backwards_commits,
            *self.zombie_commits,
            *self.zombie_deliveries,
            *self.unowned_deliveries,
        ]

    @property
    def ok(self) -> bool:
        return not (self.overlaps or self.lost or self.violations)

    def counts(self) -> dict[str, float]:
        """The figures docs/reliability.md and the benchmarks report."""
        return {
            "records_checked": self.records_checked,
            "deliveries": self.deliveries,
            "rebalances": self.rebalances,
            "broker_rebalances": -1 if self.broker_rebalances is None else self.broker_rebalances,
            "overlaps": len(self.overlaps),
            "overlap_seconds": round(self.overlap_seconds, 3),
            "lost": len(self.lost),
            "duplicates": self.duplicates,
            "disallowed_duplicates": len(self.disallowed_duplicates),
            "backwards_commits": len(self.backwards_commits),
            "zombie_commits": len(self.zombie_commits),
            "zombie_deliveries": len(self.zombie_deliveries),
            "unowned_deliveries": len(self.unowned_deliveries),
            "evictions": len(self.evictions),
            "fences": len(self.fences),
        }

    def summary(self, limit: int = 5) -> str:
        """A readable account: the counts, then the first few of each kind of problem."""
        lines = [", ".join(f"{k}={v}" for k, v in self.counts().items())]
        for o in self.overlaps[:limit]:
            lines.append(
                f"overlap {o.topic}[{o.partition}] {o.first} & {o.second} "
                f"for {o.seconds:.3f}s from t={o.start:.3f}"
            )
        if self.lost:
            lines.append(f"lost (first {limit}): {self.lost[:limit]}")
        for v in self.violations[:limit]:
            lines.append(f"{v.rule}: {v.member} at t={v.t:.3f}: {v.detail}")
        return "\n".join(lines)

    def assert_clean(self) -> None:
        """Raise ``AssertionError`` with :meth:`summary` unless every rule held."""
        if not self.ok:
            raise AssertionError("ownership history broke the rules:\n" + self.summary())


@dataclass
class _Window:
    member: str
    start: float
    end: float = float("inf")
    #: What ended it: "revoke", "lost", "fence" or "crash" ("" while still open).
    cut: str = ""


@dataclass
class _Fence:
    member: str
    earliest: float  # last sample that still showed the member
    latest: float  # first sample without it


def check_history(
    events: Iterable[Event], *, produced: Mapping[TopicPartition, int] | None = None
) -> HistoryReport:
    """Apply every rule of this module to ``events`` (any order) and report.

    ``produced`` (partition -> end offset, exclusive) is an alternative to "produced"
    events: every offset below the end must have been delivered.  Without either,
    the lost-record rule has nothing to check.
    """
    history = sorted(events, key=lambda e: e.t)
    report = HistoryReport()
    fences = _fences(history, report)
    windows = _windows(history, fences)
    _check_overlaps(windows, report)
    _check_deliveries(history, windows, fences, report, produced)
    _check_commits(history, fences, report)
    report.rebalances = _rebalances(history)
    if any(e.kind == "group_state" for e in history):
        report.broker_rebalances = len(broker_rebalances(history))
    return report


def _fences(history: list[Event], report: HistoryReport) -> dict[str, list[_Fence]]:
    """Fences: a "gone" without a clean leave since the member last joined.  Each is
    also reported; it counts as an eviction unless the member had crashed."""
    fences: dict[str, list[_Fence]] = defaultdict(list)
    crashes: dict[str, float] = {}
    leaving: dict[str, bool] = defaultdict(bool)
    for e in history:
        if e.kind == "crashed":
            crashes.setdefault(e.member, e.t)
        elif e.kind == "leaving":
            leaving[e.member] = True
        elif e.kind == "joined":
            leaving[e.member] = False
        elif e.kind == "gone":
            if leaving[e.member]:
                continue
            earliest = e.t if e.since is None else e.since
            fences[e.member].append(_Fence(e.member, earliest, e.t))
            report.fences.append((e.member, e.t))
            if e.member not in crashes:
                report.evictions.append((e.member, e.t))
    return fences


def _windows(
    history: list[Event], fences: Mapping[str, list[_Fence]]
) -> dict[Partition, list[_Window]]:
    """Per partition, the intervals each member held it."""
    windows: dict[Partition, list[_Window]] = defaultdict(list)
    open_: dict[tuple[str, Partition], _Window] = {}

    def close(member: str, t: float, cut: str, parts: Sequence[Partition] | None = None) -> None:
        for key in [k for k in open_ if k[0] == member and (parts is None or k[1] in parts)]:
            w = open_.pop(key)
            w.end = max(t, w.start)
            w.cut = cut

    # Fences interleave with the member's own events at their earliest possible time;
    # they end the holds of a member that cannot act on them (crashed or frozen).
    cuts: list[Event] = []
    for member, fs in fences.items():
        cuts += [Event(f.earliest, member, "gone", detail="fence") for f in fs]
    inert: set[str] = set()
    for e in sorted([*history, *cuts], key=lambda e: e.t):
        if e.kind in ("joined", "assigned"):
            inert.discard(e.member)  # woke and rejoined
        if e.kind == "assigned":
            for p in e.partitions:
                if (e.member, p) not in open_:
                    w = _Window(e.member, e.t)
                    open_[(e.member, p)] = w
                    windows[p].append(w)
        elif e.kind in ("revoke_ended", "lost"):
            close(e.member, e.t, "revoke" if e.kind == "revoke_ended" else "lost", e.partitions)
        elif e.kind == "gone" and e.detail == "fence":
            if e.member in inert:
                close(e.member, e.t, "fence")
            else:
                for (member, _), w in open_.items():
                    if member == e.member:
                        w.cut = "fence"  # remembered for the duplicate rule
        elif e.kind in ("crashed", "frozen"):
            inert.add(e.member)
            if e.kind == "crashed" and not fences.get(e.member):
                # Without an observer's fence, a crash ends the window where it
                # happened; with one, it runs on to the fence (the broker still counts it).
                close(e.member, e.t, "crash")
    return windows


def _check_overlaps(windows: Mapping[Partition, list[_Window]], report: HistoryReport) -> None:
    for (topic, partition), ws in sorted(windows.items()):
        ws = sorted(ws, key=lambda w: w.start)
        for i, a in enumerate(ws):
            for b in ws[i + 1 :]:
                if b.start >= a.end:
                    continue
                if a.member == b.member:
                    continue
                start, end = max(a.start, b.start), min(a.end, b.end)
                if end > start:
                    report.overlaps.append(
                        Overlap(topic, partition, a.member, b.member, start, end)
                    )


def _held(ws: Sequence[_Window], member: str, t: float) -> _Window | None:
    for w in ws:
        if w.member == member and w.start <= t <= w.end:
            return w
    return None


def _fenced_before(fences: Mapping[str, list[_Fence]], member: str, t: float) -> _Fence | None:
    """The latest fence of ``member`` that surely happened before ``t``."""
    found = None
    for f in fences.get(member, ()):
        if f.latest < t:
            found = f
    return found


def _check_deliveries(
    history: list[Event],
    windows: Mapping[Partition, list[_Window]],
    fences: Mapping[str, list[_Fence]],
    report: HistoryReport,
    produced: Mapping[TopicPartition, int] | None,
) -> None:
    # (partition, offset) -> the members it was handed to, in order, with the window.
    first_holder: dict[tuple[Partition, int], tuple[str, _Window | None]] = {}
    last_commit = _commit_positions(history)
    expected: dict[Partition, set[int]] = defaultdict(set)
    if produced:
        for tp, end in produced.items():
            expected[(tp.topic, tp.partition)].update(range(end))
    for e in history:
        if e.kind == "produced":
            for topic, p, first, last in e.spans:
                expected[(topic, p)].update(range(first, last + 1))
    for e in history:
        if e.kind != "delivered":
            continue
        for topic, p, first, last in e.spans:
            part = (topic, p)
            n = last - first + 1
            report.deliveries += n
            window = _held(windows.get(part, ()), e.member, e.t)
            if window is None:
                fence = _fenced_before(fences, e.member, e.t)
                rule = "zombie delivery" if fence is not None else "unowned delivery"
                where = f" (fenced at t={fence.latest:.3f})" if fence is not None else ""
                v = Violation(rule, e.member, e.t, f"{topic}[{p}] {first}..{last}{where}")
                (report.zombie_deliveries if fence else report.unowned_deliveries).append(v)
            for o in range(first, last + 1):
                key = (part, o)
                prior = first_holder.get(key)
                if prior is None:
                    first_holder[key] = (e.member, window)
                    continue
                report.duplicates += 1
                if not _duplicate_allowed(prior, part, o, last_commit):
                    report.disallowed_duplicates.append(
                        Violation(
                            "disallowed duplicate",
                            e.member,
                            e.t,
                            f"{topic}[{p}]@{o} first handed to {prior[0]}, whose ownership "
                            "ended without a crash, fence or loss after its last commit",
                        )
                    )
    delivered_keys = first_holder.keys()
    for (topic, p), offsets in sorted(expected.items()):
        for o in sorted(offsets):
            if ((topic, p), o) not in delivered_keys:
                report.lost.append((topic, p, o))
    report.records_checked = sum(len(v) for v in expected.values()) or len(first_holder)


def _commit_positions(history: list[Event]) -> dict[tuple[str, Partition], list[tuple[float, int]]]:
    """(member, partition) -> that member's accepted commits, in time order."""
    out: dict[tuple[str, Partition], list[tuple[float, int]]] = defaultdict(list)
    for e in history:
        if e.kind == "committed":
            for topic, p, offset in e.offsets:
                out[(e.member, (topic, p))].append((e.t, offset))
    return out


def _duplicate_allowed(
    prior: tuple[str, _Window | None],
    part: Partition,
    offset: int,
    commits: Mapping[tuple[str, Partition], list[tuple[float, int]]],
) -> bool:
    """A redelivery is the price of a crash: the first copy went to a member whose
    ownership was cut (crash, fence, or on_partitions_lost) before it committed past it."""
    member, window = prior
    # A clean revoke should have committed what it handed out; an open window is no excuse.
    if window is None or window.cut not in ("lost", "fence", "crash"):
        return False
    committed_before_end = [o for t, o in commits.get((member, part), ()) if t <= window.end]
    last = committed_before_end[-1] if committed_before_end else -1
    return offset >= last


def _check_commits(
    history: list[Event], fences: Mapping[str, list[_Fence]], report: HistoryReport
) -> None:
    high: dict[Partition, tuple[int, str, float]] = {}
    assigned_after: dict[str, float] = {}
    for e in history:
        if e.kind == "assigned":
            assigned_after[e.member] = e.t
        if e.kind != "committed":
            continue
        sent = e.t if e.since is None else e.since
        # Judged by when the commit was *sent*: one that left before the fence and
        # whose answer was read late (the member was frozen with it in flight) was
        # made while the member still belonged to the group.
        fence = _fenced_before(fences, e.member, sent)
        if fence is not None and assigned_after.get(e.member, -1.0) < fence.latest:
            report.zombie_commits.append(
                Violation(
                    "zombie commit",
                    e.member,
                    e.t,
                    f"{list(e.offsets)} after the broker fenced it at t={fence.latest:.3f}",
                )
            )
        for topic, p, offset in e.offsets:
            prev = high.get((topic, p))
            # Backwards only if this commit left after the higher one was acknowledged:
            # commits in flight together may be applied by the broker in either order.
            if prev is not None and offset < prev[0] and sent >= prev[2]:
                report.backwards_commits.append(
                    Violation(
                        "backwards commit",
                        e.member,
                        e.t,
                        f"{topic}[{p}] committed {offset} after {prev[1]} committed {prev[0]}",
                    )
                )
            if prev is None or offset > prev[0]:
                high[(topic, p)] = (offset, e.member, e.t)


def _rebalances(history: list[Event]) -> int:
    """Assignment changes the broker showed, or else the most assignments one member saw."""
    broker: dict[str, tuple[Partition, ...]] = {}
    changed_at: set[float] = set()  # one observation stamps all its members with one time
    for e in history:
        if e.kind == "broker_assignment" and broker.get(e.member) != e.partitions:
            broker[e.member] = e.partitions
            changed_at.add(e.t)
    if changed_at:
        return len(changed_at)
    per_member: dict[str, int] = defaultdict(int)
    for e in history:
        if e.kind == "assigned":
            per_member[e.member] += 1
    return max(per_member.values(), default=0)


def broker_rebalances(history: Sequence[Event], since: float | None = None) -> list[float]:
    """When the broker started a rebalance, as the observer saw it (its "group_state" events).

    KIP-848 (the detail carries ``epoch=N``): each rise of the group epoch is one - the
    coordinator bumps it once per membership or subscription change.  Classic: each
    move from a resting state (Stable, Empty) into a rebalancing one
    (PreparingRebalance, CompletingRebalance; Tansu reports "Unknown") is one - a
    generation.  The observer samples (every 0.1 s by default), so a rebalance shorter
    than a sample can be missed: the count never overstates, and a rebalance that
    waits on a listener or a heartbeat (every extra one these scenarios look for)
    lasts far longer than a sample.  ``since``: count only those at or after it.
    """
    starts: list[float] = []
    resting = True
    epoch: int | None = None
    for e in history:
        if e.kind != "group_state":
            continue
        state, _, rest = e.detail.partition(" ")
        if rest.startswith("epoch="):
            now = int(rest.removeprefix("epoch="))
            if epoch is not None and now > epoch:
                starts.append(e.t)
            epoch = now if epoch is None else max(epoch, now)
            continue
        rebalancing = state not in _RESTING_STATES
        if rebalancing and resting:
            starts.append(e.t)
        resting = not rebalancing
    return [t for t in starts if since is None or t >= since]
