"""The consumer-protocol (KIP-848) coordination routine: performs what the machine decides.

``GroupConsumer(..., group_protocol="consumer")`` builds this instead of the
classic :class:`~aiogroup.coordinator.GroupCoordinator`; it offers the same
surface to the consumer (start, close, abort, commit_offsets,
fetch_committed_offsets, member_id, generation_id).

One routine task owns :class:`~aiogroup._membership.consumer_group.ConsumerMembership`.
Everything that happens - a heartbeat answer, a listener returning, the
subscription changing, a timer - arrives on its inbox and is fed to the machine;
the actions that come back are performed here and nothing is decided here.
Requests and listeners run as child tasks, so heartbeats keep flowing while a
slow ``on_partitions_revoked`` runs.

Reused, not copied: SubscriptionState (assignment, revoking marks, errors, poll
times), the listener adapter (``as_async_listener``), aiokafka's client and its
coordination connection group, and the group-API builders of ``_protocol``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import async_timeout
from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.errors import IncompatibleBrokerVersion

from aiogroup._membership import consumer_group as cg
from aiogroup._protocol.consumer_group import (
    ConsumerGroupHeartbeatRequest,
    ConsumerOffsetCommitRequest,
    ConsumerOffsetFetchRequest,
    TopicIdsRequest,
    parse_consumer_group_heartbeat,
    parse_topic_ids,
)
from aiogroup._protocol.group import (
    FindCoordinatorRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    parse_find_coordinator,
    parse_offset_commit,
    parse_offset_fetch,
)
from aiogroup._protocol.group_configs import parse_session_timeout, session_timeout_request
from aiogroup._timeouts import wait_for
from aiogroup.config import REMOTE_ASSIGNORS, ConsumerConfig
from aiogroup.errors import (
    CommitFailedError,
    ConfigurationError,
    IllegalStateError,
    KafkaError,
    error_for_code,
)
from aiogroup.listeners import AsyncConsumerRebalanceListener, ListenerThread, as_async_listener
from aiogroup.metrics import ConsumerMetrics
from aiogroup.structs import OffsetAndMetadata, TopicPartition
from aiogroup.subscription import FetchStatus, SubscriptionState, SubscriptionType

__all__ = [
    "CLASSIC_ONLY_OPTIONS",
    "REMOTE_ASSIGNORS",
    "ConsumerGroupCoordinator",
    "check_group_protocol_options",
]

log = logging.getLogger("aiogroup.consumer_group")

#: Options that only mean something to the classic protocol (Java rejects them too:
#: the broker owns the session, the heartbeat interval and the assignment).
CLASSIC_ONLY_OPTIONS = (
    "partition_assignment_strategy",
    "session_timeout_ms",
    "heartbeat_interval_ms",
)


def check_group_protocol_options(group_protocol: str, classic_options: Mapping[str, Any]) -> None:
    """Reject classic-only options set to something else than their default with
    ``group_protocol="consumer"``, naming them (as Java does).

    The constructor's explicit keyword parameters cannot tell "passed the default"
    from "left out"; a value other than the default is what is refused.
    """
    if group_protocol != "consumer":
        return
    defaults = ConsumerConfig.__dataclass_fields__
    given = []
    for name in CLASSIC_ONLY_OPTIONS:
        value = classic_options.get(name, defaults[name].default)
        default = defaults[name].default
        if isinstance(default, tuple) and isinstance(value, list | tuple):
            value = tuple(value)
        if value != default:
            given.append(name)
    if given:
        raise ConfigurationError(
            f"{', '.join(given)} cannot be used with group_protocol='consumer': the broker "
            "decides the session, heartbeat interval and assignment (use group_remote_assignor "
            f"- one of {', '.join(REMOTE_ASSIGNORS)} - to pick the broker's assignor)"
        )


@dataclass(frozen=True, slots=True)
class _SubscriptionPoke:
    """The subscription object changed; the routine reads it and tells the machine."""


@dataclass(frozen=True, slots=True)
class _ChildCrashed:
    exc: BaseException


_InboxItem = cg.Event | _SubscriptionPoke | _ChildCrashed


class ConsumerGroupCoordinator:
    """Keeps one consumer in a consumer-protocol group: heartbeat, reconcile, commit."""

    def __init__(
        self, client: AIOKafkaClient, subscription: SubscriptionState, config: ConsumerConfig
    ) -> None:
        if config.group_id is None:
            raise ConfigurationError("ConsumerGroupCoordinator needs config.group_id")
        self._client = client
        self._subscription = subscription
        self._config = config
        self._group_id: str = config.group_id
        self._retry_backoff = config.retry_backoff_ms / 1000
        # KIP-1082: the client names itself, once, and keeps the id across rejoins.
        self._membership = cg.ConsumerMembership(
            config.group_id,
            str(uuid.uuid4()),
            instance_id=config.group_instance_id,
            server_assignor=config.group_remote_assignor,
            rebalance_timeout_ms=config.effective_rebalance_timeout_ms,
            retry_backoff=self._retry_backoff,
            max_poll_interval=config.max_poll_interval_ms / 1000,
            auto_commit=config.enable_auto_commit,
        )
        #: Replaced by the consumer's own (GroupConsumer.metrics); heartbeats and commits
        #: are timed through it.  The session is the broker's (group.consumer.session.timeout.ms).
        self.metrics = ConsumerMetrics()
        self._inbox: asyncio.Queue[_InboxItem] = asyncio.Queue()
        self._routine: asyncio.Task[None] | None = None
        self._children: set[asyncio.Task[Any]] = set()
        self._listener: AsyncConsumerRebalanceListener = AsyncConsumerRebalanceListener()
        #: Sync listener methods run here, off the loop, as in the classic coordinator.
        self._listener_thread = ListenerThread()
        self._node: int | None = None
        self._subscription_key: object = None
        self._last_fed_poll: float | None = None
        #: Woken after every heartbeat answer: commits waiting for a fresh epoch retry.
        self._epoch_changed = asyncio.Event()

    # -- read-only views ---------------------------------------------------------------

    @property
    def member_id(self) -> str:
        return self._membership.member_id

    @property
    def generation_id(self) -> int:
        """The member epoch (what a commit carries in the generation field)."""
        return self._membership.member_epoch

    @property
    def state(self) -> cg.ConsumerMemberState:
        return self._membership.state

    @property
    def membership(self) -> cg.ConsumerMembership:
        """The machine itself, for inspection in tests; never mutate it from outside."""
        return self._membership

    # -- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        if self._routine is not None:
            raise IllegalStateError("ConsumerGroupCoordinator.start() called twice")
        loop = asyncio.get_running_loop()
        self._routine = loop.create_task(self._run(), name=f"aiogroup-kip848-{self._group_id}")

    async def close(self, *, timeout: float) -> None:
        """Revoke (committing first with auto-commit), leave with epoch -1/-2; bounded."""
        routine = self._routine
        if routine is None or routine.done():
            await self._finish_routine()
            return
        self._inbox.put_nowait(cg.CloseRequested())
        try:
            await wait_for(asyncio.shield(routine), timeout)
        except asyncio.TimeoutError:
            log.warning(
                "group %s: close did not finish within %.1fs; the session timeout will "
                "evict the member",
                self._group_id,
                timeout,
            )
        except Exception:
            pass  # the routine already reported its failure
        finally:
            await self._finish_routine()

    async def abort(self) -> None:
        await self._finish_routine()

    async def _finish_routine(self) -> None:
        routine = self._routine
        if routine is not None and not routine.done():
            routine.cancel()
        if routine is not None:
            await asyncio.wait({routine})
        await self._cancel_children()
        self._listener_thread.close()

    # -- the routine -------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        self._spawn(self._watch_subscription(), "subscription-watcher")
        self._spawn(self._refresh_committed_loop(), "commit-refresh")
        self._spawn(self._learn_session_timeout(), "DescribeConfigs")
        if self._config.enable_auto_commit:
            self._spawn(self._auto_commit_loop(), "auto-commit")
        getter: asyncio.Task[_InboxItem] | None = None
        try:
            self._on_subscription_poke()
            while not self._membership.finished:
                deadline = self._membership.next_deadline()
                timeout = None if deadline is None else max(0.0, deadline - loop.time())
                if getter is None:
                    getter = loop.create_task(self._inbox.get())
                done, _ = await asyncio.wait({getter}, timeout=timeout)
                item: _InboxItem
                if getter in done:
                    item, getter = getter.result(), None
                else:
                    item = cg.TimerFired()
                if isinstance(item, _ChildCrashed):
                    raise item.exc
                if isinstance(item, _SubscriptionPoke):
                    self._on_subscription_poke()
                else:
                    self._feed(item)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("group %s: consumer-protocol routine failed", self._group_id)
            self._subscription.report_error(KafkaError(f"group coordination failed: {exc!r}"))
            raise
        finally:
            if getter is not None:
                getter.cancel()
            await self._cancel_children()

    def _feed(self, event: cg.Event) -> None:
        """The one place the machine is driven; performs what it answers, in order."""
        now = asyncio.get_running_loop().time()
        last_poll = self._subscription.last_poll
        if last_poll is not None and last_poll != self._last_fed_poll:
            self._last_fed_poll = last_poll
            self._perform_all(self._membership.handle(cg.ApplicationPolled(), now))
        self._perform_all(self._membership.handle(event, now))
        # The delivery gate: past it the coordinator may have fenced this member.
        self._subscription.set_membership_valid_until(self._membership.membership_valid_until())

    def _perform_all(self, actions: Iterable[cg.Action]) -> None:
        for action in actions:
            self._perform(action)

    def _perform(self, action: cg.Action) -> None:
        if isinstance(action, cg.SendHeartbeat):
            self._spawn(self._heartbeat(action), "ConsumerGroupHeartbeat")
        elif isinstance(action, cg.FindCoordinator):
            log.debug("group %s: finding coordinator (%s)", self._group_id, action.reason)
            self._spawn(self._find_coordinator(), "FindCoordinator")
        elif isinstance(action, cg.SetAssignment):
            self._set_assignment(action.partitions)
        elif isinstance(action, cg.InvokeOnPartitionsRevoked):
            parts = _tps(action.partitions)
            log.info("group %s: revoking %s", self._group_id, sorted(parts))
            self._subscription.mark_revoking(parts)
            commit_first = action.commit_first

            async def revoke() -> None:
                if commit_first:
                    await self._auto_commit(parts, "before revocation")
                await self._listener.on_partitions_revoked(set(parts))

            self._start_listener(cg.Listener.REVOKED, revoke)
        elif isinstance(action, cg.InvokeOnPartitionsAssigned):
            parts = _tps(action.partitions)
            log.info(
                "group %s: epoch %d assigned %s",
                self._group_id,
                self._membership.member_epoch,
                sorted(parts) or "no new partitions",
            )
            self._start_listener(cg.Listener.ASSIGNED, lambda: self._run_assigned(parts))
        elif isinstance(action, cg.InvokeOnPartitionsLost):
            lost = _tps(action.partitions)
            self.metrics.partitions_lost += len(lost)
            log.warning("group %s: partitions lost: %s", self._group_id, sorted(lost))
            self._start_listener(
                cg.Listener.LOST, lambda: self._listener.on_partitions_lost(set(lost))
            )
        elif isinstance(action, cg.RequestMetadata):
            self._spawn(self._resolve_topic_ids(), "Metadata")
        elif isinstance(action, cg.RaiseToApplication):
            exc: BaseException
            if action.error_code > 0:
                exc = error_for_code(action.error_code)(action.message)
            else:
                exc = KafkaError(action.message)
            if action.fatal:
                log.error("group %s: fatal: %s", self._group_id, action.message)
            else:
                log.warning("group %s: %s", self._group_id, action.message)
            self._subscription.report_error(exc)
        else:  # pragma: no cover - a new action type without a performer
            raise TypeError(f"no performer for {action!r}")

    # -- children ----------------------------------------------------------------------

    def _spawn(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]:
        async def guarded() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._inbox.put_nowait(_ChildCrashed(exc))

        task = asyncio.get_running_loop().create_task(guarded(), name=f"aiogroup-{name}")
        self._children.add(task)
        task.add_done_callback(self._children.discard)
        return task

    async def _cancel_children(self) -> None:
        tasks = list(self._children)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._children.clear()

    def _start_listener(self, kind: cg.Listener, call: Callable[[], Awaitable[Any]]) -> None:
        """Run a listener as a child; its end becomes ListenerCompleted (heartbeats go on)."""

        async def run() -> None:
            error: str | None = None
            try:
                await call()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("group %s: %s raised", self._group_id, kind.value, exc_info=exc)
                error = repr(exc)
                self._subscription.report_error(exc)
            self._inbox.put_nowait(cg.ListenerCompleted(kind, error))

        self._spawn(run(), kind.value)

    async def _run_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        offsets = await self._listener.on_partitions_assigned(set(partitions))
        self._subscription.apply_start_offsets(offsets)

    # -- subscription ------------------------------------------------------------------

    async def _watch_subscription(self) -> None:
        sub = self._subscription
        while not sub.closed:
            await sub.wait_subscription_changed()
            sub.clear_subscription_changed()
            self._inbox.put_nowait(_SubscriptionPoke())

    def _on_subscription_poke(self) -> None:
        sub = self._subscription.subscription
        if sub.group_managed:
            self._listener = as_async_listener(sub.listener, thread=self._listener_thread)
            key: object = (
                sub.type,
                sub.topics,
                None if sub.pattern is None else sub.pattern.pattern,
            )
            if key == self._subscription_key:
                return
            self._subscription_key = key
            if sub.type is SubscriptionType.AUTO_PATTERN:
                assert sub.pattern is not None
                # The broker matches the pattern (RE2J, whole topic name, KIP-848).
                self._feed(cg.Subscribed(regex=sub.pattern.pattern))
            else:
                self._update_metadata_topics()
                self._feed(cg.Subscribed(frozenset(sub.topics)))
            return
        if sub.type is SubscriptionType.USER_ASSIGNED:
            self._subscription.request_commit_refresh()
        if self._subscription_key is not None:
            self._subscription_key = None
            self._feed(cg.UnsubscribeRequested())

    def _update_metadata_topics(self, extra: Iterable[str] = ()) -> None:
        """Keep the client's metadata on the subscribed and assigned topics (leaders)."""
        sub = self._subscription.subscription
        wanted = (
            set(sub.topics)
            | set(extra)
            | {tp.topic for tp in self._subscription.assigned_partitions}
        )
        if wanted:
            self._client.set_topics(sorted(wanted))

    def _set_assignment(self, partitions: frozenset[tuple[str, int]]) -> None:
        sub = self._subscription
        if sub.subscription.type is SubscriptionType.USER_ASSIGNED:
            return  # the application switched to assign(): that assignment is its own
        tps = _tps(partitions)
        self._update_metadata_topics(tp.topic for tp in tps)
        if sub.subscription.type is SubscriptionType.AUTO_PATTERN:
            sub.set_matched_topics(tp.topic for tp in tps)
        sub.set_assignment(tps)

    # -- requests (each in its own child task, each ending in one event) ---------------

    async def _find_coordinator(self) -> None:
        event: cg.Event
        try:
            node = self._client.get_random_node()
            if node is None:
                raise KafkaError("no broker known to ask for the coordinator")
            result = parse_find_coordinator(
                await self._client.send(node, FindCoordinatorRequest(self._group_id))
            )
            if result.error_code != 0:
                event = cg.CoordinatorLookupFailed(f"error code {result.error_code}")
            elif await self._client.ready(result.node_id, group=ConnectionGroup.COORDINATION):
                log.info("group %s: coordinator is node %d", self._group_id, result.node_id)
                self._node = result.node_id
                event = cg.CoordinatorFound()
            else:
                event = cg.CoordinatorLookupFailed(f"cannot connect to node {result.node_id}")
        except (KafkaError, OSError) as exc:
            event = cg.CoordinatorLookupFailed(repr(exc))
        self._inbox.put_nowait(event)

    async def _heartbeat(self, action: cg.SendHeartbeat) -> None:
        event: cg.Event
        request = ConsumerGroupHeartbeatRequest(
            self._group_id,
            action.member_id,
            action.member_epoch,
            instance_id=action.instance_id,
            rack_id=self._config.client_rack,
            rebalance_timeout_ms=action.rebalance_timeout_ms,
            subscribed_topic_names=action.subscribed_topic_names,
            subscribed_topic_regex=action.subscribed_topic_regex,
            server_assignor=action.server_assignor,
            topic_partitions=action.topic_partitions,
        )
        try:
            if self._node is None:
                raise KafkaError("coordinator unknown")
            resp = await self.metrics.timed_group_request(
                request,
                self._client.send(self._node, request, group=ConnectionGroup.COORDINATION),
            )
            r = parse_consumer_group_heartbeat(resp)
            if r.error_code == 0:
                self.metrics.last_heartbeat_ok = time.monotonic()
            if r.error_code:
                log.debug(
                    "group %s: heartbeat answered %s: %s",
                    self._group_id,
                    cg.code_name(r.error_code),
                    r.error_message,
                )
            event = cg.HeartbeatResponseReceived(
                r.error_code,
                r.member_epoch,
                r.heartbeat_interval_ms,
                r.member_id,
                r.assignment,
                r.error_message,
            )
        except IncompatibleBrokerVersion as exc:
            # The broker has no API 68 (or no version we speak): the machine's
            # UNSUPPORTED_VERSION reaction names the gap and stops the member.
            event = cg.HeartbeatResponseReceived(
                cg.ConsumerErrorCode.UNSUPPORTED_VERSION, error_message=str(exc)
            )
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            log.debug("group %s: heartbeat failed: %r", self._group_id, exc)
            event = cg.HeartbeatFailed(repr(exc))
        self._inbox.put_nowait(event)
        self._epoch_changed.set()
        self._epoch_changed = asyncio.Event()

    async def _learn_session_timeout(self) -> None:
        """Ask a broker for the group's session timeout, once; until it answers (or if
        it never does: no DESCRIBE_CONFIGS permission, an older broker) the delivery
        gate uses the heartbeat interval, which is shorter."""
        for attempt in range(3):
            node = self._client.get_random_node()
            try:
                if node is None:
                    raise KafkaError("no broker known")
                resp = await self._client.send(node, session_timeout_request(self._group_id, node))
                ms = parse_session_timeout(resp)
            except (KafkaError, OSError, asyncio.TimeoutError) as exc:
                log.debug("group %s: session timeout lookup failed (%r)", self._group_id, exc)
                await asyncio.sleep(self._retry_backoff * (attempt + 1))
                continue
            if ms is None:
                log.info(
                    "group %s: the broker did not tell the consumer session timeout; "
                    "records are handed out only within a heartbeat interval of the "
                    "last heartbeat acknowledged",
                    self._group_id,
                )
            else:
                self._inbox.put_nowait(cg.SessionTimeoutLearned(ms))
            return

    async def _resolve_topic_ids(self) -> None:
        """Ask any broker for the id <-> name map of every topic (assignments speak ids)."""
        names: dict[uuid.UUID, str] = {}
        for attempt in range(3):
            node = self._client.get_random_node()
            try:
                if node is None:
                    raise KafkaError("no broker known")
                names = parse_topic_ids(await self._client.send(node, TopicIdsRequest(None)))
                break
            except IncompatibleBrokerVersion as exc:
                self._subscription.report_error(exc)
                return
            except (KafkaError, OSError) as exc:
                log.debug("group %s: topic id lookup failed (%r)", self._group_id, exc)
                await asyncio.sleep(self._retry_backoff * (attempt + 1))
        self._inbox.put_nowait(cg.TopicNamesResolved(names))

    # -- commits -----------------------------------------------------------------------

    def _check_running(self) -> None:
        routine = self._routine
        if routine is None or routine.done():
            raise KafkaError("the group coordinator is not running")

    async def _coordinator_node(self) -> int:
        while self._node is None:
            self._check_running()
            await asyncio.sleep(self._retry_backoff)
        return self._node

    async def commit_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        timeout: float | None,
        kind: cg.CommitKind = cg.CommitKind.USER,
    ) -> None:
        """Commit under the member epoch; CommitFailedError when the member moved on."""
        if not offsets:
            return
        async with async_timeout.timeout(timeout):
            await self._commit(dict(offsets), kind)

    async def _commit(
        self, offsets: dict[TopicPartition, OffsetAndMetadata], kind: cg.CommitKind
    ) -> None:
        while True:
            self._check_running()
            m = self._membership
            request: Any
            if self._subscription.subscription.group_managed:
                gate = m.commit_gate()
                if not gate.allowed:
                    raise CommitFailedError(f"cannot commit: {gate.refusal}")
                request = ConsumerOffsetCommitRequest(
                    self._group_id,
                    gate.member_epoch,
                    gate.member_id,
                    self._config.group_instance_id,
                    offsets,
                )
            else:  # user-assigned partitions: a simple commit outside the group
                request = OffsetCommitRequest(self._group_id, -1, "", None, offsets)
            node = await self._coordinator_node()
            epoch_changed = self._epoch_changed
            try:
                resp = await self.metrics.timed_group_request(
                    request,
                    self._client.send(node, request, group=ConnectionGroup.COORDINATION),
                )
            except IncompatibleBrokerVersion:
                raise
            except (KafkaError, OSError) as exc:
                log.debug("group %s: OffsetCommit failed: %r; retrying", self._group_id, exc)
                await asyncio.sleep(self._retry_backoff)
                continue
            result = parse_offset_commit(resp)
            retry_epoch = False
            retry = False
            for (topic, partition), code in sorted(result.errors.items()):
                outcome = cg.commit_outcome(kind, code, in_group=m.in_group)
                tp = TopicPartition(topic, partition)
                if outcome is cg.CommitOutcome.OK:
                    continue
                if outcome is cg.CommitOutcome.COMMIT_FAILED:
                    raise CommitFailedError(
                        f"commit of {tp} failed with {cg.code_name(code)}: this member's epoch "
                        "is no longer current and the partition may belong to another member"
                    )
                if outcome is cg.CommitOutcome.RAISE:
                    raise error_for_code(code)(f"OffsetCommit of {tp}: {cg.code_name(code)}")
                if outcome is cg.CommitOutcome.RETRY_WITH_LATEST_EPOCH:
                    retry_epoch = True
                else:
                    retry = True
            if not retry and not retry_epoch:
                return
            if retry_epoch:
                # Java: retried with the epoch the next heartbeat brings.
                with_backoff = asyncio.ensure_future(epoch_changed.wait())
                try:
                    await asyncio.wait({with_backoff}, timeout=self._retry_backoff * 10)
                finally:
                    with_backoff.cancel()
            else:
                await asyncio.sleep(self._retry_backoff)

    async def _auto_commit(self, partitions: Iterable[TopicPartition] | None, why: str) -> None:
        """Commit positions of ``partitions`` (None: all assigned); failures are logged only."""
        assignment = self._subscription.assignment
        if assignment is None:
            return
        wanted = None if partitions is None else frozenset(partitions)
        offsets: dict[TopicPartition, OffsetAndMetadata] = {}
        for st in assignment.states():
            if wanted is None and st.revoking:
                continue
            if wanted is not None and st.tp not in wanted:
                continue
            if st.has_valid_position and st.position is not None:
                offsets[st.tp] = OffsetAndMetadata(st.position, "")
        if not offsets:
            return
        try:
            await self.commit_offsets(
                offsets, timeout=self._config.request_timeout_ms / 1000, kind=cg.CommitKind.AUTO
            )
        except (KafkaError, asyncio.TimeoutError) as exc:
            log.warning("group %s: auto-commit %s failed: %r", self._group_id, why, exc)

    async def _auto_commit_loop(self) -> None:
        interval = self._config.auto_commit_interval_ms / 1000
        while not self._subscription.closed:
            await asyncio.sleep(interval)
            if self._membership.in_group:
                await self._auto_commit(None, "on the interval")

    async def fetch_committed_offsets(
        self, partitions: Iterable[TopicPartition], *, timeout: float | None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        tps = sorted(set(partitions))
        if not tps:
            return {}
        async with async_timeout.timeout(timeout):
            return await self._fetch_committed(tps)

    async def _fetch_committed(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        while True:
            self._check_running()
            m = self._membership
            request: Any = (
                ConsumerOffsetFetchRequest(self._group_id, m.member_id, m.member_epoch, tps)
                if m.in_group
                else OffsetFetchRequest(self._group_id, tps, require_stable=True)
            )
            node = await self._coordinator_node()
            try:
                resp = await self._client.send(node, request, group=ConnectionGroup.COORDINATION)
            except IncompatibleBrokerVersion:
                raise
            except (KafkaError, OSError):
                await asyncio.sleep(self._retry_backoff)
                continue
            result = parse_offset_fetch(resp)
            codes = [result.error_code] + [row[3] for row in result.partitions.values()]
            outcomes = [cg.offset_fetch_outcome(c, in_group=m.in_group) for c in codes]
            if cg.CommitOutcome.RAISE in outcomes:
                bad = codes[outcomes.index(cg.CommitOutcome.RAISE)]
                raise error_for_code(bad)(f"OffsetFetch for group {self._group_id}")
            if any(
                o
                in (
                    cg.CommitOutcome.RETRY,
                    cg.CommitOutcome.FIND_COORDINATOR_AND_RETRY,
                    cg.CommitOutcome.RETRY_WITH_LATEST_EPOCH,
                )
                for o in outcomes
            ):
                await asyncio.sleep(self._retry_backoff)
                continue
            found: dict[TopicPartition, OffsetAndMetadata | None] = {}
            for tp in tps:
                row = result.partitions.get((tp.topic, tp.partition))
                if row is None or row[0] < 0 or row[3] != 0:
                    found[tp] = None
                else:
                    found[tp] = OffsetAndMetadata(row[0], row[2] or "")
            return found

    async def _refresh_committed_loop(self) -> None:
        """Give partitions awaiting their committed offset a position (or hand them to reset)."""
        sub = self._subscription
        while not sub.closed:
            await sub.commit_refresh_needed.wait()
            sub.commit_refresh_needed.clear()
            assignment = sub.assignment
            if sub.closed or assignment is None:
                continue
            tps = assignment.needing_committed()
            if not tps:
                continue
            try:
                committed = await self.fetch_committed_offsets(
                    tps, timeout=self._config.request_timeout_ms / 1000
                )
            except (KafkaError, asyncio.TimeoutError) as exc:
                if not (isinstance(exc, asyncio.TimeoutError) or getattr(exc, "retriable", False)):
                    sub.report_error(exc)
                await asyncio.sleep(self._retry_backoff)
                sub.request_commit_refresh()
                continue
            for tp, oam in committed.items():
                st = assignment.get(tp)
                if st is None or st.revoking or st.status is not FetchStatus.AWAITING_COMMITTED:
                    continue
                if oam is not None:
                    st.seek(oam.offset)
                else:
                    st.await_reset()
            if sub.assignment is not assignment:
                sub.request_commit_refresh()


def _tps(partitions: Iterable[tuple[str, int]]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, partition) for topic, partition in partitions)
