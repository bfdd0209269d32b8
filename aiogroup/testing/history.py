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

**Processing rules** (histories with "started"/"finished"/"abandoned" events, one per
record and handler attempt, written by :func:`aiogroup.testing.recording.recording_handler`;
"broker_committed" events are the group's committed offsets read from outside):

* **Order** (``ordering="key"``; "partition" treats the partition as one key,
  "unordered" checks nothing): within one member's hold of a partition, records of
  one key start in offset order and never two at once.  Null keys form one key.
* **No commit past unfinished work.**  Every record below a committed offset that
  was produced or started had finished before the commit was sent (a member's
  commit) or seen (the broker's offset).
* **No processing overlap.**  No two members run records of one partition at the
  same instant (an attempt runs from its start to its end; a frozen process runs
  nothing until it is next seen acting; a killed one nothing after its death - its
  last own event, if the kill landed after the "crashed" stamp).
* **Processing only while held.**  Nothing is started or finished outside the
  member's hold: after its revoke returned, after lost, or after its fence.
* **Nothing unfinished.**  Every produced record was finished (handled or
  dead-lettered) at least once.
* **Redo only what was not done.**  A record is started again by a new owner only if
  it was never finished, or its finish was never committed (a commit sent after the
  finish carries it, in its offset or its metadata).  Records processed again are
  counted, with the records in flight and finished-but-uncommitted at each crash.

**Output rules** (exactly-once consume-transform-produce; histories with "output"
events, one per output record read from the output topic with
``isolation_level="read_committed"``, naming the input record it was made from - see
:mod:`aiogroup.testing.outputs`):

* **No output twice.**  No input record's output appears more than once.
* **No output missing.**  Every input record below the group's committed offset has
  its output (the committed offset is the last "broker_committed" of the partition,
  or else the highest offset a member's commit was accepted at).
* **Nothing of an aborted transaction.**  No output carries the label of a
  transaction a member recorded as aborted ("txn_aborted": fenced, or failed).

The observer samples the broker, so a fence is known to lie between the last sample
that still showed the member and the first that did not.  Each rule gives the member
the benefit of that doubt (at most one sampling interval): ownership ends at the
earliest possible fence, zombie actions count only after the latest.
"""

from __future__ import annotations

import bisect
import json
import os
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from aiogroup.structs import TopicPartition
from aiogroup.testing.event_log import EventLog

__all__ = [
    "GROUP",
    "OBSERVER",
    "OUTPUT",
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
    "key_text",
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
    # (stamped as the kill is sent or after; it never acts again - see _deaths)
    "frozen",  # the process was stopped (SIGSTOP): it holds nothing from its fence on
    # (stamp it once the process is stopped: its next own event is read as its wake)
    "produced",  # spans: records the producer got acknowledged
    # Written by a member's processing (one record per event, spans=((t, p, o, o),)).
    "started",  # a handler attempt began for the record (``key``: the record's key)
    "finished",  # the record is done (handled, or dead-lettered: ``detail``)
    "abandoned",  # an attempt ended unfinished (``detail``: "cancelled" or the error)
    # Written by an observer of the broker (DescribeGroups).
    "joined",  # the member's id appeared in the group (detail: member id)
    "gone",  # the member's id vanished (``since``: last sample that still showed it)
    "broker_assignment",  # partitions: what the broker says this member was given
    "group_state",  # member GROUP; detail: the group's state (and "epoch=N" for KIP-848)
    "broker_committed",  # offsets: the group's committed offsets, read from outside (OffsetFetch)
    # Exactly-once output (see "Output rules").
    "txn_aborted",  # detail: the label of a transaction the member aborted (or was fenced in)
    "output",  # spans: the input records one read_committed output record was made from;
    # detail: the label of the transaction that wrote it ("" when unlabelled)
]
KINDS: frozenset[str] = frozenset(get_args(EventKind))

#: The member name the producer's "produced" events carry.
PRODUCER = "<producer>"
#: The member name the observer's "group_state" events carry (the group as a whole).
GROUP = "<group>"
#: Classic group states in which no rebalance is under way (DescribeGroups' names).
_RESTING_STATES = frozenset({"Stable", "Empty", "Dead"})
#: The member name of "broker_committed" events (the group's offsets read from outside).
OBSERVER = "<observer>"
#: The member name of "output" events (the output topic read with read_committed).
OUTPUT = "<output>"

Ordering = Literal["key", "partition", "unordered"]
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
    #: For processing events: the record's key (see :func:`key_text`), None for no key.
    key: str | None = None
    #: Wall-clock time (``time.time()``), for lining a history up with logs.
    wall: float | None = None
    #: For commits: (topic, partition, the commit's metadata string) where it had one.
    metadata: tuple[tuple[str, int, str], ...] = ()

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
        if self.key is not None:
            doc["key"] = self.key
        if self.wall is not None:
            doc["w"] = self.wall
        if self.metadata:
            doc["md"] = [list(m) for m in self.metadata]
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
                key=None if doc.get("key") is None else str(doc["key"]),
                wall=None if doc.get("w") is None else float(doc["w"]),
                metadata=tuple((str(m[0]), int(m[1]), str(m[2])) for m in doc.get("md", ())),
            )
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise HistoryError(f"not a history event: {line[:200]!r} ({exc})") from None


def _parts(partitions: Iterable[TopicPartition | Partition]) -> tuple[Partition, ...]:
    return tuple(sorted((str(tp[0]), int(tp[1])) for tp in partitions))


class HistoryRecorder(EventLog[Event]):
    """Collects events in memory and, given a ``path``, appends them to a JSON-lines file.

    Thread-safe (rebalance listeners may run in worker threads), and safe for several
    processes appending to one file (:class:`aiogroup.testing.event_log.EventLog`).
    """

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

    def output(self, topic: str, partition: int, offset: int, txn: str = "") -> None:
        """One read_committed output record, made from input ``topic[partition]@offset``
        in the transaction labelled ``txn``."""
        self.add(OUTPUT, "output", spans=((topic, partition, offset, offset),), detail=txn)

    def broker_committed(self, offsets: Mapping[TopicPartition, int] | Iterable[Commit]) -> None:
        """The group's committed offsets as the broker answered them (read from outside)."""
        rows = _commit_rows(offsets)
        if rows:
            self.add(OBSERVER, "broker_committed", offsets=rows)


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
        metadata: Mapping[TopicPartition, str] | None = None,
    ) -> None:
        """A commit the broker accepted: partition -> next offset to read.

        ``sent_at``: when the commit request left (``time.monotonic()``).  The event is
        stamped when the answer came back; two commits in flight at once may have been
        applied by the broker in either order, so the checker orders commits only
        where one was acknowledged before the other was sent.
        """
        rows = _commit_rows(offsets)
        md = tuple(sorted((tp.topic, tp.partition, m) for tp, m in (metadata or {}).items() if m))
        if rows:
            self.recorder.add(self.name, "committed", offsets=rows, since=sent_at, metadata=md)

    def started(self, topic: str, partition: int, offset: int, key: object = None) -> None:
        """A handler attempt began for one record (``key`` as the record carries it)."""
        self._record("started", topic, partition, offset, key)

    def finished(
        self, topic: str, partition: int, offset: int, key: object = None, detail: str = ""
    ) -> None:
        """The record is done: handled, or dead-lettered (say so in ``detail``)."""
        self._record("finished", topic, partition, offset, key, detail)

    def abandoned(
        self, topic: str, partition: int, offset: int, key: object = None, detail: str = ""
    ) -> None:
        """An attempt ended without finishing the record: cancelled, failed, timed out."""
        self._record("abandoned", topic, partition, offset, key, detail)

    def _record(
        self,
        kind: EventKind,
        topic: str,
        partition: int,
        offset: int,
        key: object,
        detail: str = "",
    ) -> None:
        self.recorder.add(
            self.name,
            kind,
            spans=((topic, partition, offset, offset),),
            key=key_text(key),
            detail=detail,
            wall=time.time(),
        )

    def txn_aborted(self, txn: str) -> None:
        """The transaction labelled ``txn`` was aborted (fenced, or failed): nothing it
        wrote may be visible to read_committed readers."""
        self.recorder.add(self.name, "txn_aborted", detail=txn)

    def leaving(self) -> None:
        self.recorder.add(self.name, "leaving")

    def crashed(self) -> None:
        self.recorder.add(self.name, "crashed")


def key_text(key: object) -> str | None:
    """A record key as the history stores it: only compared for equality, so bytes are
    kept exactly (hex) and anything else by its ``repr``."""
    if key is None:
        return None
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key).hex()
    if isinstance(key, str):
        return key
    return repr(key)


def _commit_rows(offsets: Mapping[TopicPartition, int] | Iterable[Commit]) -> tuple[Commit, ...]:
    if isinstance(offsets, Mapping):
        return tuple(sorted((tp.topic, tp.partition, int(o)) for tp, o in offsets.items()))
    return tuple(sorted((str(t), int(p), int(o)) for t, p, o in offsets))


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
                if not line.endswith("\n"):
                    # The last line, still being written: each event is one write(2), but a
                    # reader polling the file while members append can see it part-way.
                    break
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
    # -- processing (started/finished events; see "Processing rules" above) --
    #: Handler attempts started, records finished at least once.
    processing_starts: int = 0
    records_finished: int = 0
    #: Attempts that started a record again under a new owner (a member or a new hold).
    reprocessed: int = 0
    #: Attempts that started a record again under the same hold after one ended unfinished.
    retries: int = 0
    #: At each crash: records the member had started and not ended.
    in_flight_at_crash: int = 0
    #: Handlers frozen mid-record that finished on waking (see _check_processing_owned).
    finished_after_wake: int = 0
    #: At each crash: records the member had finished after its last commit was sent.
    finished_uncommitted_at_crash: int = 0
    order_violations: list[Violation] = field(default_factory=list)
    commits_past_unfinished: list[Violation] = field(default_factory=list)
    #: Two members running records of one partition at the same instant.
    processing_overlaps: list[Overlap] = field(default_factory=list)
    processed_unowned: list[Violation] = field(default_factory=list)
    #: Produced records no member finished.
    unfinished: list[tuple[str, int, int]] = field(default_factory=list)
    disallowed_reprocessing: list[Violation] = field(default_factory=list)
    # -- output ("output" events; see "Output rules" above) --
    #: Output records read (read_committed), and the input records they cover.
    outputs_checked: int = 0
    duplicate_outputs: list[Violation] = field(default_factory=list)
    #: Inputs below the committed offset with no output.
    missing_outputs: list[tuple[str, int, int]] = field(default_factory=list)
    aborted_outputs: list[Violation] = field(default_factory=list)

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
            *self.order_violations,
            *self.commits_past_unfinished,
            *self.processed_unowned,
            *self.disallowed_reprocessing,
            *self.duplicate_outputs,
            *self.aborted_outputs,
        ]

    @property
    def ok(self) -> bool:
        return not (
            self.overlaps
            or self.lost
            or self.violations
            or self.processing_overlaps
            or self.unfinished
            or self.missing_outputs
        )

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
            "processing_starts": self.processing_starts,
            "records_finished": self.records_finished,
            "reprocessed": self.reprocessed,
            "retries": self.retries,
            "in_flight_at_crash": self.in_flight_at_crash,
            "finished_after_wake": self.finished_after_wake,
            "finished_uncommitted_at_crash": self.finished_uncommitted_at_crash,
            "order_violations": len(self.order_violations),
            "commits_past_unfinished": len(self.commits_past_unfinished),
            "processing_overlaps": len(self.processing_overlaps),
            "processed_unowned": len(self.processed_unowned),
            "unfinished": len(self.unfinished),
            "disallowed_reprocessing": len(self.disallowed_reprocessing),
            "outputs_checked": self.outputs_checked,
            "duplicate_outputs": len(self.duplicate_outputs),
            "missing_outputs": len(self.missing_outputs),
            "aborted_outputs": len(self.aborted_outputs),
        }

    def summary(self, limit: int = 5) -> str:
        """A readable account: the counts, then the first few of each kind of problem."""
        lines = [", ".join(f"{k}={v}" for k, v in self.counts().items())]
        for o in self.overlaps[:limit]:
            lines.append(
                f"overlap {o.topic}[{o.partition}] {o.first} & {o.second} "
                f"for {o.seconds:.3f}s from t={o.start:.3f}"
            )
        for o in self.processing_overlaps[:limit]:
            lines.append(
                f"processing overlap {o.topic}[{o.partition}] {o.first} & {o.second} "
                f"for {o.seconds:.3f}s from t={o.start:.3f}"
            )
        if self.lost:
            lines.append(f"lost (first {limit}): {self.lost[:limit]}")
        if self.unfinished:
            lines.append(f"unfinished (first {limit}): {self.unfinished[:limit]}")
        if self.missing_outputs:
            lines.append(f"missing outputs (first {limit}): {self.missing_outputs[:limit]}")
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
    events: Iterable[Event],
    *,
    produced: Mapping[TopicPartition, int] | None = None,
    ordering: Ordering = "key",
    metadata_kept: bool = True,
    outputs: bool | None = None,
) -> HistoryReport:
    """Apply every rule of this module to ``events`` (any order) and report.

    ``produced`` (partition -> end offset, exclusive) is an alternative to "produced"
    events: every offset below the end must have been delivered (and, when the
    history has processing events, finished).  Without either, the lost-record rules
    have nothing to check.  ``ordering`` is the processor's promise the order rule
    holds it to: "key", "partition" or "unordered" (no order rule).
    ``metadata_kept=False``: the broker drops commit metadata (the embedded Tansu
    does), so a commit carries only what its offset passes.
    ``outputs``: apply the output rules (None: when the history has "output" events;
    True also when it has none - then every input below a commit is missing).
    """
    if ordering not in get_args(Ordering):
        raise ValueError(f"ordering must be one of {get_args(Ordering)}, not {ordering!r}")
    history = sorted(events, key=lambda e: e.t)
    report = HistoryReport()
    fences = _fences(history, report)
    windows = _windows(history, fences)
    _check_overlaps(windows, report)
    _check_deliveries(history, windows, fences, report, produced)
    _check_commits(history, fences, report)
    if any(e.kind in _PROCESSING for e in history):
        expected = _expected(history, produced)
        _check_processing(history, windows, report, expected, ordering, metadata_kept)
    if outputs or (outputs is None and any(e.kind == "output" for e in history)):
        _check_outputs(history, report)
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


