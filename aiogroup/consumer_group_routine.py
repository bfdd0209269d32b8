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

from aiogroup._coordination.commit_client import (
    CommitClient,
    auto_commit,
)
from aiogroup._coordination.commit_outcome import CommitRules
from aiogroup._coordination.supervision import TaskScope
from aiogroup._coordination.tracking import consumer_subscription_diff
from aiogroup._coordination.watch import spawn_lifetime_children, subscription_view
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
from aiogroup.subscription import SubscriptionState, SubscriptionType

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


#: CommitFailedError's text when the member epoch moved on.
_STALE_EPOCH = (
    "commit of {tp} failed with {code}: this member's epoch is no longer current and the "
    "partition may belong to another member"
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
        self._children = TaskScope(lambda exc: self._inbox.put_nowait(_ChildCrashed(exc)))
        self._commits = CommitClient(self, self._group_id, self._retry_backoff)
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
        await self._children.aclose()
        self._listener_thread.close()

    # -- the routine -------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        spawn_lifetime_children(
            self._children,
            self._subscription,
            lambda: self._inbox.put_nowait(_SubscriptionPoke()),
            self._fetch_for_refresh,
            self._retry_backoff,
            self._group_id,
        )
        self._children.spawn(self._learn_session_timeout(), "DescribeConfigs")
        if self._config.enable_auto_commit:
            self._children.spawn(self._auto_commit_loop(), "auto-commit")
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
            await self._children.aclose()

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
            self._children.spawn(self._heartbeat(action), "ConsumerGroupHeartbeat")
        elif isinstance(action, cg.FindCoordinator):
            log.debug("group %s: finding coordinator (%s)", self._group_id, action.reason)
            self._children.spawn(self._find_coordinator(), "FindCoordinator")
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
            self._children.spawn(self._resolve_topic_ids(), "Metadata")
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

        self._children.spawn(run(), kind.value)

    async def _run_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        offsets = await self._listener.on_partitions_assigned(set(partitions))
        self._subscription.apply_start_offsets(offsets)

    # -- subscription ------------------------------------------------------------------

    def _on_subscription_poke(self) -> None:
        sub = self._subscription.subscription
        if sub.group_managed:
            self._listener = as_async_listener(sub.listener, thread=self._listener_thread)
        elif sub.type is SubscriptionType.USER_ASSIGNED:
            self._subscription.request_commit_refresh()
        diff = consumer_subscription_diff(self._subscription_key, subscription_view(sub))
        self._subscription_key = diff.key
        if isinstance(diff.event, cg.Subscribed) and not diff.event.regex:
            self._update_metadata_topics()
        if isinstance(diff.event, cg.Subscribed | cg.UnsubscribeRequested):
            self._feed(diff.event)

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

    def check_running(self) -> None:
        routine = self._routine
        if routine is None or routine.done():
            raise KafkaError("the group coordinator is not running")

    async def coordinator_node(self) -> int:
        while self._node is None:
            self.check_running()
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
        m = self._membership
        rules = CommitRules(
            lambda code: cg.commit_outcome(kind, code, in_group=m.in_group),
            lambda code: cg.offset_fetch_outcome(code, in_group=m.in_group),
            cg.code_name,
            _STALE_EPOCH,
        )
        await self._commits.commit(offsets, rules)

    async def _auto_commit(self, partitions: Iterable[TopicPartition] | None, why: str) -> None:
        """Commit positions of ``partitions`` (None: all assigned); failures are logged only."""
        timeout = self._config.request_timeout_ms / 1000
        await auto_commit(
            self._subscription,
            partitions,
            why,
            lambda offsets: self.commit_offsets(offsets, timeout=timeout, kind=cg.CommitKind.AUTO),
            self._group_id,
        )

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
        m = self._membership
        rules = CommitRules(
            lambda code: cg.commit_outcome(cg.CommitKind.USER, code, in_group=m.in_group),
            lambda code: cg.offset_fetch_outcome(code, in_group=m.in_group),
            cg.code_name,
            _STALE_EPOCH,
        )
        async with async_timeout.timeout(timeout):
            return await self._commits.fetch(tps, rules)

    async def _fetch_for_refresh(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return await self.fetch_committed_offsets(
            tps, timeout=self._config.request_timeout_ms / 1000
        )

    # -- CommitPort: what the commit client borrows from this shell --------------------

    def commit_request(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> tuple[Any, int]:
        if not self._subscription.subscription.group_managed:
            # User-assigned partitions: a simple commit outside the group.
            return OffsetCommitRequest(self._group_id, -1, "", None, offsets), -1
        gate = self._membership.commit_gate()
        if not gate.allowed:
            raise CommitFailedError(f"cannot commit: {gate.refusal}")
        request = ConsumerOffsetCommitRequest(
            self._group_id,
            gate.member_epoch,
            gate.member_id,
            self._config.group_instance_id,
            offsets,
        )
        return request, gate.member_epoch

    def fetch_request(self, partitions: list[TopicPartition]) -> Any:
        m = self._membership
        if m.in_group:
            return ConsumerOffsetFetchRequest(
                self._group_id, m.member_id, m.member_epoch, partitions
            )
        return OffsetFetchRequest(self._group_id, partitions, require_stable=True)

    async def send(self, node: int, request: Any) -> Any:
        send = self._client.send(node, request, group=ConnectionGroup.COORDINATION)
        return await self.metrics.timed_group_request(request, send)

    def next_epoch(self) -> Callable[[], Awaitable[None]]:
        # Java retries a STALE_MEMBER_EPOCH commit with the epoch the next heartbeat
        # brings; taken before the send so a heartbeat answered meanwhile counts.
        changed = self._epoch_changed
        backoff = self._retry_backoff * 10

        async def wait() -> None:
            waiter = asyncio.ensure_future(changed.wait())
            try:
                await asyncio.wait({waiter}, timeout=backoff)
            finally:
                waiter.cancel()

        return wait

    def commit_answered(self, result: Any, generation: int) -> None:
        pass  # the consumer-protocol machine learns of its epoch from heartbeats only

    def offsets_request_failed(self, api: str, kind: str, generation: int, detail: str) -> None:
        pass  # retried on the same coordinator; heartbeats find a moved one


def _tps(partitions: Iterable[tuple[str, int]]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(topic, partition) for topic, partition in partitions)
