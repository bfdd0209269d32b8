"""``ShareConsumer``: a share-group (KIP-932, "queues for Kafka") consumer on the caller's loop.

Why: in a share group consumers read the same partitions cooperatively, each record
acquired by one consumer under a time-limited lock and acknowledged one by one, so a
pool of asyncio workers can outgrow the partition count and a poison record does not
block its partition.  This facade checks input and wires three parts: the membership
routine (:mod:`aiogroup._coordination.share_routine`, ShareGroupHeartbeat, driven by
the pure :mod:`aiogroup._membership.share_group`), the share fetcher
(:mod:`aiogroup._fetch.share_fetcher`, ShareFetch / ShareAcknowledge per leader) and
the acknowledgement tracker it holds.  The API follows ``GroupConsumer`` where the
concepts match: ``async for``, ``getmany``, ``getone``, ``commit``, ``stop``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import IncompatibleBrokerVersion, KafkaConnectionError

from aiogroup._coordination.share_routine import ShareGroupRoutine
from aiogroup._fetch.share_acknowledgements import NO_ANSWER, AckResult, InvalidAcknowledgement
from aiogroup._fetch.share_fetcher import ShareFetcher, ShareFetcherConfig, ShareHooks
from aiogroup._fetch.share_records import ShareRecord, delivery_counts, run_spans
from aiogroup._membership.codes import code_name
from aiogroup._protocol.share_types import AcknowledgeType, AcquireMode
from aiogroup._support.bootstrap_errors import explain_bootstrap_failure
from aiogroup._support.client_security import check_security_options
from aiogroup._support.timeouts import wait_for
from aiogroup.errors import (
    ConfigurationError,
    ConsumerStoppedError,
    IllegalStateError,
    KafkaError,
)
from aiogroup.metrics import ShareMetrics
from aiogroup.share.health import LeaderSession, ShareHealth, ShareMemberView, assess_share_health
from aiogroup.structs import TopicPartition

__all__ = [
    "AckResult",
    "AcknowledgeType",
    "InvalidAcknowledgement",
    "ShareConsumer",
    "ShareRecord",
]

log = logging.getLogger("aiogroup.share")

#: The share APIs a consumer needs, by key (ApiVersions lists them on a broker that
#: serves share groups).
SHARE_APIS = {76: "ShareGroupHeartbeat", 78: "ShareFetch", 79: "ShareAcknowledge"}

AckCallback = Callable[[dict[TopicPartition, list[AckResult]]], Awaitable[None] | None]


#: ``acquire_mode`` values (Java's ``share.acquire.mode``) and their wire code.
_ACQUIRE_MODES = {
    "record_limit": AcquireMode.RECORD_LIMIT,
    "batch_optimized": AcquireMode.BATCH_OPTIMIZED,
}


def _require_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ConfigurationError(f"{name} must be >= {minimum}, got {value}")
    return value


class ShareConsumer:
    """A member of one share group, reading ``topics``.

    ``acknowledgement_mode``: ``"implicit"`` (every record handed out is ACCEPTed at
    the next ``getmany``/``getone``/``async for`` step or ``commit``; ``acknowledge``
    may still RELEASE or REJECT one instead) or ``"explicit"`` (the application
    acknowledges each record; RENEW keeps a slow record's lock).  ``auto_renew``
    (explicit mode): a record still unacknowledged when its lock nears its end gets a
    RENEW, ``renew_margin_ms`` before it (default: a quarter of the lock, at least
    ``fetch_max_wait_ms`` + 250 ms).  ``max_poll_records``: at most this many records
    per call, and per ShareFetch (a strict limit where the broker serves ShareFetch
    v2, KIP-1206).  ``acquire_mode`` (Java's ``share.acquire.mode``): ``"record_limit"``
    (that strict limit, the default) or ``"batch_optimized"`` (Java's default: the
    broker rounds a fetch up to whole record batches - more records per fetch than
    ``max_poll_records``, buffered under their locks, for much less broker work per
    record wherever the strict limit would cut the producer's record batches: Kafka
    4.4 then tracks a cut batch's offsets one by one and sends it whole twice;
    measured, 2-3x the broker CPU a record, for Java's consumer alike, and none more
    where the batches divide ``max_poll_records`` - docs/benchmarks/share.md).
    ``acknowledgement_callback`` (sync or async) receives each batch
    of acknowledgement results, per partition.  ``recorder`` (a
    :class:`aiogroup.testing.share_checker.ShareRecorder`) with ``recorder_name``
    records every acquisition and acknowledgement for the history checker.  Security
    keywords (``security_protocol``, ``ssl_context``, ``sasl_mechanism``,
    ``sasl_plain_username``, ...) are GroupConsumer's.
    """

    def __init__(
        self,
        *topics: str,
        group_id: str,
        bootstrap_servers: str | list[str] = "localhost:9092",
        client_id: str = "aiogroup-share",
        acknowledgement_mode: str = "implicit",
        max_poll_records: int = 500,
        acquire_mode: str = "record_limit",
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 52_428_800,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        auto_renew: bool = False,
        renew_margin_ms: int | None = None,
        check_crcs: bool = True,
        key_deserializer: Callable[[bytes | None], Any] | None = None,
        value_deserializer: Callable[[bytes | None], Any] | None = None,
        acknowledgement_callback: AckCallback | None = None,
        client_rack: str | None = None,
        recorder: Any = None,
        recorder_name: str | None = None,
        **security: Any,
    ) -> None:
        if not isinstance(group_id, str) or not group_id:
            raise ConfigurationError("group_id must be a non-empty str: the share group's id")
        for t in topics:
            if not isinstance(t, str) or not t:
                raise ConfigurationError(f"topics must be non-empty str, got {t!r}")
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise ConfigurationError(
                "acknowledgement_mode must be 'implicit' or 'explicit', "
                f"got {acknowledgement_mode!r}"
            )
        explicit = acknowledgement_mode == "explicit"
        if auto_renew and not explicit:
            raise ConfigurationError(
                "auto_renew needs acknowledgement_mode='explicit': in implicit mode a "
                "record is accepted at the next poll, there is nothing to renew"
            )
        _require_int("max_poll_records", max_poll_records, 1)
        if acquire_mode not in _ACQUIRE_MODES:
            raise ConfigurationError(
                f"acquire_mode must be 'record_limit' or 'batch_optimized', got {acquire_mode!r}"
            )
        _require_int("fetch_max_wait_ms", fetch_max_wait_ms, 0)
        _require_int("request_timeout_ms", request_timeout_ms, 1)
        _require_int("retry_backoff_ms", retry_backoff_ms, 1)
        _require_int("retry_backoff_max_ms", retry_backoff_max_ms, retry_backoff_ms)
        if fetch_max_wait_ms >= request_timeout_ms:
            raise ConfigurationError("fetch_max_wait_ms must be less than request_timeout_ms")
        if renew_margin_ms is not None:
            _require_int("renew_margin_ms", renew_margin_ms, 1)
        #: Connection security (``security_protocol``, ``ssl_context``, ``sasl_*``: the
        #: same keywords as GroupConsumer and aiokafka), checked here.
        self._security = check_security_options("ShareConsumer", security)
        if recorder is not None and not recorder_name:
            raise ConfigurationError("recorder needs recorder_name (the consumer's name in it)")
        self._topics = frozenset(topics)
        self._group_id = group_id
        self._bootstrap = bootstrap_servers
        self._client_id = client_id
        self._request_timeout = request_timeout_ms / 1000
        self._retry_backoff = retry_backoff_ms / 1000
        self._retry_backoff_max = retry_backoff_max_ms / 1000
        self._rack = client_rack
        self._max_poll_records = max_poll_records
        self._explicit = explicit
        self._fetch_config = ShareFetcherConfig(
            group_id=group_id,
            explicit=explicit,
            max_poll_records=max_poll_records,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_min_bytes=fetch_min_bytes,
            fetch_max_bytes=fetch_max_bytes,
            retry_backoff=retry_backoff_ms / 1000,
            auto_renew=auto_renew,
            renew_margin=None if renew_margin_ms is None else renew_margin_ms / 1000,
            check_crcs=check_crcs,
            acquire_mode=_ACQUIRE_MODES[acquire_mode],
            key_deserializer=key_deserializer,
            value_deserializer=value_deserializer,
        )
        self._callback = acknowledgement_callback
        #: Internal listeners of every batch of acknowledgement results, called at once
        #: (a running ShareProcessor counts confirmed and failed acknowledgements here).
        self._result_listeners: list[Callable[[list[AckResult]], None]] = []
        #: Awaited by a graceful stop() before the close (a running ShareProcessor drains
        #: its handlers there, so the close carries their last acknowledgements).
        self._stop_hooks: list[Callable[[], Awaitable[None]]] = []
        self._recorder = recorder
        self._recorder_name = recorder_name or ""
        self.metrics = ShareMetrics()
        self._client: AIOKafkaClient | None = None
        self._fetcher: ShareFetcher | None = None
        self._routine: ShareGroupRoutine | None = None
        self._results: asyncio.Queue[list[AckResult]] = asyncio.Queue()
        self._callback_task: asyncio.Task[None] | None = None
        self._started = False
        self._closed = False

    def subscribe(self, *topics: str) -> None:
        """Read ``topics`` from now on (replacing the subscription); before ``start()``
        or while running - the coordinator learns of it with the next heartbeat, sent
        at once."""
        if not topics:
            raise ConfigurationError("subscribe() needs at least one topic")
        for t in topics:
            if not isinstance(t, str) or not t:
                raise ConfigurationError(f"topics must be non-empty str, got {t!r}")
        if self._closed:
            raise ConsumerStoppedError("the share consumer was stopped")
        self._topics = frozenset(topics)
        if self._routine is not None:
            self._routine.subscribe(self._topics)

    def subscription(self) -> frozenset[str]:
        return self._topics

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, check the broker serves share groups, join, and wait (bounded by
        ``request_timeout_ms``) for the first assignment; a fatal group error - a
        group id in use by a classic or consumer group - is raised here."""
        if self._closed:
            raise ConsumerStoppedError("the share consumer was stopped: make a new one")
        if self._started:
            raise IllegalStateError("ShareConsumer.start() called twice")
        if not self._topics:
            raise ConfigurationError("ShareConsumer needs at least one topic")
        self._started = True
        client = self._client = AIOKafkaClient(
            bootstrap_servers=self._bootstrap,
            client_id=self._client_id,
            request_timeout_ms=int(self._request_timeout * 1000),
            retry_backoff_ms=int(self._retry_backoff * 1000),
            **self._security,
        )
        try:
            try:
                await client.bootstrap()
            except KafkaConnectionError as exc:
                raise await explain_bootstrap_failure(self._bootstrap, self._security, exc) from exc
            await self._check_broker(client)
            hooks = ShareHooks(
                acquired=self._on_acquired,
                acknowledged=self._on_acknowledged,
                results=self._on_results,
                closing=self._on_closing,
            )
            fetcher = self._fetcher = ShareFetcher(client, self._fetch_config, hooks)
            routine = self._routine = ShareGroupRoutine(
                client,
                self._group_id,
                fetcher,
                rack_id=self._rack,
                retry_backoff=self._retry_backoff,
                retry_backoff_max=self._retry_backoff_max,
                metrics=self.metrics,
            )
            fetcher.set_member_id(lambda: routine.member_id)
            self._callback_task = asyncio.get_running_loop().create_task(
                self._run_callbacks(), name=f"aiogroup-share-callbacks-{self._group_id}"
            )
            await routine.start(self._topics)
            await self._wait_joined(routine, fetcher)
        except BaseException:
            await self._shutdown(graceful=False, timeout=0)
            raise

    async def _check_broker(self, client: AIOKafkaClient) -> None:
        node = client.get_random_node()
        if node is None:
            raise KafkaError("no broker known after bootstrap")
        conn = await client._get_conn(node)
        versions = getattr(conn, "_versions", None) or {}
        missing = [
            f"{name} (API key {key})" for key, name in SHARE_APIS.items() if key not in versions
        ]
        if versions and missing:
            raise IncompatibleBrokerVersion(
                f"the broker at {self._bootstrap} does not serve share groups (KIP-932): its "
                f"ApiVersions lists no {', '.join(missing)}; Apache Kafka 4.1+ does"
            )

    async def _wait_joined(self, routine: ShareGroupRoutine, fetcher: ShareFetcher) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._request_timeout
        while not routine.machine.joined:
            if routine.machine.failed:
                fetcher.raise_pending_error()
                raise KafkaError(f"share group {self._group_id!r}: membership failed")
            remaining = deadline - loop.time()
            if remaining <= 0:
                fetcher.raise_pending_error()
                raise KafkaError(
                    f"start(): share group {self._group_id!r} gave no assignment within "
                    f"{self._request_timeout:.0f}s (request_timeout_ms)"
                )
            changed = asyncio.ensure_future(routine.changed.wait())
            try:
                await asyncio.wait({changed}, timeout=remaining)
            finally:
                changed.cancel()

    async def stop(self, timeout: float | None = None) -> None:
        """Release every record not acknowledged, close the share sessions (epoch -1),
        leave the group; bounded by ``timeout`` (default ``request_timeout_ms``).
        A running ShareProcessor is stopped first (its drain, bounded by its
        ``drain_timeout_ms``, comes before ``timeout`` starts), so the close carries
        its last acknowledgements.  Safe to call twice."""
        await self._shutdown(
            graceful=True, timeout=self._request_timeout if timeout is None else timeout
        )

    async def _shutdown(self, *, graceful: bool, timeout: float) -> None:
        if self._closed:
            return
        if graceful and self._stop_hooks:
            for hook in list(self._stop_hooks):
                try:
                    await hook()
                except Exception:
                    log.exception("share group %s: a stop hook raised", self._group_id)
            if self._closed:
                return
        self._closed = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        fetcher, routine = self._fetcher, self._routine
        if fetcher is not None:
            fetcher.report_error(ConsumerStoppedError("the share consumer was stopped"), fatal=True)
            if graceful:
                await fetcher.close(max(0.0, deadline - loop.time()))
            await fetcher.abort()
        if routine is not None:
            if graceful:
                await routine.close(timeout=max(0.0, deadline - loop.time()))
            await routine.abort()
        if self._callback_task is not None:
            # Results of the last acknowledgements still reach the callback.
            self._results.put_nowait([])
            try:
                await wait_for(
                    asyncio.shield(self._callback_task), max(0.0, deadline - loop.time())
                )
            except (asyncio.TimeoutError, Exception):
                self._callback_task.cancel()
        if self._client is not None:
            await self._client.close()

    async def __aenter__(self) -> ShareConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- records -------------------------------------------------------------------------

    def _running(self) -> ShareFetcher:
        if self._closed:
            raise ConsumerStoppedError("the share consumer was stopped")
        if self._fetcher is None:
            raise IllegalStateError("ShareConsumer is not started: await start() first")
        return self._fetcher

    async def getmany(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ShareRecord]]:
        """Records handed out now, by partition; waits up to ``timeout_ms`` for some."""
        _require_int("timeout_ms", timeout_ms, 0)
        limit = (
            self._max_poll_records
            if max_records is None
            else _require_int("max_records", max_records, 1)
        )
        records = await self._poll(timeout_ms / 1000, limit)
        out: dict[TopicPartition, list[ShareRecord]] = {}
        # Records come in spans of one acquired run, so of one partition: a step per span.
        for i, j in run_spans(records):
            first = records[i]
            tp = TopicPartition(first[0], first[1])
            got = out.get(tp)
            if got is None:
                out[tp] = records[i:j]
            else:
                got += records[i:j]
        return out

    async def getone(self, timeout_ms: int | None = None) -> ShareRecord:
        """The next record; waits up to ``timeout_ms`` (None: until one comes or
        ``stop()``), then raises ``asyncio.TimeoutError``."""
        timeout = None if timeout_ms is None else _require_int("timeout_ms", timeout_ms, 0) / 1000
        records = await self._poll(timeout, 1)
        if not records:
            raise asyncio.TimeoutError(f"no share record within {timeout_ms} ms")
        return records[0]

    def __aiter__(self) -> AsyncIterator[ShareRecord]:
        return self

    async def __anext__(self) -> ShareRecord:
        try:
            return (await self._poll(None, 1))[0]
        except ConsumerStoppedError:
            raise StopAsyncIteration from None

    async def _poll(self, timeout: float | None, limit: int) -> list[ShareRecord]:
        fetcher = self._running()
        fetcher.polled()
        if fetcher.fatal_error is not None:
            # Every poll raises it, before any await: a loop that catches it and polls
            # again would never let the event loop run (GroupConsumer does the same).
            await asyncio.sleep(0)
        if not self._explicit and fetcher.tracker.accept_delivered():
            fetcher.acknowledged()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if self._closed:
                raise ConsumerStoppedError("the share consumer was stopped")
            fetcher.raise_pending_error()
            records = fetcher.take_records(limit)
            if records:
                self.metrics.delivered(len(records), 0)
                return records
            remaining = 3600.0 if deadline is None else deadline - loop.time()
            if remaining <= 0:
                return []
            await fetcher.wait_for_records(remaining)

    # -- acknowledgements ---------------------------------------------------------------

    def acknowledge(
        self, record: ShareRecord, type: AcknowledgeType | int = AcknowledgeType.ACCEPT
    ) -> None:
        """Acknowledge one record handed out by this consumer (sent with the next
        request to its leader, or by ``commit()``).  Raises
        :class:`~aiogroup.share.InvalidAcknowledgement` naming the problem: a record
        not from this consumer or from an ended session, a second acknowledgement,
        RENEW in implicit mode."""
        if not isinstance(record, ShareRecord):
            raise TypeError(f"acknowledge() takes a ShareRecord, got {type_name(record)}")
        fetcher = self._running()
        fetcher.tracker.acknowledge(record.acquisition, type)
        fetcher.acknowledged()

    async def commit(self, timeout_ms: int | None = None) -> dict[TopicPartition, list[AckResult]]:
        """Send the pending acknowledgements now (ShareAcknowledge per leader) and
        return how each ended, by partition (``AckResult.ok``; ``error_code``)."""
        fetcher = self._running()
        timeout = (
            self._request_timeout
            if timeout_ms is None
            else _require_int("timeout_ms", timeout_ms, 0) / 1000
        )
        results = await wait_for(fetcher.commit(), timeout)
        return _by_partition(results)

    def commit_async(self) -> asyncio.Task[dict[TopicPartition, list[AckResult]]]:
        """Start a commit and return its task (results also reach the callback)."""
        self._running()
        return asyncio.get_running_loop().create_task(self.commit())

    # -- hooks ---------------------------------------------------------------------------

    def _hold_fetching(self) -> None:
        """No ShareFetch until the application polls again (a ShareProcessor stopping
        while this consumer runs on: :meth:`ShareFetcher.hold_fetching`)."""
        if self._fetcher is not None:
            self._fetcher.hold_fetching()

    def _on_acquired(self, records: list[ShareRecord], sent: float, lock_ms: int) -> None:
        for delivery_count, n in delivery_counts(records).items():
            self.metrics.record_acquired(delivery_count, n)
        if self._recorder is not None:
            for record in records:
                self._recorder.acquired(
                    self._recorder_name,
                    record.topic,
                    record.partition,
                    record.offset,
                    record.delivery_count,
                    sent=sent,
                    lock_ms=lock_ms,
                )

    def _on_acknowledged(self, result: AckResult, sent: float) -> None:
        if not result.sent:
            return
        name = result.ack_type.name.lower()
        self.metrics.record_acknowledged(name, len(result.offsets), result.ok)
        if self._recorder is not None:
            outcome = (
                "ok"
                if result.ok
                else "unknown"
                if result.error_code == NO_ANSWER
                else code_name(result.error_code)
            )
            answered = time.monotonic()
            for offset in result.offsets:
                self._recorder.acknowledged(
                    self._recorder_name,
                    result.topic,
                    result.partition,
                    offset,
                    name,
                    sent=sent,
                    result=outcome,
                    answered=answered,
                )

    def _on_results(self, results: list[AckResult]) -> None:
        if self._callback is not None:
            # Only for a callback: its task woke on every ShareFetch answer otherwise,
            # a loop step between the answer and the next request (issue 28).
            self._results.put_nowait(results)
        for listener in list(self._result_listeners):
            try:
                listener(results)
            except Exception:
                log.exception("share group %s: a result listener raised", self._group_id)

    def _keep_locks(self, on: bool) -> None:
        """Renew the locks of the records handed out and not acknowledged (the
        ``auto_renew`` rule) from ``on=True`` until the matching ``on=False``: a
        ShareProcessor keeps the locks of the records it holds this way whether or not
        ``auto_renew`` is set.  The fetcher does it, so that its ShareFetch waits end
        before a renewal falls due.  In implicit mode there is nothing to renew (the
        next poll accepts what the last one handed out)."""
        fetcher = self._running()
        if self._explicit:
            fetcher.keep_locks(on)

    def _on_closing(self) -> None:
        if self._recorder is not None:
            self._recorder.add(self._recorder_name, "closed")

    async def _run_callbacks(self) -> None:
        while True:
            results = await self._results.get()
            if not results:
                if self._closed and self._results.empty():
                    return
                continue
            if self._callback is None:
                continue
            try:
                outcome = self._callback(_by_partition(results))
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                log.exception("share group %s: acknowledgement_callback raised", self._group_id)

    # -- processing ------------------------------------------------------------------------

    async def process(self, handler: Any, **options: Any) -> None:
        """``await ShareProcessor(self, handler, **options).run()``: see
        aiogroup.processing (docs/usage.md, "Processing on a share consumer")."""
        from aiogroup.processing import ShareProcessor

        await ShareProcessor(self, handler, **options).run()

    async def topics(self) -> set[str]:
        """The cluster's topic names (a Metadata request for all topics)."""
        if self._client is None:
            raise IllegalStateError("ShareConsumer is not started: await start() first")
        cluster = await self._client.fetch_all_metadata()
        return set(cluster.topics())

    def _client_settings(self) -> tuple[str | list[str], str, dict[str, Any]]:
        """(bootstrap servers, client id, security options): what a producer started
        on this consumer's behalf (the dead-letter producer) connects with."""
        return self._bootstrap, self._client_id, dict(self._security)

    # -- views ---------------------------------------------------------------------------

    def health(self) -> ShareHealth:
        """Readiness and liveness for probes: member state, the session (delivery gate),
        heartbeat and broker ages, each leader's share session, the records held under
        acquisition locks, the fatal error if any (docs/usage.md, "Metrics and health")."""
        return assess_share_health(self._view())

    def _view(self) -> ShareMemberView:
        """This consumer as health() reads it, at this moment."""
        routine, fetcher = self._routine, self._fetcher
        lifecycle = "stopped" if self._closed else "started" if self._started else "new"
        m = self.metrics
        valid_for = None
        leaders: tuple[LeaderSession, ...] = ()
        acquired = buffered = in_flight = 0
        fatal = None
        if fetcher is not None:
            until = fetcher._valid_until
            if until is not None and not self._closed:
                valid_for = until - asyncio.get_running_loop().time()
            leaders = tuple(
                LeaderSession(
                    node_id=node,
                    open=s.is_open,
                    epoch=s.epoch,
                    partitions=len(s.partitions),
                    request_in_flight=s.in_flight is not None,
                )
                for node, s in sorted(fetcher._sessions.items())
            )
            acquired = fetcher.tracker.held()
            buffered = len(fetcher._buffer)
            in_flight = fetcher.tracker.in_flight()
            fatal = fetcher.fatal_error
            if isinstance(fatal, ConsumerStoppedError) and self._closed:
                fatal = None  # stop() itself, not a failure
        if routine is not None:
            state = routine.machine.state_name
            member_id: str | None = routine.member_id
            epoch: int | None = routine.member_epoch
            joined = routine.machine.joined
        else:
            state, member_id, epoch, joined = lifecycle, None, None, False
        if self._closed:
            state, joined, valid_for = "stopped", False, None
        return ShareMemberView(
            lifecycle=lifecycle,
            member_state=state,
            member_id=member_id,
            member_epoch=epoch,
            joined=joined,
            session_valid_for_s=valid_for,
            seconds_since_last_heartbeat=m.seconds_since_heartbeat(),
            seconds_since_broker_response=m.seconds_since_broker_response(),
            broker_reachable=m.broker_reachable(),
            leaders=leaders,
            records_acquired=acquired,
            records_buffered=buffered,
            acknowledgements_in_flight=in_flight,
            fatal_error=fatal,
            last_broker_error=m.last_broker_error,
        )

    @property
    def acknowledgement_mode(self) -> str:
        """``"implicit"`` or ``"explicit"``, as given."""
        return "explicit" if self._explicit else "implicit"

    @property
    def max_poll_records(self) -> int:
        return self._max_poll_records

    @property
    def group_id(self) -> str:
        return self._group_id

    @property
    def member_id(self) -> str | None:
        return None if self._routine is None else self._routine.member_id

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this member reads now (shared with the group's other members)."""
        if self._routine is None:
            return frozenset()
        return frozenset(TopicPartition(t, p) for t, p in self._routine.machine.assignment())


def _by_partition(results: Iterable[AckResult]) -> dict[TopicPartition, list[AckResult]]:
    out: dict[TopicPartition, list[AckResult]] = {}
    for r in results:
        out.setdefault(TopicPartition(r.topic, r.partition), []).append(r)
    return out


def type_name(value: object) -> str:
    return type(value).__name__