def _deaths(history: list[Event]) -> dict[str, list[tuple[float, float]]]:
    """Per member, each crash's stamp and the instant the process surely was dead by.

    A harness stamps "crashed" as it sends the kill, and the process runs until the
    signal lands: on a loaded machine its last events (a record finished, the next one
    started) can be stamped after the crash.  A killed process never acts again, so
    its own events after the stamp are its last moments, not a wake: it died at the
    latest of them (or at the stamp).  They count up to its next "joined" - a new life
    under the same name - or its next crash.  Taking them for a wake (as for a frozen
    member) left the handlers it was running when it died open forever, overlapping
    whoever took its partitions.
    """
    crashes: dict[str, list[float]] = defaultdict(list)
    acts: dict[str, list[float]] = defaultdict(list)
    joins: dict[str, list[float]] = defaultdict(list)
    for e in history:
        if e.kind == "crashed":
            crashes[e.member].append(e.t)
        elif e.kind in _SELF_WRITTEN:
            acts[e.member].append(e.t)
        elif e.kind == "joined":
            joins[e.member].append(e.t)
    out: dict[str, list[tuple[float, float]]] = {}
    for member, stamps in crashes.items():
        stamps.sort()
        rows = []
        for i, crash in enumerate(stamps):
            later = [t for t in joins.get(member, ()) if t > crash]
            if i + 1 < len(stamps):
                later.append(stamps[i + 1])
            bound = min(later, default=float("inf"))
            last = [t for t in acts.get(member, ()) if crash < t < bound]
            rows.append((crash, max([crash, *last])))
        out[member] = rows
    return out


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
    deaths = _deaths(history)
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
                # Without an observer's fence, a crash ends the window where the
                # process died; with one, it runs on to the fence (the broker still
                # counts it).
                died = next(d for c, d in deaths.get(e.member, ()) if c == e.t)
                close(e.member, died, "crash")
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
    if not first_holder and any(e.kind in _PROCESSING for e in history):
        # A processing history without delivery events: lost is judged by "finished".
        expected = defaultdict(set)
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


