"""``GroupConsumer``: the public facade.

It wires the client, the state object, the fetcher and the coordinator together
and checks the application's input; it holds no protocol logic.  Method names,
arguments and return types follow aiokafka's ``AIOKafkaConsumer`` so that code
can move between the two by changing the import.
"""

from __future__ import annotations

import asyncio
import difflib
import logging
import time
import warnings
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from aiokafka.client import AIOKafkaClient
from aiokafka.cluster import ClusterMetadata
from aiokafka.errors import (
    ConsumerStoppedError,
    IllegalOperation,
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    UnknownTopicOrPartitionError,
)

from aiogroup._coordination.classic_routine import GroupCoordinator
from aiogroup._coordination.commit_outcome import positions_to_commit
from aiogroup._coordination.commit_request import check_owned, normalize_offsets
from aiogroup._coordination.consumer_protocol_routine import (
    CLASSIC_ONLY_OPTIONS,
    ConsumerGroupCoordinator,
    check_group_protocol_options,
)
from aiogroup._fetch import offset_lookups as _offsets
from aiogroup._fetch.delivery import record_bytes
from aiogroup._fetch.fetcher import Fetcher
from aiogroup._fetch.iteration import iterate
from aiogroup._state.subscription import (
    FetchStatus,
    PartitionState,
    SubscriptionState,
    SubscriptionType,
)
from aiogroup._support import lifecycle
from aiogroup._support.bootstrap_errors import explain_bootstrap_failure
from aiogroup._support.call_arguments import (
    check_partition,
    check_poll_limits,
    check_seek_offset,
    check_timestamps,
    check_topics_or_pattern,
    compile_pattern,
    topic_list,
)
from aiogroup._support.client_security import SECURITY_OPTION_DEFAULTS
from aiogroup._support.redaction import install_log_redaction
from aiogroup._support.timeouts import wait_for
from aiogroup.assignors import resolve_assignors
from aiogroup.config import ConsumerConfig, validate_topic_name, validate_topics
from aiogroup.errors import (
    ConfigurationError,
    KafkaError,
    is_authorization_error,
)
from aiogroup.group_metadata import ConsumerGroupMetadata, decide_group_metadata
from aiogroup.listeners import HookedListener, RebalanceHooks, as_async_listener, loop_bound
from aiogroup.metrics import (
    ConsumerMetrics,
    Health,
    MemberView,
    MetricsSnapshot,
    assess_health,
    partition_metrics,
    snapshot,
)
from aiogroup.structs import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    OffsetResetStrategy,
    TopicPartition,
)

if TYPE_CHECKING:
    import pyarrow

__all__ = ["GroupConsumer"]

log = logging.getLogger("aiogroup.consumer")

#: Options handed to aiokafka's client untouched (connection security), with
#: aiokafka's defaults: only values that differ from them are passed on.
_CLIENT_OPTION_DEFAULTS = SECURITY_OPTION_DEFAULTS
_CLIENT_OPTIONS = tuple(_CLIENT_OPTION_DEFAULTS)
#: Constructor parameters that are ConsumerConfig fields.
_CONFIG_OPTIONS = tuple(
    name for name in ConsumerConfig.__dataclass_fields__ if name != "client_options"
)


def _unknown_options_message(unknown: Mapping[str, object]) -> str:
    known = [*_CONFIG_OPTIONS, *_CLIENT_OPTIONS, "listener", "pattern", "loop"]
    parts = []
    for name in sorted(unknown):
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        parts.append(f"{name!r}{hint}")
    return f"GroupConsumer got unknown option(s): {', '.join(parts)}"


CommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], BaseException | None], Any]


