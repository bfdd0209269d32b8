"""Consumer metrics and health: counters the fetcher and coordinator feed, snapshots for users.

One ``ConsumerMetrics`` per ``GroupConsumer``.  The fetcher and the coordinator each
call it from one place per concern (so the hooks stay one line each):

* ``_fetch/fetcher.py`` ``Fetcher._fetch``: the Fetch request goes through
  :meth:`timed_fetch`;
* the coordination routines (``_coordination/routine.py``): group requests go through
  :meth:`timed_group_request`;
* each routine's performers report a rebalance's start and end and lost partitions in
  protocol-neutral words (:meth:`rebalance_started`, :meth:`rebalance_completed`,
  :meth:`partitions_were_lost`): the classic routine from JoinGroup to the assignment,
  the consumer-protocol (KIP-848) routine from a reconciliation's first callback to the
  end of its ``on_partitions_assigned`` - so this module imports no machine's actions;
* ``consumer.py``: records handed to the application are counted by :meth:`delivered`.

Everything else (lag, member state, poll age) is read at snapshot time from the
state objects, so nothing is stored twice.

Lag is the partition's **high watermark** (from the last Fetch response) minus the
position, never ``end_offsets()``: a Kafka broker's ListOffsets(latest) is the high
watermark, but the embedded Tansu broker answers with the last batch's base offset,
so lag computed from it goes negative.

Why a broker outage is detected here: the consumer's own requests are the only
probe it has.  When no request to any broker has succeeded for a session timeout,
the member is as good as evicted, so this module logs one ERROR on the
``aiogroup.health`` logger (and an INFO once requests succeed again), and
``health()`` reports ``broker_reachable=False``.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Protocol, TypeVar

from aiogroup.structs import TopicPartition

__all__ = [
    "ConsumerMetrics",
    "Health",
    "LatencyStats",
    "MemberView",
    "MetricsSnapshot",
    "PartitionMetrics",
    "ShareMetrics",
    "assess_health",
    "partition_metrics",
    "snapshot",
]

health_log = logging.getLogger("aiogroup.health")

T = TypeVar("T")

#: Requests a broker may hold for up to the rebalance timeout: not a sign of an outage.
_HELD_BY_BROKER = frozenset({"JoinGroup", "SyncGroup"})

#: Window over which records/s and bytes/s are computed.
RATE_WINDOW_S = 30.0
#: One rate-window entry covers the deliveries of up to this many seconds.
RATE_BUCKET_S = 1.0


@dataclass
class LatencyStats:
    """Count, mean, max and last of a latency, in milliseconds."""

    count: int = 0
    total_ms: float = 0.0
    max_ms: float = 0.0
    last_ms: float | None = None
    errors: int = 0

    def add(self, ms: float) -> None:
        self.count += 1
        self.total_ms += ms
        self.max_ms = max(self.max_ms, ms)
        self.last_ms = ms

    @property
    def avg_ms(self) -> float | None:
        return self.total_ms / self.count if self.count else None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "avg_ms": self.avg_ms}


@dataclass(frozen=True)
class PartitionMetrics:
    """One assigned partition as of the snapshot."""

    position: int | None
    highwater: int | None
    #: highwater - position; None until both are known (the first fetch).
    lag: int | None
    #: Wall-clock ms of the last Fetch response carrying this partition.
    last_fetch_timestamp_ms: int | None


@dataclass(frozen=True)
class MetricsSnapshot:
    """What ``GroupConsumer.metrics()`` returns; ``as_dict()`` is JSON-ready."""

    records_consumed: int
    bytes_consumed: int
    records_per_second: float
    bytes_per_second: float
    fetch_latency: LatencyStats
    heartbeat_latency: LatencyStats
    commit_latency: LatencyStats
    #: Completed rebalances (first join included) and their durations.
    rebalances: int
    rebalance_in_progress: bool
    last_rebalance_seconds: float | None
    total_rebalance_seconds: float
    partitions_lost: int
    seconds_since_last_heartbeat: float | None
    seconds_since_last_poll: float | None
    member_state: str
    member_id: str | None
    generation: int | None
    #: Latency of every group request by API (FindCoordinator, JoinGroup, SyncGroup, ...).
    group_requests: dict[str, LatencyStats] = field(default_factory=dict)
    partitions: dict[TopicPartition, PartitionMetrics] = field(default_factory=dict)
    #: ``Processor.metrics()`` of the processor running on this consumer (None: none).
    processing: dict[str, Any] | None = None

    @property
    def total_lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions.values())

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            if isinstance(value, LatencyStats):
                out[key] = value.as_dict()
            elif key == "group_requests":
                out[key] = {api: stats.as_dict() for api, stats in value.items()}
            elif key == "partitions":
                out[key] = {f"{tp.topic}-{tp.partition}": asdict(p) for tp, p in value.items()}
            else:
                out[key] = value
        out["total_lag"] = self.total_lag
        return out


@dataclass(frozen=True)
class Health:
    """Readiness and liveness, for a service's probes.

    ``live`` is False when the consumer cannot recover by itself (stopped, a fatal
    group error, or the application stopped polling for ``max_poll_interval_ms``);
    ``ready`` additionally needs the broker reachable and, with group management,
    the member joined (an assignment received and no rebalance running).
    """

    live: bool
    ready: bool
    started: bool
    joined: bool
    broker_reachable: bool
    member_state: str
    seconds_since_last_heartbeat: float | None
    seconds_since_last_poll: float | None
    seconds_since_broker_response: float | None
    last_error: str | None
    reasons: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["reasons"] = list(self.reasons)
        return out


def _api_name(request: Any) -> str:
    name = type(request).__name__
    return name.removesuffix("Request").split("_")[0]


class ConsumerMetrics:
    """Counters of one consumer; fed by one-line hooks, read by ``snapshot``-style helpers."""

    def __init__(self, session_timeout_s: float = 10.0) -> None:
        self.session_timeout_s = session_timeout_s
        self.created = time.monotonic()
        self.records_consumed = 0
        self.bytes_consumed = 0
        self._deliveries: deque[tuple[float, int, int]] = deque()
        self.fetch_latency = LatencyStats()
        self.heartbeat_latency = LatencyStats()
        self.commit_latency = LatencyStats()
        self.request_latency: dict[str, LatencyStats] = {}
        self.rebalances = 0
        self.rebalance_started_at: float | None = None
        self.last_rebalance_s: float | None = None
        self.total_rebalance_s = 0.0
        self.partitions_lost = 0
        self.last_heartbeat_ok: float | None = None
        self.last_broker_ok: float | None = None
        self.last_broker_error: str | None = None
        self.partition_fetch_ms: dict[TopicPartition, int] = {}
        self._unreachable_logged = False
        self._failed_since_ok = False
        #: token -> (API, start) of requests awaiting an answer.
        self._outstanding: dict[int, tuple[str, float]] = {}
        self._next_token = 0
        #: Set by a running ``Processor``: its ``metrics()`` (aiogroup.processing).
        self.processing: Callable[[], dict[str, Any]] | None = None

    # -- hooks --------------------------------------------------------------------------

    def delivered(self, records: int, nbytes: int) -> None:
        """Records handed to the application (getone/getmany/getmany_arrow/async for).

        The rate window keeps one entry per second at most, not one per call: a
        getone() per record at a few hundred thousand records a second used to keep
        that many entries per second of the window (30 s of them), and sum them all
        at every ``rates()``.  An entry counts from the start of its second, so the
        window is ``RATE_WINDOW_S`` give or take one second.
        """
        if not records:
            return
        now = time.monotonic()
        self.records_consumed += records
        self.bytes_consumed += nbytes
        deliveries = self._deliveries
        if deliveries and now - deliveries[-1][0] < RATE_BUCKET_S:
            since, n, b = deliveries[-1]
            deliveries[-1] = (since, n + records, b + nbytes)
            return
        deliveries.append((now, records, nbytes))
        self._prune(now)

    async def timed_fetch(self, call: Awaitable[T], partitions: Iterable[TopicPartition]) -> T:
        """Await a Fetch request, recording its latency or failure."""
        started = time.monotonic()
        token = self._outstanding_start("Fetch", started)
        try:
            response = await call
        except Exception as exc:
            self.fetch_latency.errors += 1
            self._broker_failed(exc)
            raise
        finally:
            self._outstanding.pop(token, None)
        now = time.monotonic()
        self.fetch_latency.add((now - started) * 1000)
        self._broker_ok(now)
        wall_ms = int(time.time() * 1000)
        for tp in partitions:
            self.partition_fetch_ms[tp] = wall_ms
        return response

    async def timed_group_request(self, request: Any, call: Awaitable[T]) -> T:
        """Await a group request (coordinator lookup, join, heartbeat, commit, ...)."""
        api = _api_name(request)
        stats = self.request_latency.setdefault(api, LatencyStats())
        started = time.monotonic()
        token = self._outstanding_start(api, started)
        try:
            response = await call
        except Exception as exc:
            stats.errors += 1
            if api == "Heartbeat":
                self.heartbeat_latency.errors += 1
            elif api == "OffsetCommit":
                self.commit_latency.errors += 1
            self._broker_failed(exc)
            raise
        finally:
            self._outstanding.pop(token, None)
        now = time.monotonic()
        ms = (now - started) * 1000
        stats.add(ms)
        self._broker_ok(now)
        if api == "Heartbeat":
            self.heartbeat_latency.add(ms)
            if getattr(response, "error_code", 0) == 0:
                self.last_heartbeat_ok = now
        elif api == "OffsetCommit":
            self.commit_latency.add(ms)
        return response

    def rebalance_started(self) -> None:
        """A rebalance began (a JoinGroup, or a KIP-848 reconciliation); a second start
        before it completes is the same rebalance."""
        if self.rebalance_started_at is None:
            self.rebalance_started_at = time.monotonic()

    def rebalance_completed(self) -> None:
        """The member holds its new assignment: one rebalance counted and timed."""
        now = time.monotonic()
        if self.rebalance_started_at is not None:
            took = now - self.rebalance_started_at
            self.rebalance_started_at = None
            self.rebalances += 1
            self.last_rebalance_s = took
            self.total_rebalance_s += took
        self.last_heartbeat_ok = self.last_heartbeat_ok or now

    def partitions_were_lost(self, count: int) -> None:
        """Partitions lost, not revoked (the membership was gone)."""
        self.partitions_lost += count

    # -- derived values -----------------------------------------------------------------

    def rates(self) -> tuple[float, float]:
        """(records/s, bytes/s) over the last RATE_WINDOW_S seconds."""
        now = time.monotonic()
        self._prune(now)
        if not self._deliveries:
            return 0.0, 0.0
        span = max(min(RATE_WINDOW_S, now - self.created), 1e-3)
        records = sum(r for _, r, _ in self._deliveries)
        nbytes = sum(b for _, _, b in self._deliveries)
        return records / span, nbytes / span

    def seconds_since_heartbeat(self) -> float | None:
        if self.last_heartbeat_ok is None:
            return None
        return time.monotonic() - self.last_heartbeat_ok

    def seconds_since_broker_response(self) -> float | None:
        if self.last_broker_ok is None:
            return None
        return time.monotonic() - self.last_broker_ok

    def broker_reachable(self) -> bool:
        """False once no request has succeeded for a session timeout while some did not.

        "Did not" is a failure since the last success, or a request outstanding for
        longer than the session timeout (a silent network partition: requests hang
        until request_timeout_ms, longer than the session).  JoinGroup and SyncGroup
        are left out of the second rule, as a broker may hold them legitimately for
        up to the rebalance timeout.  A consumer that sends nothing (group-less,
        nothing assigned) has no evidence either way and counts as reachable.
        """
        now = time.monotonic()
        last = self.last_broker_ok if self.last_broker_ok is not None else self.created
        if now - last < self.session_timeout_s:
            return True
        if self._failed_since_ok:
            return False
        return not any(
            now - started > self.session_timeout_s
            for api, started in self._outstanding.values()
            if api not in _HELD_BY_BROKER
        )

    def check_broker(self) -> None:
        """Called at every poll: logs the outage even while requests hang rather than fail."""
        if not self._unreachable_logged and not self.broker_reachable():
            self._broker_failed(None)

    # -- internals ----------------------------------------------------------------------

    def _prune(self, now: float) -> None:
        while self._deliveries and now - self._deliveries[0][0] > RATE_WINDOW_S:
            self._deliveries.popleft()

    def _outstanding_start(self, api: str, started: float) -> int:
        self._next_token += 1
        self._outstanding[self._next_token] = (api, started)
        return self._next_token

    def _broker_ok(self, now: float) -> None:
        self.last_broker_ok = now
        self._failed_since_ok = False
        if self._unreachable_logged:
            self._unreachable_logged = False
            health_log.info("broker reachable again")

    def _broker_failed(self, exc: BaseException | None) -> None:
        if exc is not None:
            self.last_broker_error = repr(exc)
            self._failed_since_ok = True
        if not self._unreachable_logged and not self.broker_reachable():
            self._unreachable_logged = True
            since = self.seconds_since_broker_response()
            health_log.error(
                "no request to the Kafka cluster has succeeded for %s (session timeout "
                "%.1fs): the broker looks unreachable (a group member whose session "
                "lapses gives up its partitions with on_partitions_lost); last error: %s",
                "ever" if since is None else f"{since:.1f}s",
                self.session_timeout_s,
                self.last_broker_error,
            )


# -- snapshots and health, from what the consumer gathered at one moment -------------------


@dataclass(frozen=True)
class MemberView:
    """What ``GroupConsumer`` reads of itself for ``metrics()`` and ``health()``, in
    plain values: the judgement below is then a pure function, unit-tested alone."""

    #: The consumer's lifecycle: "new", "started", "stopping" or "stopped".
    lifecycle: str
    #: Subscribed (the group assigns the partitions), not assign()ed nor group-less.
    group_managed: bool
    #: In the group with an assignment installed (the routine's ``joined``).
    joined: bool
    #: The group member stopped for good on an unrecoverable error.
    failed: bool
    member_state: str
    member_id: str | None
    generation: int | None
    #: Seconds since the application last polled (0 while a poll waits; None: never).
    seconds_since_poll: float | None
    max_poll_interval_s: float
    pending_error: BaseException | None = None


class _PartitionState(Protocol):
    @property
    def tp(self) -> TopicPartition: ...
    @property
    def position(self) -> int | None: ...
    @property
    def highwater(self) -> int | None: ...


def partition_metrics(
    states: Iterable[_PartitionState], fetched_ms: dict[TopicPartition, int]
) -> dict[TopicPartition, PartitionMetrics]:
    """Each assigned partition's position, high watermark, lag and last fetch time."""
    out: dict[TopicPartition, PartitionMetrics] = {}
    for st in states:
        lag = None
        if st.highwater is not None and st.position is not None:
            lag = max(0, st.highwater - st.position)
        out[st.tp] = PartitionMetrics(st.position, st.highwater, lag, fetched_ms.get(st.tp))
    return out