def _check_outputs(history: list[Event], report: HistoryReport) -> None:
    """The output rules: each input's read_committed output exactly once below the
    group's committed offset, none of an aborted transaction."""
    aborted = {e.detail for e in history if e.kind == "txn_aborted" and e.detail}
    seen: dict[tuple[Partition, int], Event] = {}
    for e in history:
        if e.kind != "output":
            continue
        report.outputs_checked += 1
        if e.detail and e.detail in aborted:
            report.aborted_outputs.append(
                Violation(
                    "aborted output",
                    e.member,
                    e.t,
                    f"output of {list(e.spans)} written by aborted transaction {e.detail!r}",
                )
            )
        for topic, p, first, last in e.spans:
            for o in range(first, last + 1):
                prior = seen.setdefault(((topic, p), o), e)
                if prior is not e:
                    report.duplicate_outputs.append(
                        Violation(
                            "duplicate output",
                            e.member,
                            e.t,
                            f"{topic}[{p}]@{o} output again (transaction {e.detail!r}; "
                            f"first in {prior.detail!r})",
                        )
                    )
    for (topic, p), end in sorted(_committed_ends(history).items()):
        for o in range(end):
            if ((topic, p), o) not in seen:
                report.missing_outputs.append((topic, p, o))


def _committed_ends(history: list[Event]) -> dict[Partition, int]:
    """Per input partition, the group's committed offset: the broker's last answer, or
    else the highest offset a member's commit was accepted at."""
    broker: dict[Partition, int] = {}
    members: dict[Partition, int] = {}
    for e in history:
        if e.kind == "broker_committed":
            for topic, p, offset in e.offsets:
                broker[(topic, p)] = offset
        elif e.kind == "committed":
            for topic, p, offset in e.offsets:
                members[(topic, p)] = max(offset, members.get((topic, p), 0))
    return broker or members


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