class GroupConsumer:
    """An asyncio Kafka consumer that is a full consumer-group member.

    ``GroupConsumer("topic", bootstrap_servers=..., group_id=...)`` subscribes at
    ``start()``; ``assign()`` consumes explicit partitions without group
    management (committed offsets are still used when ``group_id`` is set).
    """

    def __init__(
        self,
        *topics: str,
        listener: object | None = None,
        pattern: str | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        bootstrap_servers: str | list[str] = "localhost:9092",
        client_id: str = "aiogroup",
        group_id: str | None = None,
        group_instance_id: str | None = None,
        key_deserializer: Callable[[bytes | None], Any] | None = None,
        value_deserializer: Callable[[bytes | None], Any] | None = None,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 52_428_800,
        fetch_min_bytes: int = 1,
        max_partition_fetch_bytes: int = 1_048_576,
        max_buffered_bytes: int = 64 * 1_048_576,
        request_timeout_ms: int = 40_000,
        retry_backoff_ms: int = 100,
        auto_offset_reset: str = "latest",
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        check_crcs: bool = True,
        metadata_max_age_ms: int = 300_000,
        partition_assignment_strategy: Any = ("range", "roundrobin"),
        max_poll_interval_ms: int = 300_000,
        rebalance_timeout_ms: int | None = None,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        consumer_timeout_ms: int = 200,
        max_poll_records: int | None = None,
        ssl_context: Any = None,
        security_protocol: str = "PLAINTEXT",
        api_version: str | None = None,
        exclude_internal_topics: bool = True,
        connections_max_idle_ms: int = 540_000,
        isolation_level: str = "read_uncommitted",
        sasl_mechanism: str = "PLAIN",
        sasl_plain_password: str | None = None,
        sasl_plain_username: str | None = None,
        sasl_kerberos_service_name: str = "kafka",
        sasl_kerberos_domain_name: str | None = None,
        sasl_oauth_token_provider: Any = None,
        client_rack: str | None = None,
        group_protocol: str = "classic",
        group_remote_assignor: str | None = None,
        **unknown_options: NoReturn,
    ) -> None:
        # ``**unknown_options: NoReturn`` makes a misspelt option a type error for mypy
        # in the caller's code, and a ConfigurationError naming it at run time (instead
        # of Python's TypeError, which an aiokafka program does not expect).
        if unknown_options:
            raise ConfigurationError(_unknown_options_message(unknown_options))
        if loop is not None:
            warnings.warn(
                "the loop argument is ignored: GroupConsumer uses the running loop "
                "(aiokafka deprecated it in 0.7.1)",
                DeprecationWarning,
                stacklevel=2,
            )
        if api_version not in (None, "auto"):
            warnings.warn(
                "api_version is ignored: API versions are negotiated with the broker "
                "(aiokafka deprecated it in 0.13)",
                DeprecationWarning,
                stacklevel=2,
            )
        given = locals()
        client_options = {
            name: given[name]
            for name in _CLIENT_OPTIONS
            if given[name] != _CLIENT_OPTION_DEFAULTS[name]
        }
        check_group_protocol_options(
            group_protocol,
            {name: given[name] for name in CLASSIC_ONLY_OPTIONS},
        )
        self._config = ConsumerConfig(
            client_options=client_options,
            **{name: given[name] for name in _CONFIG_OPTIONS},
        )
        # Resolve assignor names now so an unknown name fails in the constructor.
        self._assignors = resolve_assignors(self._config.partition_assignment_strategy)
        if topics and pattern is not None:
            raise ConfigurationError("pass either topics or pattern, not both")
        self._initial_topics = validate_topics(topics) if topics else None
        self._initial_pattern = pattern
        self._initial_listener = listener
        #: Set by assign() before start(), applied by start() (aiokafka allows both).
        self._initial_assignment: list[TopicPartition] | None = None
        if (topics or pattern is not None) and self._config.group_id is None:
            raise ConfigurationError(
                "subscribing to topics needs group_id; use assign() for group-less consumption"
            )
        if listener is not None:
            as_async_listener(listener)  # fail now on a non-listener
        self._lifecycle: str = lifecycle.NEW
        #: Clear while start() is connecting: a stop() meanwhile waits for it.
        self._not_connecting = asyncio.Event()
        self._not_connecting.set()
        self._client: AIOKafkaClient | None = None
        self._subscription: SubscriptionState | None = None
        self._fetcher: Fetcher | None = None
        self._coordinator: GroupCoordinator | ConsumerGroupCoordinator | None = None
        #: The whole-cluster metadata of the last ``topics()``: aiokafka's client keeps
        #: only the topics it tracks, so without it ``partitions_for_topic`` would not
        #: know a topic ``topics()`` has just listed (Java's ``partitionsFor`` does).
        self._listed: ClusterMetadata | None = None
        self._metrics = ConsumerMetrics(self._config.session_timeout_ms / 1000)
        #: Loop time of the next poll bookkeeping of ``async for`` / getone() steps
        #: served from held records (the poll clock, the broker watch, the delivered
        #: count): per refill and at least once a second, not per record.  The timer
        #: makes the next step after the second take the full path, which does it.
        self._iterated_due = 0.0
        self._iterated_timer: asyncio.TimerHandle | None = None
        #: Internal parties run before the application's listener (the processor).
        self._rebalance_hooks = RebalanceHooks()

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect; with topics or a pattern, return once the first assignment is in.

        As aiokafka's ``start()``: when the consumer was given topics (constructor or
        ``subscribe()`` before ``start()``), this waits until the member has joined
        the group and received its first assignment, so ``await start()`` followed by
        ``seek_to_beginning()`` or ``position()`` sees the assigned partitions.
        Unlike aiokafka, the wait is bounded (rebalance timeout + request timeout):
        past it the consumer is stopped and ``KafkaTimeoutError`` raised; a fatal
        group error (an unknown assignor, authorization) is raised at once.
        """
        lifecycle.check_startable(self._lifecycle)
        self._lifecycle = lifecycle.STARTING
        self._not_connecting.clear()
        try:
            await self._connect()
        except BaseException:
            self._lifecycle = lifecycle.NEW
            raise
        finally:
            self._not_connecting.set()
        self._lifecycle = lifecycle.STARTED
        if self._initial_assignment is not None:
            self.assign(self._initial_assignment)
        elif self._initial_topics is not None:
            self.subscribe(topics=self._initial_topics, listener=self._initial_listener)
        elif self._initial_pattern is not None:
            self.subscribe(pattern=self._initial_pattern, listener=self._initial_listener)
        sub = self._subscription
        assert sub is not None  # made by _connect()
        if sub.subscription.group_managed:
            try:
                await self._wait_first_assignment()
            except BaseException:
                await self.stop()
                raise

    async def _wait_first_assignment(self) -> None:
        sub, coordinator = self._subscription, self._coordinator
        assert sub is not None and coordinator is not None
        cfg = self._config
        loop = asyncio.get_running_loop()
        limit = (cfg.effective_rebalance_timeout_ms + cfg.request_timeout_ms) / 1000
        deadline = loop.time() + limit
        reported = asyncio.Event()
        sub.add_error_callback(reported.set)
        assigned = asyncio.ensure_future(sub.wait_for_assignment())
        try:
            while not assigned.done():
                error = asyncio.ensure_future(reported.wait())
                try:
                    await asyncio.wait(
                        {assigned, error},
                        timeout=max(0.0, deadline - loop.time()),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    error.cancel()
                if assigned.done():
                    break
                if coordinator.failed:
                    sub.raise_pending_error()  # what made it fatal
                    raise KafkaError(f"group {cfg.group_id!r}: coordination failed")
                pending = sub.pending_error
                if pending is not None and is_authorization_error(pending):
                    sub.raise_pending_error()  # an ACL is missing: waiting cannot help
                if not reported.is_set():
                    raise KafkaTimeoutError(
                        f"start(): no assignment for group {cfg.group_id!r} within "
                        f"{limit:.0f}s (rebalance_timeout_ms + request_timeout_ms); "
                        "is the group coordinator reachable?"
                    )
                # A retriable error (kept for the next poll): keep waiting.
                reported.clear()
        finally:
            assigned.cancel()
        assigned.result()  # ConsumerStoppedError if stop() ran meanwhile

    async def _connect(self) -> None:
        """start()'s connecting part: client, fetcher, coordinator (all closed on failure)."""
        cfg = self._config
        install_log_redaction()  # aiokafka's DEBUG log prints SASL bytes otherwise
        self._client = AIOKafkaClient(
            bootstrap_servers=cfg.bootstrap_servers,
            client_id=cfg.client_id,
            metadata_max_age_ms=cfg.metadata_max_age_ms,
            request_timeout_ms=cfg.request_timeout_ms,
            retry_backoff_ms=cfg.retry_backoff_ms,
            connections_max_idle_ms=cfg.connections_max_idle_ms,
            **cfg.client_options,
        )
        self._subscription = SubscriptionState(cfg.reset_strategy)
        try:
            try:
                await self._client.bootstrap()
            except KafkaConnectionError as exc:  # aiokafka's "Unable to bootstrap": say why
                raise await explain_bootstrap_failure(
                    cfg.bootstrap_servers, cfg.client_options, exc
                ) from exc
            self._fetcher = Fetcher(self._client, self._subscription, cfg)
            self._fetcher.metrics = self._metrics
            await self._fetcher.start()
            if cfg.group_id is not None and cfg.group_protocol == "consumer":
                self._coordinator = ConsumerGroupCoordinator(self._client, self._subscription, cfg)
            elif cfg.group_id is not None:
                self._coordinator = GroupCoordinator(
                    self._client, self._subscription, cfg, self._assignors
                )
            if self._coordinator is not None:
                self._coordinator.metrics = self._metrics
                await self._coordinator.start()
        except BaseException:
            await self._shutdown(graceful=False)
            raise

    async def stop(self) -> None:
        """Commit (auto-commit), revoke, leave the group and close; safe to call twice."""
        await self._close(graceful=True)

    async def abort(self) -> None:
        """Drop everything at once, as if the process had died.

        No commit, no revoke callback, no LeaveGroup: the group notices only when
        the session expires.  Meant for tests and demos of crash recovery.
        """
        await self._close(graceful=False)

    async def _close(self, *, graceful: bool) -> None:
        """stop() (graceful) or abort(): what to do is the lifecycle's decision."""
        action = lifecycle.closing(self._lifecycle)
        while action is lifecycle.Closing.WAIT:
            # Bounded (bootstrap honours request_timeout_ms); shielded, so cancelling
            # this stop() does not cancel the start().
            await asyncio.shield(self._not_connecting.wait())
            action = lifecycle.closing(self._lifecycle)
        if action is lifecycle.Closing.NOTHING:
            return
        if action is lifecycle.Closing.SHUT_DOWN:
            self._lifecycle = lifecycle.STOPPING
            try:
                await self._shutdown(graceful=graceful)
            finally:
                self._lifecycle = lifecycle.STOPPED
            return
        self._lifecycle = lifecycle.STOPPED

    async def _shutdown(self, *, graceful: bool) -> None:
        try:
            if self._coordinator is not None:
                if graceful:
                    await self._coordinator.close(timeout=self._config.request_timeout_ms / 1000)
                else:
                    await self._coordinator.abort()
        finally:
            if self._iterated_timer is not None:
                self._iterated_timer.cancel()
                self._iterated_timer = None
            if self._fetcher is not None:
                await self._fetcher.close()
            if self._subscription is not None:
                self._subscription.close()
            if self._client is not None:
                await self._client.close()

    async def __aenter__(self) -> GroupConsumer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        await self.stop()

    def _require_started(self) -> SubscriptionState:
        lifecycle.check_usable(self._lifecycle)
        if self._subscription is None:
            raise ConsumerStoppedError()
        return self._subscription

    @property
    def _fetcher_or_raise(self) -> Fetcher:
        self._require_started()
        assert self._fetcher is not None
        return self._fetcher

    @property
    def _client_or_raise(self) -> AIOKafkaClient:
        self._require_started()
        assert self._client is not None
        return self._client

    # -- subscription ---------------------------------------------------------------------

    @loop_bound
    def subscribe(
        self,
        topics: Iterable[str] = (),
        pattern: str | None = None,
        listener: object | None = None,
    ) -> None:
        """Join the group for ``topics`` or a regex ``pattern`` (not both).

        Before ``start()`` (as aiokafka allows) the subscription is kept and applied
        by ``start()``, which then waits for the first assignment.
        """
        topics_given = topic_list(topics)
        if self._lifecycle in (lifecycle.NEW, lifecycle.STARTING):
            self._subscribe_before_start(topics_given, pattern, listener)
            return
        sub = self._require_started()
        check_topics_or_pattern(topics_given, pattern)
        if self._config.group_id is None:
            raise ConfigurationError(
                "subscribe() needs group_id; use assign() for group-less consumption"
            )
        if sub.subscription.type is SubscriptionType.USER_ASSIGNED:
            raise IllegalStateError(
                "subscribe() after assign(): call unsubscribe() first; a consumer either uses "
                "group-managed or manually assigned partitions"
            )
        coordinator = self._coordinator
        assert coordinator is not None  # started with a group_id
        # Wrapped once, here, with the thread the routine runs sync callbacks in.
        hooked = HookedListener(listener, self._rebalance_hooks, coordinator.listener_thread)
        if pattern is not None:
            compiled = compile_pattern(pattern)
            coordinator.set_listener(hooked)
            sub.subscribe_pattern(compiled)
        else:
            topics_checked = validate_topics(topics_given)
            coordinator.set_listener(hooked)
            sub.subscribe(topics_checked)

    def _subscribe_before_start(
        self, topics: list[str], pattern: str | None, listener: object | None
    ) -> None:
        check_topics_or_pattern(topics, pattern)
        if self._config.group_id is None:
            raise ConfigurationError(
                "subscribe() needs group_id; use assign() for group-less consumption"
            )
        if self._initial_assignment is not None:
            raise IllegalStateError(
                "subscribe() after assign(): call unsubscribe() first; a consumer either uses "
                "group-managed or manually assigned partitions"
            )
        if pattern is not None:
            compile_pattern(pattern)
        if listener is not None:
            as_async_listener(listener)
        self._initial_topics = validate_topics(topics) if topics else None
        self._initial_pattern = pattern
        self._initial_listener = listener

    @loop_bound
    def subscription(self) -> frozenset[str]:
        """Topics currently subscribed to (pattern matches included)."""
        if self._subscription is None:
            return self._initial_topics or frozenset()
        return self._subscription.subscription.effective_topics

    @loop_bound
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Consume exactly these partitions, without group management.

        Before ``start()`` (as aiokafka allows) the partitions are kept and assigned
        by ``start()``.
        """
        if self._lifecycle in (lifecycle.NEW, lifecycle.STARTING):
            parts = list(partitions)
            for tp in parts:
                check_partition(tp)
            if self._initial_topics is not None or self._initial_pattern is not None:
                raise IllegalStateError(
                    "assign() after subscribe(): call unsubscribe() first; a consumer either "
                    "uses group-managed or manually assigned partitions"
                )
            self._initial_assignment = parts
            return
        sub = self._require_started()
        if sub.subscription.group_managed:
            raise IllegalStateError(
                "assign() after subscribe(): call unsubscribe() first; a consumer either uses "
                "group-managed or manually assigned partitions"
            )
        parts = list(partitions)
        for tp in parts:
            check_partition(tp)
        if sub.subscription.type is SubscriptionType.NONE and sub.assignment is not None:
            # unsubscribe() left the group's partitions waiting for their revocation.  A
            # manual assignment is a new start, as in aiokafka and Java: each partition
            # starts from the group's committed offset, not from the position it had
            # under the group (the revoke listener still runs, with no positions to read).
            sub.set_assignment(None)
        sub.assign_from_user(parts)
        assignment = sub.assignment
        assert assignment is not None
        if self._config.group_id is None:
            # No group: nothing committed to look up, start by auto_offset_reset.
            for st in assignment.states():
                if st.status is FetchStatus.AWAITING_COMMITTED:
                    st.await_reset()

    @loop_bound
    def unsubscribe(self) -> None:
        """Leave the group (revoking first) or drop the manual assignment."""
        if self._lifecycle in (lifecycle.NEW, lifecycle.STARTING):
            self._initial_topics = self._initial_pattern = self._initial_assignment = None
            return
        sub = self._require_started()
        sub.unsubscribe()

    @loop_bound
    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads now.

        Empty at once after ``unsubscribe()``, as in aiokafka and Java, although the
        group's partitions are revoked (their listener run) in the background.
        """
        if self._subscription is None:
            return set()
        if self._subscription.subscription.type is SubscriptionType.NONE:
            return set()
        return set(self._subscription.assigned_partitions)

    # -- consuming ----------------------------------------------------------------------

    def _poll_started(self, partitions: Collection[TopicPartition]) -> SubscriptionState:
        """A poll begins: from now until ``_poll_ended`` the application is polling.

        A poll that waits for records keeps its member in the group however long it
        waits (max_poll_interval_ms counts the time *between* polls, as Java and
        aiokafka do); every caller pairs this with ``_poll_ended`` in a ``finally``.
        """
        sub = self._require_started()
        sub.poll_started(asyncio.get_running_loop().time())
        try:
            sub.raise_pending_error()
            self._metrics.check_broker()
            for tp in partitions:
                if tp not in sub.assigned_partitions:
                    raise IllegalStateError(f"partition {tp} is not assigned to this consumer")
        except BaseException:
            self._poll_ended(sub)
            raise
        return sub

    async def _pass_through_the_loop(self) -> None:
        """Before a fatal error is raised again, let the event loop run once.

        Why: every poll after a fatal error raises it (a member out of its group must
        not look like a quiet topic), and it is raised before any await.  An
        application loop that catches it and polls again - ``except Exception:
        log; continue`` is common - would then never suspend, and every other task
        of the process (its heartbeats, its web server, the ``stop()`` meant to end
        it) would hang.  Found by a CI run: a test's member loop starved its own
        event loop after a refused join.
        """
        sub = self._subscription
        if sub is not None and sub.repeats_fatal_error:
            await asyncio.sleep(0)

    @staticmethod
    def _poll_ended(sub: SubscriptionState) -> None:
        sub.poll_ended(asyncio.get_running_loop().time())

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord:
        """The next record (of ``partitions`` if given); waits until there is one or stop().

        Without ``partitions`` it is a step of ``async for`` (``_iterated_step``): a
        refill builds a getmany's worth of records and the calls after it hand them
        out one by one, with delivery's checks made at each.  With ``partitions``,
        records held for the others are given back (refetched) and one is read.
        """
        if not partitions:
            record = await self._iterated_step()
            if record is None:
                raise ConsumerStoppedError()
            return record
        await self._pass_through_the_loop()
        sub = self._poll_started(partitions)
        try:
            record = await self._fetcher_or_raise.next_record(partitions)
        finally:
            self._poll_ended(sub)
        self._metrics.delivered(1, record_bytes(record))
        return record

    async def getmany(
        self,
        *partitions: TopicPartition,
        timeout_ms: int = 0,
        max_records: int | None = None,
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records by partition; waits up to ``timeout_ms`` when none are buffered."""
        check_poll_limits(timeout_ms, max_records)
        if max_records is None:
            max_records = self._config.max_poll_records
        await self._pass_through_the_loop()
        sub = self._poll_started(partitions)
        try:
            result, nbytes = await self._fetcher_or_raise.fetched_records_and_bytes(
                partitions, timeout_ms / 1000, max_records
            )
        finally:
            self._poll_ended(sub)
        if result:
            # The bytes were counted as the records were built (not read back per record).
            self._metrics.delivered(sum(map(len, result.values())), nbytes)
        return result

    async def getmany_arrow(
        self,
        *partitions: TopicPartition,
        timeout_ms: int = 0,
        max_records: int | None = None,
        whole_batches: bool = False,
    ) -> pyarrow.RecordBatch | None:
        """Like getmany, but as one Arrow RecordBatch, with no per-record Python object.

        Columns: key, value, topic, partition, offset, timestamp, timestamp_type,
        headers.  Returns None when nothing arrived within ``timeout_ms``.
        Deserializers are not applied: the columns hold the raw bytes.

        ``whole_batches=True`` lets ``max_records`` be passed by less than one Kafka
        record batch rather than cut a batch in two: each part of a cut batch is
        decoded record by record in Python, and the result then concatenated (a copy).
        For bulk readers that bound memory by the batch, not the record (the Spark
        source's executors).
        """
        check_poll_limits(timeout_ms, max_records)
        await self._pass_through_the_loop()
        sub = self._poll_started(partitions)
        try:
            batch = await self._fetcher_or_raise.fetched_arrow(
                partitions, timeout_ms / 1000, max_records, whole_batches=whole_batches
            )
        finally:
            self._poll_ended(sub)
        if batch is not None:
            nbytes = batch.column("key").nbytes + batch.column("value").nbytes
            self._metrics.delivered(batch.num_rows, nbytes)
        return batch

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        """``async for``: an iterator over records a refill built ahead.

        Not the consumer itself (aiokafka returns ``self``): an iterator over held
        records (``aiogroup._fetch.iteration.iterate``) whose steps, while held
        records last, compare one count and complete without a coroutine - the
        native module's ``HeldSteps``, or an async generator without it - where a
        step through ``__anext__`` costs a coroutine, and each call in it, per record.
        ``async for`` behaves the same either way, and either way a record is handed
        out (its position moved) when the result of ``__anext__()`` is awaited, not
        before; an iterator kept by hand goes on after an error it raised with the
        native step, and ends (a new ``async for`` goes on) with the async generator.
        Before ``start()`` this is the consumer, whose ``__anext__`` says why it
        cannot read.
        """
        fetcher, sub = self._fetcher, self._subscription
        if fetcher is None or sub is None:
            return self
        loop = asyncio.get_running_loop()
        # The gate's deadline is in loop time; for asyncio's own loops that is
        # time.monotonic(), called without the method's Python frame.
        clock = time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time
        return iterate(fetcher.held, sub, clock, self._iterated_step)

    async def __anext__(self) -> ConsumerRecord:
        """The next record: the step ``async for`` takes when it has to check in full."""
        record = await self._iterated_step()
        if record is None:
            raise StopAsyncIteration
        return record

    async def _iterated_step(self) -> ConsumerRecord | None:
        """A held record after delivery's checks in full, else a refill; None: stopped.

        A step that finds a held record hands it out after the delivery checks, at
        this moment (``aiogroup._fetch.iteration``), and the membership gate; errors
        waiting for the application send it to the refill, which raises them.  What
        a poll also does - the poll clock, the broker watch, the delivered count -
        is done at each refill and at least once a second, not per record.  A step
        that finds none held refills: one drain of a getmany's size, as a getone
        polls, waiting for data.
        """
        fetcher = self._fetcher
        if fetcher is not None:
            now = asyncio.get_running_loop().time()
            record = fetcher.held_record(now)
            if record is not None:
                if now >= self._iterated_due:
                    self._iterated_poll(now)
                return record
        self._count_iterated()
        try:
            await self._pass_through_the_loop()
            sub = self._poll_started(())
            try:
                return await self._fetcher_or_raise.next_iterated()
            finally:
                self._poll_ended(sub)
        except ConsumerStoppedError:
            return None

    def _iterated_poll(self, now: float) -> None:
        """A second of steps from held records: it counts as polling."""
        sub = self._subscription
        if sub is not None:
            sub.poll_started(now)
            sub.poll_ended(now)
        self._metrics.check_broker()
        self._count_iterated()

    def _count_iterated(self) -> None:
        """Tell the metrics what the held records handed out since the last time.

        Only on the event loop: a snapshot taken in another thread (a sync listener)
        leaves the count to the loop rather than race it.
        """
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        fetcher = self._fetcher
        if fetcher is None:
            return
        self._iterated_due = loop.time() + 1.0
        if self._iterated_timer is None:
            self._iterated_timer = loop.call_at(self._iterated_due, self._iterated_tick)
        n, nbytes = fetcher.held.handed_out()
        self._metrics.delivered(n, nbytes)

    def _iterated_tick(self) -> None:
        """A second passed: the next step from held records takes the full path."""
        self._iterated_timer = None
        # Due now, whatever the clock's resolution made of the timer's moment.
        self._iterated_due = float("-inf")
        if self._fetcher is not None:
            self._fetcher.held.expire()

    # -- committing -----------------------------------------------------------------------

    def _normalize_offsets(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        sub = self._require_started()
        if self._coordinator is None:
            raise IllegalOperation("commit() needs a group_id: offsets are stored per group")
        if offsets is None:
            assignment = sub.assignment
            if assignment is None:
                return {}
            # A revoke listener's commit() commits the partitions it is handed.
            return positions_to_commit(assignment.states(), None, revoking=True)
        result = normalize_offsets(offsets)
        check_owned(
            result,
            sub.assigned_partitions,
            group_managed=sub.subscription.group_managed,
            user_assigned=sub.subscription.type is SubscriptionType.USER_ASSIGNED,
        )
        return result

    def _warn_beyond_highwater(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Warn of a commit past the partition's high watermark (where it is known).

        The broker accepts it, and the group would then skip every record up to that
        offset once they are written; it is almost always a bug (a timestamp or a
        wrong variable committed as an offset), so it is said, not refused.
        """
        assignment = self._subscription.assignment if self._subscription is not None else None
        if assignment is None:
            return
        for tp, oam in offsets.items():
            st = assignment.get(tp)
            if st is not None and st.highwater is not None and oam.offset > st.highwater:
                log.warning(
                    "commit of offset %d for %s is beyond its high watermark %d: the group "
                    "will skip every record up to it",
                    oam.offset,
                    tp,
                    st.highwater,
                )

    async def _check_commit_topics(self, offsets: Collection[TopicPartition]) -> None:
        """Refuse at once a commit to a topic or partition the cluster does not have.

        The broker answers UNKNOWN_TOPIC_OR_PARTITION, which is retriable (the topic
        may be being created), so the commit would retry until its timeout and end in
        a bare timeout.  Only topics missing from the client's metadata cost a lookup.
        """
        client = self._client_or_raise
        cluster: Any = client.cluster
        topics = {tp.topic for tp in offsets}
        if any(cluster.partitions_for_topic(t) is None for t in topics):
            cluster = await wait_for(
                client.fetch_all_metadata(), self._config.request_timeout_ms / 1000
            )
        missing = sorted(
            tp
            for tp in offsets
            if tp.partition not in (cluster.partitions_for_topic(tp.topic) or ())
        )
        if missing:
            raise UnknownTopicOrPartitionError(
                f"UNKNOWN_TOPIC_OR_PARTITION: cannot commit {missing}: the cluster has no "
                f"such topic or partition"
            )

    async def commit(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None
    ) -> None:
        """Commit ``offsets`` (default: the consumed positions) and wait for the broker."""
        normalized = self._normalize_offsets(offsets)
        if not normalized:
            return
        assert self._coordinator is not None
        await self._check_commit_topics(normalized)
        self._warn_beyond_highwater(normalized)
        await self._coordinator.commit_offsets(
            normalized, timeout=self._config.request_timeout_ms / 1000
        )

    @loop_bound
    def commit_async(
        self,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
        callback: CommitCallback | None = None,
    ) -> asyncio.Task[None]:
        """Start a commit and return its task; ``callback(offsets, exc)`` runs when it ends.

        The offsets are captured now, so later consumption does not change what is
        committed.
        """
        normalized = self._normalize_offsets(offsets)

        async def run() -> None:
            error: BaseException | None = None
            try:
                if normalized:
                    assert self._coordinator is not None
                    await self._check_commit_topics(normalized)
                    self._warn_beyond_highwater(normalized)
                    await self._coordinator.commit_offsets(
                        normalized, timeout=self._config.request_timeout_ms / 1000
                    )
            except Exception as exc:
                error = exc
            if callback is not None:
                callback(normalized, error)
            if error is not None and callback is None:
                raise error

        return asyncio.get_running_loop().create_task(run())

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset for ``partition`` (None when none)."""
        self._require_started()
        if self._coordinator is None:
            raise IllegalOperation("committed() needs a group_id")
        result = await self._coordinator.fetch_committed_offsets(
            [partition], timeout=self._config.request_timeout_ms / 1000
        )
        oam = result.get(partition)
        return None if oam is None else int(oam.offset)

    async def _fetch_committed(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """Committed offsets *with their metadata* (the processor reads its runs there)."""
        self._require_started()
        assert self._coordinator is not None
        return await self._coordinator.fetch_committed_offsets(
            partitions, timeout=self._config.request_timeout_ms / 1000
        )

    @property
    def _lifecycle_started(self) -> bool:
        return self._lifecycle == lifecycle.STARTED

    async def process(self, handler: Any, **options: Any) -> None:
        """``await Processor(self, handler, **options).run()``: see aiogroup.processing."""
        from aiogroup.processing import Processor

        await Processor(self, handler, **options).run()

    # -- positions ------------------------------------------------------------------------

    def _state(self, partition: TopicPartition) -> PartitionState:
        sub = self._require_started()
        assignment = sub.assignment
        if assignment is None or partition not in assignment:
            raise IllegalStateError(f"partition {partition} is not assigned to this consumer")
        return assignment.state(partition)

    @loop_bound
    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Consume ``partition`` from ``offset`` next."""
        check_seek_offset(offset)
        self._state(partition).seek(offset)

    def _partitions_or_all(self, partitions: tuple[TopicPartition, ...]) -> list[TopicPartition]:
        sub = self._require_started()
        if not partitions:
            return sorted(sub.assigned_partitions)
        for tp in partitions:
            self._state(tp)
        return list(partitions)

    async def seek_to_beginning(self, *partitions: TopicPartition) -> bool:
        """Consume ``partitions`` (default: all assigned) from their first offset next.

        Returns True, as aiokafka does (code written for it may check the result).
        """
        for tp in self._partitions_or_all(partitions):
            self._state(tp).await_reset(OffsetResetStrategy.EARLIEST)
        return True

    async def seek_to_end(self, *partitions: TopicPartition) -> bool:
        """Consume ``partitions`` (default: all assigned) from the log end next; True."""
        for tp in self._partitions_or_all(partitions):
            self._state(tp).await_reset(OffsetResetStrategy.LATEST)
        return True

    async def seek_to_committed(self, *partitions: TopicPartition) -> dict[TopicPartition, int]:
        """Seek to the committed offsets; partitions with none are left where they are."""
        tps = self._partitions_or_all(partitions)
        if self._coordinator is None:
            raise IllegalOperation("seek_to_committed() needs a group_id")
        committed = await self._coordinator.fetch_committed_offsets(
            tps, timeout=self._config.request_timeout_ms / 1000
        )
        result: dict[TopicPartition, int] = {}
        for tp, oam in committed.items():
            if oam is not None and tp in self.assignment():
                self._state(tp).seek(int(oam.offset))
                result[tp] = int(oam.offset)
        return result

    async def position(self, partition: TopicPartition, timeout_ms: int | None = None) -> int:
        """The offset of the next record to be handed out; waits until it is known.

        Raises ``IllegalStateError`` naming the partition if it is not assigned, or
        if a rebalance revokes it while this waits; a partition revoked and given
        back to this member (an eager rebalance, a rejoin after lost) is waited for
        anew.  ``stop()`` ends the wait with ``ConsumerStoppedError``; ``timeout_ms``
        bounds it (``asyncio.TimeoutError``).
        """
        sub = self._require_started()
        self._state(partition)  # not assigned: IllegalStateError now, as aiokafka
        timeout = None if timeout_ms is None else timeout_ms / 1000
        return await wait_for(sub.wait_position(partition), timeout)

    @loop_bound
    def highwater(self, partition: TopicPartition) -> int | None:
        return self._state(partition).highwater

    @loop_bound
    def last_stable_offset(self, partition: TopicPartition) -> int | None:
        return self._state(partition).last_stable_offset

    @loop_bound
    def last_poll_timestamp(self, partition: TopicPartition) -> int | None:
        """Wall-clock ms of the last Fetch response for ``partition`` (as aiokafka).

        That is when ``highwater()`` and ``last_stable_offset()`` were last updated,
        whether or not records came with it; None until the first fetch.
        """
        self._state(partition)
        return self._metrics.partition_fetch_ms.get(partition)

    @loop_bound
    def lag(self, partition: TopicPartition) -> int | None:
        """Records between the position and the high watermark (None until both are known)."""
        st = self._state(partition)
        if st.highwater is None or st.position is None:
            return None
        return max(0, st.highwater - st.position)

    @loop_bound
    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).pause()

    @loop_bound
    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).resume()

    @loop_bound
    def paused(self) -> set[TopicPartition]:
        sub = self._require_started()
        if sub.assignment is None:
            return set()
        return {st.tp for st in sub.assignment.states() if st.paused}

    # -- metadata and offset lookups -------------------------------------------------------

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        return await _offsets.beginning_offsets(
            self._client_or_raise, list(partitions), timeout=self._config.request_timeout_ms / 1000
        )

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return await _offsets.end_offsets(
            self._client_or_raise,
            list(partitions),
            read_committed=self._config.read_committed,
            timeout=self._config.request_timeout_ms / 1000,
        )

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        check_timestamps(timestamps)
        return await _offsets.offsets_for_times(
            self._client_or_raise,
            dict(timestamps),
            read_committed=self._config.read_committed,
            timeout=self._config.request_timeout_ms / 1000,
        )

    async def topics(self) -> set[str]:
        cluster = await self._client_or_raise.fetch_all_metadata()
        self._listed = cluster
        return set(cluster.topics())

    @loop_bound
    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partitions of ``topic`` from the client's metadata, else from the last
        ``topics()``; None when neither knows it."""
        validate_topic_name(topic)
        parts = self._client_or_raise.cluster.partitions_for_topic(topic)
        if parts is None and self._listed is not None:
            parts = self._listed.partitions_for_topic(topic)
        return None if parts is None else set(parts)

    # -- group identity -------------------------------------------------------------------

    @property
    def member_id(self) -> str | None:
        return None if self._coordinator is None else self._coordinator.member_id

    @property
    def generation(self) -> int | None:
        return None if self._coordinator is None else self._coordinator.generation_id

    @loop_bound
    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group identity now, for a transactional offset commit (KIP-447).

        Frozen at this instant: pass it with the offsets to
        ``aiogroup.transactions.send_offsets_to_transaction`` so the coordinator can
        refuse the commit if the group has replaced this member since.  Under the
        consumer protocol the member epoch stands in the generation's place.
        Raises ``NotGroupMemberError`` (naming the reason) before the first
        assignment, while the membership is lost, or without a group.
        """
        sub = self._subscription
        coordinator = self._coordinator
        return decide_group_metadata(
            self._config.group_id,
            self._config.group_instance_id,
            group_managed=sub is not None and sub.subscription.group_managed,
            identity=None if coordinator is None else coordinator.identity(),
            assigned=sub is not None and sub.assignment is not None,
        )

    @property
    def config(self) -> ConsumerConfig:
        return self._config

    # -- observability --------------------------------------------------------------------

    def metrics(self) -> MetricsSnapshot:
        """Counters, rates, latencies, rebalances and per-partition lag (see aiogroup.metrics).

        Lag is the high watermark of the last Fetch response minus the position; it
        does not use ``end_offsets()`` (see the module docstring for why).
        """
        self._count_iterated()
        sub = self._subscription
        assignment = None if sub is None else sub.assignment
        states = () if assignment is None else assignment.states()
        partitions = partition_metrics(states, self._metrics.partition_fetch_ms)
        return snapshot(self._metrics, self._view(), partitions)

    def health(self) -> Health:
        """Readiness and liveness for probes: joined, broker reachable, heartbeat and poll age."""
        return assess_health(self._metrics, self._view())

    def _view(self) -> MemberView:
        """This consumer as metrics and health read it, at this moment."""
        sub = self._subscription
        coordinator = self._coordinator
        return MemberView(
            lifecycle=self._lifecycle,
            group_managed=sub is not None and sub.subscription.group_managed,
            joined=(
                coordinator is not None
                and coordinator.joined
                and sub is not None
                and sub.assignment is not None
            ),
            failed=coordinator is not None and coordinator.failed,
            member_state=self._member_state(),
            member_id=self.member_id,
            generation=self.generation,
            seconds_since_poll=self._seconds_since_poll(),
            max_poll_interval_s=self._config.max_poll_interval_ms / 1000,
            pending_error=None if sub is None else sub.pending_error,
        )

    def _member_state(self) -> str:
        if self._coordinator is not None:
            return self._coordinator.state_name
        return lifecycle.state_without_group(self._lifecycle)

    def _seconds_since_poll(self) -> float | None:
        sub = self._subscription
        if sub is None or sub.last_poll is None:
            return None
        if sub.polls_waiting:
            return 0.0  # waiting for records is polling (max_poll_interval_ms)
        return asyncio.get_running_loop().time() - sub.last_poll