def snapshot(
    m: ConsumerMetrics,
    view: MemberView,
    partitions: dict[TopicPartition, PartitionMetrics],
) -> MetricsSnapshot:
    """``GroupConsumer.metrics()``: the counters, copied, with the member's view."""
    records_rate, bytes_rate = m.rates()
    return MetricsSnapshot(
        records_consumed=m.records_consumed,
        bytes_consumed=m.bytes_consumed,
        records_per_second=records_rate,
        bytes_per_second=bytes_rate,
        fetch_latency=replace(m.fetch_latency),
        heartbeat_latency=replace(m.heartbeat_latency),
        commit_latency=replace(m.commit_latency),
        rebalances=m.rebalances,
        rebalance_in_progress=m.rebalance_started_at is not None,
        last_rebalance_seconds=m.last_rebalance_s,
        total_rebalance_seconds=m.total_rebalance_s,
        partitions_lost=m.partitions_lost,
        seconds_since_last_heartbeat=m.seconds_since_heartbeat(),
        seconds_since_last_poll=view.seconds_since_poll,
        member_state=view.member_state,
        member_id=view.member_id,
        generation=view.generation,
        group_requests={api: replace(st) for api, st in m.request_latency.items()},
        partitions=partitions,
        processing=None if m.processing is None else m.processing(),
    )