# -- processing ----------------------------------------------------------------------------

_PROCESSING = frozenset({"started", "finished", "abandoned"})
#: Events a member writes about itself: the first one after a freeze shows it awake.
_SELF_WRITTEN = _PROCESSING | {
    "assigned",
    "revoke_started",
    "revoke_ended",
    "lost",
    "delivered",
    "committed",
    "leaving",
}


@dataclass
class _Attempt:
    """One handler attempt on one record, from its start to how it ended."""

    member: str
    part: Partition
    offset: int
    key: str | None
    start: float
    end: float = float("inf")
    #: "finished", "abandoned", or what cut it: "crash", "frozen", "open".
    outcome: str = "open"
    hold: _Window | None = None
    #: Started before its member was frozen and ended after it woke: the handler's
    #: tail, run on waking before the member could learn it had been fenced.
    tail: bool = False


def _expected(
    history: list[Event], produced: Mapping[TopicPartition, int] | None
) -> set[tuple[Partition, int]]:
    out: set[tuple[Partition, int]] = set()
    if produced:
        for tp, end in produced.items():
            out.update(((tp.topic, tp.partition), o) for o in range(end))
    for e in history:
        if e.kind == "produced":
            for topic, p, first, last in e.spans:
                out.update(((topic, p), o) for o in range(first, last + 1))
    return out


