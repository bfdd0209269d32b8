"""The classic coordination routine: a thin async shell around :class:`Membership`.

This is the only module that both awaits the network and calls the classic
membership machine, and it decides nothing itself: every event (a response, a
timer, a listener finishing, the subscription changing) is fed to
``Membership.handle`` and the actions it returns are performed through
:data:`_PERFORMERS`.  How the routine lives - inbox, lifecycle, supervision, the
commit surface - is :class:`~aiogroup._coordination.routine.CoordinationRoutine`'s,
shared with the KIP-848 shell; what is classic is here: the machine, its performers,
the group requests (:mod:`aiogroup._coordination.group_requests`), partition-count
tracking, and giving up a held JoinGroup on close.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka.client import AIOKafkaClient

from aiogroup._coordination.commit_outcome import CommitRules
from aiogroup._coordination.group_requests import ClassicRequests
from aiogroup._coordination.routine import CoordinationRoutine, topic_partitions
from aiogroup._coordination.topic_watch import TopicWatch
from aiogroup._coordination.tracking import classic_subscription_diff
from aiogroup._coordination.watch import subscription_view
from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership.codes import ErrorCode
from aiogroup._membership.commit_outcomes import CommitKind, CommitProtocol
from aiogroup._membership.machine import Membership, MemberState
from aiogroup._protocol.group import OffsetCommitRequest, OffsetFetchRequest
from aiogroup._state.subscription import SubscriptionState, SubscriptionType
from aiogroup._support.timeouts import wait_for
from aiogroup.assignors import inconsistent_protocol_hint, select_rebalance_protocol
from aiogroup.assignors.abc import ConsumerPartitionAssignor
from aiogroup.config import ConsumerConfig
from aiogroup.errors import (
    CommitFailedError,
    ConfigurationError,
    KafkaError,
    authorization_error,
    error_for_code,
)
from aiogroup.group_metadata import MemberIdentity
from aiogroup.metrics import ConsumerMetrics
from aiogroup.structs import OffsetAndMetadata, RebalanceProtocol, TopicPartition

__all__ = ["GroupCoordinator"]

log = logging.getLogger("aiogroup.coordinator")

#: CommitFailedError's text when the generation moved on (the Java client's contract).
_REBALANCED = (
    "commit failed with {code}: the group has rebalanced and {tp} may belong to another member now"
)


@dataclass(frozen=True, slots=True)
class _MetadataPoke:
    """Cluster metadata was refreshed (pattern matches, partition counts)."""


class GroupCoordinator(CoordinationRoutine):
    """Keeps one consumer in its group: join, heartbeat, rebalance listeners, commits."""

    def __init__(
        self,
        client: AIOKafkaClient,
        subscription: SubscriptionState,
        config: ConsumerConfig,
        assignors: Sequence[ConsumerPartitionAssignor],
    ) -> None:
        if not assignors:
            raise ConfigurationError("GroupCoordinator needs at least one partition assignor")
        self._protocol = select_rebalance_protocol(assignors)
        #: Subscribed topics the last metadata said this principal may not read.
        self._denied_topics: frozenset[str] = frozenset()
        self._assignor_names = tuple(a.name for a in assignors)
        self._membership = Membership(
            protocol=self._protocol,
            session_timeout=config.session_timeout_ms / 1000,
            heartbeat_interval=config.heartbeat_interval_ms / 1000,
            max_poll_interval=config.max_poll_interval_ms / 1000,
            rebalance_timeout=config.effective_rebalance_timeout_ms / 1000,
            retry_backoff=config.retry_backoff_ms / 1000,
            auto_commit_interval=(
                config.auto_commit_interval_ms / 1000 if config.enable_auto_commit else None
            ),
            static_member=config.group_instance_id is not None,
            request_timeout=config.request_timeout_ms / 1000,
        )
        metrics = ConsumerMetrics(config.session_timeout_ms / 1000)
        super().__init__(client, subscription, config, metrics, self._membership, _PERFORMERS)
        self._requests: ClassicRequests = ClassicRequests(
            client,
            subscription,
            config,
            assignors,
            put=self._inbox.put_nowait,
            coordinator_id=lambda: self._membership.coordinator_id,
            metrics=lambda: self.metrics,
        )
        self._join_task: asyncio.Task[Any] | None = None
        #: (coordinator node, member id) to send LeaveGroup to after an abandoned join.
        self._leave_after_close: tuple[int, str] | None = None
        self._topics = TopicWatch(
            client,
            subscription,
            exclude_internal_topics=config.exclude_internal_topics,
            group_topics=lambda: self._requests.group_topics,
            assignor_counts=lambda: self._requests.assignor_counts,
        )
        self._coordinator_known = asyncio.Event()

    # -- read-only views ---------------------------------------------------------------

    @property
    def member_id(self) -> str:
        return self._membership.member_id

    @property
    def generation_id(self) -> int:
        return self._membership.generation_id

    @property
    def state(self) -> MemberState:
        return self._membership.state

    def identity(self) -> MemberIdentity:
        m = self._membership
        return MemberIdentity(
            generation_id=m.generation_id,
            member_id=m.member_id,
            in_group=m.in_generation and not m.finished,
            stopped=m.finished,
            state=m.state_name,
        )

    @property
    def rebalance_protocol(self) -> RebalanceProtocol:
        return self._protocol

    @property
    def coordinator_id(self) -> int | None:
        return self._membership.coordinator_id

    @property
    def membership(self) -> Membership:
        """The machine itself, for inspection in tests; never mutate it from outside."""
        return self._membership

    # -- the routine's hooks -------------------------------------------------------------

    def _generation_key(self) -> object:
        m = self._membership
        return (m.generation_id, m.member_id) if m.in_generation else None

    def _after_step(self) -> None:
        m = self._membership
        self._subscription.set_membership_valid_until(m.membership_valid_until())
        if m.coordinator_id is None:
            self._coordinator_known.clear()
        else:
            self._coordinator_known.set()

    def _commit_rules(self, auto: bool) -> CommitRules:
        kind = CommitKind.AUTO if auto else CommitKind.USER
        return CommitRules(CommitProtocol.CLASSIC, _REBALANCED, kind)

    def _on_start(self) -> None:
        self._client.cluster.add_listener(self._on_metadata)

    def _on_stop(self) -> None:
        self._client.cluster.remove_listener(self._on_metadata)

    def _dispatch_other(self, item: Any) -> None:
        if isinstance(item, _MetadataPoke):
            self._on_metadata_poke()
        else:
            self._feed(item)

    async def _after_close(self, remaining: float) -> None:
        if self._leave_after_close is None:
            return
        node, member_id = self._leave_after_close
        self._leave_after_close = None
        await wait_for(self._requests.leave_abandoned(node, member_id), remaining)

    def _abandon_join(self, action: A.AbandonJoin) -> None:
        """Cancel the JoinGroup task (it then reports nothing); the LeaveGroup, if the
        machine asks for one, goes out once the routine ended (``_after_close``)."""
        if self._join_task is not None:
            self._join_task.cancel()
        self._leave_after_close = action.leave

    # -- the performers (one an action type; the table is _PERFORMERS below) ---------------

    def _find_coordinator(self, action: A.FindCoordinator) -> None:
        log.debug("group %s: finding coordinator (%s)", self._group_id, action.reason)
        self._children.spawn(self._requests.find_coordinator(), "FindCoordinator")

    def _join_group(self, action: A.SendJoinGroup) -> None:
        log.info(
            "group %s: (re)joining - %s (member_id=%r, generation=%d, owned=%d partitions)",
            self._group_id,
            action.reason,
            action.member_id,
            action.generation_id,
            len(action.owned_partitions),
        )
        self.metrics.rebalance_started()
        self._join_task = self._children.spawn(self._requests.join_group(action), "JoinGroup")

    def _leave_group(self, action: A.SendLeaveGroup) -> None:
        log.info("group %s: leaving the group - %s", self._group_id, action.reason)
        self._children.spawn(self._requests.leave_group(action), "LeaveGroup")

    def _assigned(self, action: A.InvokeOnPartitionsAssigned) -> None:
        log.info(
            "group %s: generation %d assigned %s",
            self._group_id,
            action.generation_id,
            sorted(action.partitions) or "no new partitions",
        )
        # New partitions are held until the callback (and the seeks to the offsets
        # it returns) are done, however it ends.
        added = topic_partitions(action.partitions)
        self._subscription.mark_assigning(added, True)
        self._listeners.start(
            E.Listener.ASSIGNED,
            lambda: self._run_assigned(added),
            on_done=lambda: self._subscription.mark_assigning(added, False),
        )

    def _backoff(self, action: A.Backoff) -> None:
        log.debug("group %s: backing off %.3fs: %s", self._group_id, action.seconds, action.reason)

    def _perform_mark_revoking(self, action: A.MarkRevoking) -> None:
        if self._subscription.subscription.type is SubscriptionType.USER_ASSIGNED:
            # unsubscribe() then assign(): the group's partitions are revoked after the
            # application took partitions by hand; those are not the group's to stop.
            return
        self._subscription.mark_revoking(action.partitions)

    def _lost(self, action: A.InvokeOnPartitionsLost) -> None:
        self.metrics.partitions_were_lost(len(action.partitions))
        self._start_lost(topic_partitions(action.partitions))

    def _perform_set_assignment(self, action: A.SetAssignment) -> None:
        sub = self._subscription
        if sub.subscription.type is SubscriptionType.USER_ASSIGNED:
            return  # the application switched to assign(): that assignment is its own
        if action.partitions is None:
            sub.set_assignment(None)
        else:
            sub.set_assignment(topic_partitions(action.partitions))
            missing = self._topics.snapshot()
            self._inbox.put_nowait(E.SubscribedTopicsMissing(missing))
            self.metrics.rebalance_completed()

    def _lookup_missing_topics(self, action: A.LookupMissingTopics) -> None:
        async def lookup() -> None:
            missing = await self._topics.still_missing(action.topics)
            self._inbox.put_nowait(E.SubscribedTopicsMissing(missing))

        self._generation.spawn(lookup(), "missing-topics")

    def _perform_raise(self, action: A.RaiseToApplication) -> None:
        exc: BaseException
        if action.exception is not None:
            exc = action.exception
        elif action.error_code is not None:
            message = action.message
            if action.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL:
                message += inconsistent_protocol_hint(self._assignor_names)
            exc = error_for_code(action.error_code)(message)
        else:
            exc = KafkaError(action.message)
        self._raise_to_application(exc, action.message, action.fatal)

    # -- subscription and metadata --------------------------------------------------------

    def _on_metadata(self, cluster: Any) -> None:
        self._report_unauthorized_topics(cluster)
        self._inbox.put_nowait(_MetadataPoke())

    def _report_unauthorized_topics(self, cluster: Any) -> None:
        """A subscribed topic the principal may not read: the next poll (and start())
        raises TopicAuthorizationFailedError naming it, as Java's poll does.  Without
        this the topic is merely absent from metadata, and the member gets a silent
        empty assignment.  Reported once per change of the refused set."""
        subscribed = self._subscription.subscription.effective_topics
        denied = frozenset(getattr(cluster, "unauthorized_topics", ())) & subscribed
        if denied and denied != self._denied_topics:
            error = authorization_error(
                29, group_id=self._group_id, topics=denied, during="Metadata"
            )
            self._raise_to_application(error, str(error), False)
        self._denied_topics = denied

    def _on_subscription_poke(self) -> None:
        sub = self._subscription.subscription
        if sub.group_managed:
            self._topics.follow_subscription()
        elif sub.type is SubscriptionType.USER_ASSIGNED:
            self._subscription.request_commit_refresh()
        diff = classic_subscription_diff(self._subscription_key, subscription_view(sub))
        self._subscription_key = diff.key
        if isinstance(diff.event, E.SubscriptionChanged):
            self._feed(diff.event)

    def _on_metadata_poke(self) -> None:
        m = self._membership
        event = self._topics.metadata_changed(
            leader=m.leader_id is not None and m.leader_id == m.member_id
        )
        if event is not None:
            self._feed(event)

    # -- CommitPort: what the commit client borrows from this shell --------------------------

    async def coordinator_node(self) -> int:
        while True:
            node = self._membership.coordinator_id
            if node is not None:
                return node
            self.check_running()
            routine = self._routine
            assert routine is not None
            self._inbox.put_nowait(E.CoordinatorRequested())
            known = asyncio.ensure_future(self._coordinator_known.wait())
            try:
                await asyncio.wait({known, routine}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                known.cancel()

    def commit_request(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> tuple[Any, int]:
        m = self._membership
        if self._subscription.subscription.group_managed or m.in_generation:
            gate = m.commit_gate(offsets)
            if not gate.allowed:
                raise CommitFailedError(gate.refusal)
            generation_id, member_id = gate.generation_id, gate.member_id
            instance = self._config.group_instance_id
        else:  # user-assigned partitions: a "simple" commit outside any generation
            generation_id, member_id, instance = -1, "", None
        request = OffsetCommitRequest(self._group_id, generation_id, member_id, instance, offsets)
        return request, generation_id

    def fetch_request(self, partitions: list[TopicPartition]) -> Any:
        # require_stable (KIP-447, OffsetFetch v7+; dropped for older brokers): a
        # transactional commit of these partitions still pending is answered
        # UNSTABLE_OFFSET_COMMIT, retried, rather than with the offset before it - a
        # new owner would otherwise re-process input whose output is being committed.
        return OffsetFetchRequest(self._group_id, partitions, require_stable=True)

    def commit_answered(self, result: Any, generation: int) -> None:
        self._inbox.put_nowait(E.OffsetCommitResponseReceived(result, generation))

    def offsets_request_failed(self, api: str, kind: str, generation: int, detail: str) -> None:
        if api == "OffsetCommit":
            self._inbox.put_nowait(E.OffsetCommitFailed(kind, generation, detail))
        else:
            self._inbox.put_nowait(E.OffsetFetchFailed(kind))


#: Action type -> its performer: every action the classic machine can return.
_PERFORMERS: dict[type[A.Action], Callable[[GroupCoordinator, Any], object]] = {
    A.AbandonJoin: GroupCoordinator._abandon_join,
    A.FindCoordinator: GroupCoordinator._find_coordinator,
    A.SendJoinGroup: GroupCoordinator._join_group,
    A.ComputeAssignment: lambda c, a: c._children.spawn(
        c._requests.compute_assignment(a), "assign"
    ),
    A.SendSyncGroup: lambda c, a: c._children.spawn(c._requests.sync_group(a), "SyncGroup"),
    A.SendHeartbeat: lambda c, a: c._children.spawn(c._requests.heartbeat(a), "Heartbeat"),
    A.SendLeaveGroup: GroupCoordinator._leave_group,
    A.MarkRevoking: GroupCoordinator._perform_mark_revoking,
    A.InvokeOnPartitionsRevoked: lambda c, a: c._start_revoke(
        topic_partitions(a.partitions), a.commit_first
    ),
    A.InvokeOnPartitionsAssigned: GroupCoordinator._assigned,
    A.InvokeOnPartitionsLost: GroupCoordinator._lost,
    A.CancelListener: lambda c, a: c._listeners.cancel(a.reason),
    A.SetAssignment: GroupCoordinator._perform_set_assignment,
    A.AutoCommit: GroupCoordinator._perform_auto_commit,
    A.RefreshCommittedOffsets: GroupCoordinator._perform_refresh_committed,
    A.LookupMissingTopics: GroupCoordinator._lookup_missing_topics,
    A.Backoff: GroupCoordinator._backoff,
    A.RaiseToApplication: GroupCoordinator._perform_raise,
    A.LogWarning: GroupCoordinator._perform_log_warning,
}