def assess_health(m: ConsumerMetrics, view: MemberView) -> Health:
    """``GroupConsumer.health()``: live, ready, and the reasons when not.

    Live: started, not failed, and (subscribed) polled within max_poll_interval - a
    poll waiting for records is polling.  Ready: live, a broker answered within the
    session timeout, and (subscribed) joined with an assignment.
    """
    started = view.lifecycle == "started"
    reachable = m.broker_reachable()
    poll_age = view.seconds_since_poll
    joined = view.group_managed and view.joined
    reasons: list[str] = []
    live = started
    if not started:
        reasons.append(f"consumer is {view.lifecycle}")
    if view.failed:
        live = False
        reasons.append("fatal group error")
    if view.group_managed and poll_age is not None and poll_age > view.max_poll_interval_s:
        live = False
        reasons.append(f"no poll for {poll_age:.1f}s (> max_poll_interval_ms)")
    if not reachable:
        reasons.append("no broker request succeeded within session_timeout_ms")
    if view.group_managed and not joined:
        reasons.append(f"not joined (member state {view.member_state})")
    ready = live and reachable and (joined or not view.group_managed)
    pending = view.pending_error
    return Health(
        live=live,
        ready=ready,
        started=started,
        joined=joined,
        broker_reachable=reachable,
        member_state=view.member_state,
        seconds_since_last_heartbeat=m.seconds_since_heartbeat(),
        seconds_since_last_poll=poll_age,
        seconds_since_broker_response=m.seconds_since_broker_response(),
        last_error=repr(pending) if pending is not None else m.last_broker_error,
        reasons=tuple(reasons),
    )