def _attempts(
    history: list[Event],
) -> tuple[list[_Attempt], dict[tuple[Partition, int], list[tuple[float, str]]]]:
    """Every attempt (with its end), and per record the finishes (time, member) in order.

    An attempt never ended by its member ends where the member stopped running: where
    it died (see :func:`_deaths`), or its freeze if it never woke; else it is still
    open at the end of the history.
    """
    attempts: list[_Attempt] = []
    finishes: dict[tuple[Partition, int], list[tuple[float, str]]] = defaultdict(list)
    running: dict[tuple[str, Partition, int], list[_Attempt]] = defaultdict(list)
    for e in history:
        if e.kind not in _PROCESSING:
            continue
        for topic, p, first, last in e.spans:
            for o in range(first, last + 1):
                slot = (e.member, (topic, p), o)
                if e.kind == "started":
                    a = _Attempt(e.member, (topic, p), o, e.key, e.t)
                    attempts.append(a)
                    running[slot].append(a)
                    continue
                if running[slot]:
                    a = running[slot].pop(0)
                    a.end, a.outcome = e.t, e.kind
                if e.kind == "finished":
                    finishes[((topic, p), o)].append((e.t, e.member))
    activity = _Activity(history)
    for a in attempts:
        if a.outcome != "open":
            continue
        died = activity.died(a.member, a.start)
        if died is not None:
            a.end, a.outcome = died, "crash"
            continue
        frozen = next((t for t in activity.freezes.get(a.member, ()) if t >= a.start), None)
        if frozen is not None and activity.woke(a.member, frozen) is None:
            a.end, a.outcome = frozen, "frozen"
    return attempts, finishes


