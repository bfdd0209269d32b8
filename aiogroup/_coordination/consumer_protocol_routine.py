"""The consumer-protocol (KIP-848) coordination routine: performs what the machine decides.

``GroupConsumer(..., group_protocol="consumer")`` builds this instead of the
classic :class:`~aiogroup._coordination.classic_routine.GroupCoordinator`; it offers the same
surface to the consumer (start, close, abort, commit_offsets,
fetch_committed_offsets, member_id, generation_id).

How the routine lives - one inbox, lifecycle, supervision, the commit surface - is
:class:`~aiogroup._coordination.routine.CoordinationRoutine`'s, shared with the
classic shell.  What is KIP-848's is here: the machine
(:class:`~aiogroup._membership.consumer_group.ConsumerMembership`), its performers
(:data:`_PERFORMERS`), and its wire calls - ConsumerGroupHeartbeat, FindCoordinator,
topic ids, the session timeout (DescribeConfigs) and the epoch-carrying commits.
Nothing is decided here.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.errors import IncompatibleBrokerVersion

from aiogroup._coordination.commit_client import failure_kind
from aiogroup._coordination.commit_outcome import CommitRules
from aiogroup._coordination.coordinator_lookup import look_up_coordinator
from aiogroup._coordination.routine import CoordinationRoutine, topic_partitions
from aiogroup._coordination.tracking import consumer_subscription_diff
from aiogroup._coordination.watch import subscription_view
from aiogroup._membership import actions as A
from aiogroup._membership import consumer_group as cg
from aiogroup._membership import events as E
from aiogroup._membership.codes import ErrorCode, code_name
from aiogroup._membership.commit_outcomes import CommitKind, CommitProtocol
from aiogroup._protocol.consumer_group import (
    ConsumerGroupHeartbeatRequest,
    ConsumerOffsetCommitRequest,
    ConsumerOffsetFetchRequest,
    TopicIdsRequest,
    parse_consumer_group_heartbeat,
    parse_topic_ids,
)
from aiogroup._protocol.group import (
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from aiogroup._protocol.group_configs import parse_session_timeout, session_timeout_request
from aiogroup._state.subscription import SubscriptionState, SubscriptionType
from aiogroup.config import REMOTE_ASSIGNORS, ConsumerConfig
from aiogroup.errors import (
    CommitFailedError,
    ConfigurationError,
    KafkaError,
    error_for_code,
)
from aiogroup.group_metadata import MemberIdentity
from aiogroup.metrics import ConsumerMetrics
from aiogroup.structs import OffsetAndMetadata, TopicPartition

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


class ConsumerGroupCoordinator(CoordinationRoutine):
    """Keeps one consumer in a consumer-protocol group: heartbeat, reconcile, commit."""

    task_name = "kip848"

    def __init__(
        self, client: AIOKafkaClient, subscription: SubscriptionState, config: ConsumerConfig
    ) -> None:
        if config.group_id is None:
            raise ConfigurationError("ConsumerGroupCoordinator needs config.group_id")
        # KIP-1082: the client names itself, once, and keeps the id across rejoins.
        self._membership = cg.ConsumerMembership(
            config.group_id,
            str(uuid.uuid4()),
            instance_id=config.group_instance_id,
            server_assignor=config.group_remote_assignor,
            rebalance_timeout_ms=config.effective_rebalance_timeout_ms,
            retry_backoff=config.retry_backoff_ms / 1000,
            max_poll_interval=config.max_poll_interval_ms / 1000,
            auto_commit=config.enable_auto_commit,
            auto_commit_interval=config.auto_commit_interval_ms / 1000,
            learn_session_timeout=True,
        )
        #: The session is the broker's (group.consumer.session.timeout.ms).
        super().__init__(
            client, subscription, config, ConsumerMetrics(), self._membership, _PERFORMERS
        )
        self._node: int | None = None
        #: Set once the coordinator is first known (commits wait on it).
        self._node_known = asyncio.Event()
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

    def identity(self) -> MemberIdentity:
        # The member epoch in the generation's place (KIP-848), as Java's metadata has it.
        m = self._membership
        return MemberIdentity(
            generation_id=m.member_epoch,
            member_id=m.member_id,
            in_group=m.in_group,
            stopped=m.finished,
            state=m.state_name,
        )

    @property
    def membership(self) -> cg.ConsumerMembership:
        """The machine itself, for inspection in tests; never mutate it from outside."""
        return self._membership

    # -- the routine's hooks -------------------------------------------------------------

    def _generation_key(self) -> object:
        # The member id is kept across rejoins (KIP-1082); a generation here is one
        # membership: from the first epoch the broker gives to a fence or a leave.
        m = self._membership
        return m.member_id if m.member_epoch > 0 else None

    def _after_step(self) -> None:
        # The delivery gate: past it the coordinator may have fenced this member.
        self._subscription.set_membership_valid_until(self._membership.membership_valid_until())

    def _commit_rules(self, auto: bool) -> CommitRules:
        m = self._membership
        kind = CommitKind.AUTO if auto else CommitKind.USER
        return CommitRules(CommitProtocol.CONSUMER, _STALE_EPOCH, kind, lambda: m.in_group)

    # -- the performers (one an action type; the table is _PERFORMERS below) -------------

    def _send_heartbeat(self, action: A.SendConsumerGroupHeartbeat) -> None:
        self._children.spawn(self._heartbeat(action), "ConsumerGroupHeartbeat")

    def _find(self, action: A.FindCoordinator) -> None:
        log.debug("group %s: finding coordinator (%s)", self._group_id, action.reason)
        self._children.spawn(self._find_coordinator(), "FindCoordinator")

    def _perform_set_assignment(self, action: A.SetAssignment) -> None:
        self._set_assignment(action.partitions or frozenset())

    def _revoke(self, action: A.InvokeOnPartitionsRevoked) -> None:
        # A reconciliation's first callback: the rebalance, as this member sees it,
        # runs from here to the end of its on_partitions_assigned (metrics).
        self.metrics.rebalance_started()
        parts = topic_partitions(action.partitions)
        self._subscription.mark_revoking(parts)
        self._start_revoke(parts, action.commit_first)

    def _assigned(self, action: A.InvokeOnPartitionsAssigned) -> None:
        parts = topic_partitions(action.partitions)
        log.info(
            "group %s: epoch %d assigned %s",
            self._group_id,
            self._membership.member_epoch,
            sorted(parts) or "no new partitions",
        )
        # As in the classic shell (and in Java, whose poll() runs the callback): no
        # record of a new partition is handed out until the callback, and the seeks to
        # the offsets it returns, are done, however it ends.
        self._subscription.mark_assigning(parts, True)
        self.metrics.rebalance_started()  # no-op when its revoke step started it

        def done() -> None:
            self._subscription.mark_assigning(parts, False)
            self.metrics.rebalance_completed()

        self._listeners.start(E.Listener.ASSIGNED, lambda: self._run_assigned(parts), on_done=done)

    def _lost(self, action: A.InvokeOnPartitionsLost) -> None:
        lost = topic_partitions(action.partitions)
        self.metrics.partitions_were_lost(len(lost))
        self._start_lost(lost)

    def _lookup_session_timeout(self, action: A.LookupSessionTimeout) -> None:
        self._children.spawn(self._learn_session_timeout(), "DescribeConfigs")

    def _request_metadata(self, action: A.RequestMetadata) -> None:
        self._children.spawn(self._resolve_topic_ids(), "Metadata")

    def _perform_raise(self, action: A.RaiseToApplication) -> None:
        exc: BaseException
        if action.exception is not None:
            exc = action.exception
        elif action.error_code is not None and action.error_code > 0:
            exc = error_for_code(action.error_code)(action.message)
        else:
            exc = KafkaError(action.message)
        self._raise_to_application(exc, action.message, action.fatal)

    # -- subscription ------------------------------------------------------------------

    def _on_subscription_poke(self) -> None:
        sub = self._subscription.subscription
        if sub.type is SubscriptionType.USER_ASSIGNED:
            self._subscription.request_commit_refresh()
        diff = consumer_subscription_diff(self._subscription_key, subscription_view(sub))
        self._subscription_key = diff.key
        if isinstance(diff.event, E.Subscribed) and not diff.event.regex:
            self._update_metadata_topics()
        if isinstance(diff.event, E.Subscribed | E.UnsubscribeRequested):
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
        tps = topic_partitions(partitions)
        self._update_metadata_topics(tp.topic for tp in tps)
        if sub.subscription.type is SubscriptionType.AUTO_PATTERN:
            sub.set_matched_topics(tp.topic for tp in tps)
        sub.set_assignment(tps)

    # -- requests (each in its own child task, each ending in one event) ---------------

    async def _find_coordinator(self) -> None:
        event = await look_up_coordinator(self._client, self._group_id, self.metrics)
        if isinstance(event, E.CoordinatorFound):
            self._node = event.node_id
            self._node_known.set()
        self._inbox.put_nowait(event)

    async def _heartbeat(self, action: A.SendConsumerGroupHeartbeat) -> None:
        event: E.Event
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
                    code_name(r.error_code),
                    r.error_message,
                )
            event = E.ConsumerGroupHeartbeatResponseReceived(
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
            event = E.ConsumerGroupHeartbeatResponseReceived(
                ErrorCode.UNSUPPORTED_VERSION, error_message=str(exc)
            )
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            log.debug("group %s: heartbeat failed: %r", self._group_id, exc)
            event = E.ConsumerGroupHeartbeatFailed(
                failure_kind(exc), action.member_epoch, repr(exc)
            )
        self._inbox.put_nowait(event)
        self._epoch_changed.set()
        self._epoch_changed = asyncio.Event()

    async def _learn_session_timeout(self) -> None:
        """Ask a broker for the group's session timeout (one try; the machine decides
        whether and when to ask again)."""
        node = self._client.get_random_node()
        try:
            if node is None:
                raise KafkaError("no broker known")
            resp = await self._client.send(node, session_timeout_request(self._group_id, node))
            ms = parse_session_timeout(resp)
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            log.debug("group %s: session timeout lookup failed (%r)", self._group_id, exc)
            self._inbox.put_nowait(E.SessionTimeoutLookupFailed(exc))
            return
        if ms is None:
            log.info(
                "group %s: the broker did not tell the consumer session timeout; "
                "records are handed out only within a heartbeat interval of the "
                "last heartbeat acknowledged",
                self._group_id,
            )
        self._inbox.put_nowait(E.SessionTimeoutLearned(ms or 0))

    async def _resolve_topic_ids(self) -> None:
        """Ask any broker for the id <-> name map of every topic (one try; the machine
        asks again while an assigned id has no name)."""
        node = self._client.get_random_node()
        try:
            if node is None:
                raise KafkaError("no broker known")
            names = parse_topic_ids(await self._client.send(node, TopicIdsRequest(None)))
        except IncompatibleBrokerVersion as exc:
            self._inbox.put_nowait(E.BrokerIncompatible("Metadata", exc))
            return
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            log.debug("group %s: topic id lookup failed (%r)", self._group_id, exc)
            self._inbox.put_nowait(E.TopicNamesLookupFailed(exc))
            return
        self._inbox.put_nowait(E.TopicNamesResolved(names))

    # -- commits -----------------------------------------------------------------------

    async def coordinator_node(self) -> int:
        """The coordinator, once the heartbeat's lookup found it (or the routine ended)."""
        while self._node is None:
            self.check_running()
            routine = self._routine
            assert routine is not None
            known = asyncio.ensure_future(self._node_known.wait())
            try:
                await asyncio.wait({known, routine}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                known.cancel()
        return self._node

    def commit_request(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> tuple[Any, int]:
        if not self._subscription.subscription.group_managed:
            # User-assigned partitions: a simple commit outside the group.
            return OffsetCommitRequest(self._group_id, -1, "", None, offsets), -1
        gate = self._membership.commit_gate()
        if not gate.allowed:
            raise CommitFailedError(f"cannot commit: {gate.refusal}")
        request = ConsumerOffsetCommitRequest(
            self._group_id,
            gate.generation_id,
            gate.member_id,
            self._config.group_instance_id,
            offsets,
        )
        return request, gate.generation_id

    def fetch_request(self, partitions: list[TopicPartition]) -> Any:
        m = self._membership
        if m.in_group:
            return ConsumerOffsetFetchRequest(
                self._group_id, m.member_id, m.member_epoch, partitions
            )
        return OffsetFetchRequest(self._group_id, partitions, require_stable=True)

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

    # The machine learns of its epoch from heartbeats only (commit_answered is not
    # needed), and a commit or fetch without an answer is retried on the same
    # coordinator: heartbeats find a moved one (offsets_request_failed neither).


#: Action type -> its performer: every action the consumer-protocol machine can return.
_PERFORMERS: dict[type[A.Action], Callable[[ConsumerGroupCoordinator, Any], None]] = {
    A.SendConsumerGroupHeartbeat: ConsumerGroupCoordinator._send_heartbeat,
    A.FindCoordinator: ConsumerGroupCoordinator._find,
    A.SetAssignment: ConsumerGroupCoordinator._perform_set_assignment,
    A.InvokeOnPartitionsRevoked: ConsumerGroupCoordinator._revoke,
    A.InvokeOnPartitionsAssigned: ConsumerGroupCoordinator._assigned,
    A.InvokeOnPartitionsLost: ConsumerGroupCoordinator._lost,
    A.RequestMetadata: ConsumerGroupCoordinator._request_metadata,
    A.RaiseToApplication: ConsumerGroupCoordinator._perform_raise,
    A.LogWarning: ConsumerGroupCoordinator._perform_log_warning,
    A.AutoCommit: ConsumerGroupCoordinator._perform_auto_commit,
    A.RefreshCommittedOffsets: ConsumerGroupCoordinator._perform_refresh_committed,
    A.LookupSessionTimeout: ConsumerGroupCoordinator._lookup_session_timeout,
}