class ShareMetrics(ConsumerMetrics):
    """A share consumer's counters (KIP-932): what it acquired, how it acknowledged.

    On top of :class:`ConsumerMetrics` (deliveries, group-request latency, heartbeat
    age): records acquired, acknowledgements answered without error by type (accept,
    release, reject, renew - a renewal is a lock extended), acknowledgements that
    failed or got no answer, and how often each delivery count was seen - counts
    above 1 are redeliveries (a release, an expired lock, a consumer gone).
    """

    def __init__(self, session_timeout_s: float = 10.0) -> None:
        super().__init__(session_timeout_s)
        self.acquired = 0
        self.acknowledged: dict[str, int] = {}
        self.acknowledge_failures = 0
        self.lock_renewals = 0
        self.delivery_counts: dict[int, int] = {}

    def record_acquired(self, delivery_count: int, count: int = 1) -> None:
        """``count`` records acquired with ``delivery_count`` (a fetch's range: one call)."""
        self.acquired += count
        self.delivery_counts[delivery_count] = self.delivery_counts.get(delivery_count, 0) + count

    def record_acknowledged(self, ack_type: str, count: int, ok: bool) -> None:
        if not ok:
            self.acknowledge_failures += count
            return
        self.acknowledged[ack_type] = self.acknowledged.get(ack_type, 0) + count
        if ack_type == "renew":
            self.lock_renewals += count

    def share_snapshot(self) -> dict[str, Any]:
        """The share counters as plain data (for logs, exporters, tests)."""
        return {
            "records_acquired": self.acquired,
            "records_delivered": self.records_consumed,
            "acknowledged": dict(self.acknowledged),
            "acknowledge_failures": self.acknowledge_failures,
            "lock_renewals": self.lock_renewals,
            "delivery_count_histogram": dict(sorted(self.delivery_counts.items())),
        }