class _Activity:
    """When each member was seen acting on its own, when it was frozen and when it died:
    the index the processing rules use to tell a stopped process from a running one."""

    def __init__(self, history: list[Event]) -> None:
        self._acts: dict[str, list[float]] = defaultdict(list)
        self.freezes: dict[str, list[float]] = defaultdict(list)
        for e in history:
            if e.kind in _SELF_WRITTEN:
                self._acts[e.member].append(e.t)
            elif e.kind == "frozen":
                self.freezes[e.member].append(e.t)
        #: Per member, (crash stamp, instant of death) in time order.
        self.deaths: dict[str, list[tuple[float, float]]] = _deaths(history)

    def woke(self, member: str, after: float) -> float | None:
        """When ``member`` was next seen acting on its own after ``after`` (None: never)."""
        acts = self._acts.get(member, [])
        i = bisect.bisect_right(acts, after)
        return acts[i] if i < len(acts) else None

    def died(self, member: str, t: float) -> float | None:
        """When the process ``member`` was running at ``t`` died (None: it did not)."""
        return next((death for _, death in self.deaths.get(member, ()) if death >= t), None)

    def running_pieces(self, a: _Attempt) -> list[tuple[float, float]]:
        """The parts of an attempt during which its member's process was running: a
        freeze (SIGSTOP) cuts it until the member is next seen acting; a handler's tail
        after waking is not counted (see :func:`_check_processing`)."""
        pieces: list[tuple[float, float]] = []
        start = a.start
        for frozen in self.freezes.get(a.member, ()):
            if not start < frozen < a.end:
                continue
            pieces.append((start, frozen))
            if a.tail:
                return pieces
            woke = self.woke(a.member, frozen)
            if woke is None or woke >= a.end:
                return pieces
            start = woke
        pieces.append((start, a.end))
        return pieces


def _check_processing(
    history: list[Event],
    windows: Mapping[Partition, list[_Window]],
    report: HistoryReport,
    expected: set[tuple[Partition, int]],
    ordering: Ordering,
    metadata_kept: bool = True,
) -> None:
    attempts, finishes = _attempts(history)
    activity = _Activity(history)
    for a in attempts:
        a.hold = _held(windows.get(a.part, ()), a.member, a.start)
        a.tail = a.outcome in ("finished", "abandoned") and any(
            a.start < f < a.end for f in activity.freezes.get(a.member, ())
        )
    report.processing_starts = len(attempts)
    report.records_finished = len(finishes)
    report.finished_after_wake = sum(1 for a in attempts if a.tail and a.outcome == "finished")
    report.records_checked = max(report.records_checked, len(expected))
    _check_processing_owned(attempts, windows, report)
    _check_processing_overlaps(activity, attempts, report)
    if ordering != "unordered":
        _check_order(attempts, ordering, report)
    _check_commits_cover_finished(history, attempts, finishes, expected, report)
    _check_reprocessing(history, attempts, finishes, report, metadata_kept)
    _count_crashes(history, attempts, finishes, report)
    report.unfinished = sorted((t, p, o) for (t, p), o in expected if ((t, p), o) not in finishes)


def _check_processing_owned(
    attempts: list[_Attempt], windows: Mapping[Partition, list[_Window]], report: HistoryReport
) -> None:
    """A record is started, or finished, only while its member holds the partition.

    One exception: a handler's tail after a freeze.  A member stopped (SIGSTOP) with a
    handler awaiting I/O resumes that handler the instant it wakes, before any answer
    from the broker can tell it that it was fenced; the record then finishes on the old
    owner as well as on the new one (at least once).  Such finishes are counted
    (``finished_after_wake``), not reported as violations; starting a record after the
    fence is one.
    """
    for a in attempts:
        moments = [("started", a.start)]
        if a.outcome == "finished" and not a.tail:
            moments.append(("finished", a.end))
        topic, p = a.part
        ws = windows.get(a.part, ())
        for kind, t in moments:
            if _held(ws, a.member, t) is not None:
                continue
            before = [w for w in ws if w.member == a.member and w.end < t]
            cut = max(before, key=lambda w: w.end).cut if before else ""
            rule = {
                "revoke": "processed after revoke",
                "lost": "processed after lost",
                "fence": "processed after fence",
                "crash": "processed after crash",
            }.get(cut, "processed unowned")
            report.processed_unowned.append(
                Violation(rule, a.member, t, f"{kind} {topic}[{p}]@{a.offset}")
            )


def _check_processing_overlaps(
    activity: _Activity, attempts: list[_Attempt], report: HistoryReport
) -> None:
    """No two members run records of one partition at the same instant."""
    pieces: dict[Partition, dict[str, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for a in attempts:
        pieces[a.part][a.member] += activity.running_pieces(a)
    for (topic, p), by_member in sorted(pieces.items()):
        merged = {m: _merge(ps) for m, ps in by_member.items()}
        members = sorted(merged)
        for i, m1 in enumerate(members):
            for m2 in members[i + 1 :]:
                for start, end in _intersect(merged[m1], merged[m2]):
                    report.processing_overlaps.append(Overlap(topic, p, m1, m2, start, end))


def _merge(pieces: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(pieces):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _intersect(
    xs: list[tuple[float, float]], ys: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    i = j = 0
    while i < len(xs) and j < len(ys):
        start, end = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if end > start:
            out.append((start, end))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def _check_order(attempts: list[_Attempt], ordering: Ordering, report: HistoryReport) -> None:
    """Within one member's hold of a partition, the records of one key (of the whole
    partition, for partition ordering; null keys form one key) start in offset order,
    and never two at once."""
    groups: dict[tuple[str, int, Partition, str | None], list[_Attempt]] = defaultdict(list)
    for a in attempts:
        key = a.key if ordering == "key" else None
        groups[(a.member, id(a.hold), a.part, key)].append(a)
    for (member, _, (topic, p), key), group in groups.items():
        what = f"key {key!r}" if ordering == "key" else "the partition"
        # Ends before starts at one instant: a record may start as its predecessor ends.
        moments = sorted(
            [(a.start, 1, a) for a in group] + [(a.end, 0, a) for a in group],
            key=lambda m: (m[0], m[1]),
        )
        running: list[_Attempt] = []
        highest = -1
        for t, is_start, a in moments:
            if not is_start:
                if a in running:
                    running.remove(a)
                continue
            if running:
                others = sorted(r.offset for r in running)
                report.order_violations.append(
                    Violation(
                        "order: two at once",
                        member,
                        t,
                        f"{topic}[{p}]@{a.offset} of {what} started while {others} ran",
                    )
                )
            if a.offset < highest:
                report.order_violations.append(
                    Violation(
                        "order: out of offset order",
                        member,
                        t,
                        f"{topic}[{p}]@{a.offset} of {what} started after @{highest}",
                    )
                )
            highest = max(highest, a.offset)
            running.append(a)


def _check_commits_cover_finished(
    history: list[Event],
    attempts: list[_Attempt],
    finishes: Mapping[tuple[Partition, int], list[tuple[float, str]]],
    expected: set[tuple[Partition, int]],
    report: HistoryReport,
) -> None:
    """A committed offset passes only finished records: every record below it that was
    produced or started was finished before the commit was sent (a member's commit) or
    seen (the broker's committed offset read from outside)."""
    known: dict[Partition, set[int]] = defaultdict(set)
    for part, o in expected:
        known[part].add(o)
    for a in attempts:
        known[a.part].add(a.offset)
    inf = float("inf")
    table: dict[Partition, tuple[list[int], list[float]]] = {}
    for part, offsets in known.items():
        ordered = sorted(offsets)
        prefix: list[float] = []
        worst = -inf
        for o in ordered:
            done = finishes.get((part, o))
            worst = max(worst, done[0][0] if done else inf)
            prefix.append(worst)
        table[part] = (ordered, prefix)
    for e in history:
        if e.kind not in ("committed", "broker_committed"):
            continue
        at = e.since if e.kind == "committed" and e.since is not None else e.t
        for topic, p, committed in e.offsets:
            ordered, prefix = table.get((topic, p), ([], []))
            below = bisect.bisect_left(ordered, committed)
            if below == 0 or prefix[below - 1] <= at:
                continue
            offset = next(
                o
                for o in ordered[:below]
                if not finishes.get(((topic, p), o)) or finishes[((topic, p), o)][0][0] > at
            )
            started = any(
                a.part == (topic, p) and a.offset == offset and a.start <= at for a in attempts
            )
            state = "in flight" if started else "not processed"
            who = "the broker showed" if e.kind == "broker_committed" else "committed"
            report.commits_past_unfinished.append(
                Violation(
                    "commit past unfinished",
                    e.member,
                    e.t,
                    f"{who} {topic}[{p}] at {committed} while @{offset} was {state}",
                )
            )


def _check_reprocessing(
    history: list[Event],
    attempts: list[_Attempt],
    finishes: Mapping[tuple[Partition, int], list[tuple[float, str]]],
    report: HistoryReport,
    metadata_kept: bool = True,
) -> None:
    """A record is started again only if it was not finished - or its finish was never
    committed (the finisher crashed or lost the partition first).  A commit carries a
    finished record when its offset is past it, or when its metadata lists it (the
    processor's finished-beyond runs, :mod:`aiogroup.processing.offset_metadata`; runs
    dropped to bound the metadata's size carry nothing, and those records may be redone)."""
    # (member, partition) -> (sent, acknowledged, committed offset, metadata)
    commits: dict[tuple[str, Partition], list[tuple[float, float, int, str]]] = defaultdict(list)
    #: partition -> (time seen, offset) of the group's committed offset, read from outside
    seen: dict[Partition, list[tuple[float, int]]] = defaultdict(list)
    for e in history:
        if e.kind == "committed":
            md = {(t, p): m for t, p, m in e.metadata}
            for topic, p, offset in e.offsets:
                commits[(e.member, (topic, p))].append(
                    (e.since if e.since is not None else e.t, e.t, offset, md.get((topic, p), ""))
                )
        elif e.kind == "broker_committed":
            for topic, p, offset in e.offsets:
                seen[(topic, p)].append((e.t, offset))
    by_record: dict[tuple[Partition, int], list[_Attempt]] = defaultdict(list)
    for a in attempts:
        by_record[(a.part, a.offset)].append(a)
    for record, tries in by_record.items():
        (topic, p), offset = record
        owner = (tries[0].member, id(tries[0].hold))
        for a in tries[1:]:
            if (a.member, id(a.hold)) == owner:
                report.retries += 1
            else:
                owner = (a.member, id(a.hold))
                report.reprocessed += 1
            passed = next((t for t, c in seen.get((topic, p), ()) if c > offset), None)
            if passed is not None and passed < a.start:
                report.disallowed_reprocessing.append(
                    Violation(
                        "reprocessed a committed record",
                        a.member,
                        a.start,
                        f"{topic}[{p}]@{offset}: the broker showed the group's offset past "
                        f"it at t={passed:.3f}",
                    )
                )
                continue
            for done, finisher in finishes.get(record, ()):
                if done >= a.start:
                    break
                same_owner = finisher == a.member and a.hold is not None and a.hold.start <= done
                carried = any(
                    sent >= done
                    and acked <= a.start
                    and _carries(committed, md if metadata_kept else "", offset)
                    for sent, acked, committed, md in commits.get((finisher, (topic, p)), ())
                )
                if same_owner or carried:
                    why = "by its owner" if same_owner else f"and {finisher} committed it"
                    report.disallowed_reprocessing.append(
                        Violation(
                            "reprocessed a finished record",
                            a.member,
                            a.start,
                            f"{topic}[{p}]@{offset} finished at t={done:.3f} {why}",
                        )
                    )
                    break


def _carries(committed: int, metadata: str, offset: int) -> bool:
    """Whether a commit at ``committed`` with ``metadata`` marks ``offset`` finished."""
    if offset < committed:
        return True
    if not metadata:
        return False
    from aiogroup.processing.offset_metadata import decode

    return any(first <= offset < end for first, end in decode(committed, metadata))


def _count_crashes(
    history: list[Event],
    attempts: list[_Attempt],
    finishes: Mapping[tuple[Partition, int], list[tuple[float, str]]],
    report: HistoryReport,
) -> None:
    """What each kill -9 left to redo: records in flight, and records finished after
    the member's last commit of their partition was sent - as of the instant it died
    (its last act after the crash's stamp, see :func:`_deaths`)."""
    for member, deaths in _deaths(history).items():
        for _, died in deaths:
            report.in_flight_at_crash += sum(
                1
                for a in attempts
                if a.member == member and a.outcome == "crash" and a.start <= died == a.end
            )
            last_sent: dict[Partition, float] = {}
            for c in history:
                if c.kind == "committed" and c.member == member and c.t <= died:
                    for topic, p, _ in c.offsets:
                        last_sent[(topic, p)] = c.since if c.since is not None else c.t
            for (part, _o), done in finishes.items():
                if any(m == member and last_sent.get(part, -1.0) < t <= died for t, m in done):
                    report.finished_uncommitted_at_crash += 1
