"""The coordination routine: a thin async shell around :class:`Membership`.

This is the only module that both awaits the network and calls the membership
machine, and it decides nothing itself: every event (a response, a timer, a
listener finishing, the subscription changing) is fed to ``Membership.handle``
and the actions it returns are performed in order.

Tasks (one owner, no leaks):

* the **coordination routine** - the single writer of the machine.  It waits on
  its inbox until the machine's next deadline, feeds what arrives, performs
  the actions;
* **request tasks** - one per group request (FindCoordinator, JoinGroup, SyncGroup,
  Heartbeat, LeaveGroup), so a slow JoinGroup never delays a heartbeat; each
  reports its answer (or transport failure) back as an event;
* **listener tasks** - the application's rebalance callbacks, so heartbeats keep
  flowing while a slow ``on_partitions_revoked`` runs; completion comes back as
  ``ListenerCompleted``;
* the **commit-refresh task** - looks up committed offsets of partitions waiting
  for them (``FetchStatus.AWAITING_COMMITTED``), also for user-assigned partitions;
* a **subscription watcher** that turns subscription changes into inbox items.

All children are cancelled and awaited when the routine ends, however it ends.
``close()`` lets the machine run revoke -> LeaveGroup under a bounded, shielded
deadline; cancelling the routine from outside (``abort()``, a crash) sends nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import async_timeout
from aiokafka.client import AIOKafkaClient
from aiokafka.errors import (
    IllegalStateError,
    KafkaError,
)

from aiogroup._coordination.commit_client import (
    CommitClient,
    auto_commit,
)
from aiogroup._coordination.commit_outcome import CommitRules
from aiogroup._coordination.group_requests import ClassicRequests
from aiogroup._coordination.listener_runner import ListenerRunner
from aiogroup._coordination.supervision import TaskScope
from aiogroup._coordination.tracking import (
    classic_subscription_diff,
    partition_count_change,
    snapshot_counts,
)
from aiogroup._coordination.watch import spawn_lifetime_children, subscription_view
from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership.machine import (
    Membership,
    MembershipProtocolError,
    MemberState,
    code_name,
    commit_outcome,
    offset_fetch_outcome,
)
from aiogroup._protocol.group import (
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from aiogroup._timeouts import wait_for
from aiogroup.assignors import select_rebalance_protocol
from aiogroup.assignors.abc import ConsumerPartitionAssignor
from aiogroup.config import ConsumerConfig
from aiogroup.errors import (
    CommitFailedError,
    ConfigurationError,
    error_for_code,
)
from aiogroup.listeners import AsyncConsumerRebalanceListener, ListenerThread, as_async_listener
from aiogroup.metrics import ConsumerMetrics
from aiogroup.structs import OffsetAndMetadata, RebalanceProtocol, TopicPartition
from aiogroup.subscription import SubscriptionState, SubscriptionType

__all__ = ["GroupCoordinator"]

log = logging.getLogger("aiogroup.coordinator")

#: CommitFailedError's text when the generation moved on (the Java client's contract).
_REBALANCED = (
    "commit failed with {code}: the group has rebalanced and {tp} may belong to another member now"
)


@dataclass(frozen=True, slots=True)
class _SubscriptionPoke:
    """The subscription object changed; the routine reads it and tells the machine."""


#: Longest wait between metadata requests for a subscribed topic the cluster does not
#: show yet (Java's retry.backoff.max.ms default).
_MISSING_TOPIC_BACKOFF_MAX = 1.0


@dataclass(frozen=True, slots=True)
class _MetadataPoke:
    """Cluster metadata was refreshed (pattern matches, partition counts)."""


@dataclass(frozen=True, slots=True)
class _ChildCrashed:
    """A child task failed in a way it could not turn into an event (a bug)."""

    exc: BaseException


@dataclass(frozen=True, slots=True)
class _AbandonJoin:
    """close() was called: a JoinGroup still held by the broker is given up (leave at once)."""


_InboxItem = E.Event | _SubscriptionPoke | _MetadataPoke | _ChildCrashed | _AbandonJoin


class GroupCoordinator:
    """Keeps one consumer in its group: join, heartbeat, rebalance listeners, commits."""

    def __init__(
        self,
        client: AIOKafkaClient,
        subscription: SubscriptionState,
        config: ConsumerConfig,
        assignors: Sequence[ConsumerPartitionAssignor],
    ) -> None:
        if config.group_id is None:
            raise ConfigurationError("GroupCoordinator needs config.group_id")
        if not assignors:
            raise ConfigurationError("GroupCoordinator needs at least one partition assignor")
        self._client = client
        self._subscription = subscription
        self._config = config
        self._group_id: str = config.group_id
        self._assignors = list(assignors)
        self._protocol = select_rebalance_protocol(self._assignors)
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
        )
        self._retry_backoff = config.retry_backoff_ms / 1000
        self._missing_topics_task: asyncio.Task[Any] | None = None
        self._inbox: asyncio.Queue[_InboxItem] = asyncio.Queue()
        self._routine: asyncio.Task[None] | None = None
        self._requests = ClassicRequests(
            client,
            subscription,
            config,
            assignors,
            put=self._inbox.put_nowait,
            coordinator_id=lambda: self._membership.coordinator_id,
            metrics=lambda: self.metrics,
        )
        self._children = TaskScope(lambda exc: self._inbox.put_nowait(_ChildCrashed(exc)))
        self._commits = CommitClient(self, self._group_id, self._retry_backoff)
        self._rules = CommitRules(commit_outcome, offset_fetch_outcome, code_name, _REBALANCED)
        self._join_task: asyncio.Task[Any] | None = None
        #: (coordinator node, member id) to send LeaveGroup to after an abandoned join.
        self._leave_after_close: tuple[int, str] | None = None
        self._listener_thread = ListenerThread()
        self._listeners = ListenerRunner(
            self._group_id, self._listener_thread, self._children.spawn, self._inbox.put_nowait
        )
        self._listener: AsyncConsumerRebalanceListener = AsyncConsumerRebalanceListener()
        self._coordinator_known = asyncio.Event()
        self._last_fed_poll: float | None = None
        self._subscription_key: object = None
        self._partition_counts: dict[str, int | None] = {}
        self._all_topics_metadata = False
        #: Replaced by GroupConsumer with the consumer's shared instance.
        self.metrics = ConsumerMetrics(config.session_timeout_ms / 1000)

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

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the coordination routine; returns at once (joining happens in the background)."""
        if self._routine is not None:
            raise IllegalStateError("GroupCoordinator.start() called twice")
        loop = asyncio.get_running_loop()
        self._routine = loop.create_task(self._run(), name=f"aiogroup-coordinator-{self._group_id}")

    async def close(self, *, timeout: float) -> None:
        """Commit (auto-commit), revoke, leave the group (dynamic members); bounded by ``timeout``.

        The routine performs the goodbye under a shield, so cancelling ``close()``
        itself only stops waiting; everything is torn down before returning or raising.
        """
        routine = self._routine
        if routine is None or routine.done():
            await self._finish_routine()
            return
        self._inbox.put_nowait(E.CloseRequested())
        self._inbox.put_nowait(_AbandonJoin())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            await wait_for(asyncio.shield(routine), timeout)
            if self._leave_after_close is not None:
                await wait_for(self._leave_abandoned(), max(0.0, deadline - loop.time()))
        except asyncio.TimeoutError:
            log.warning(
                "group %s: close did not finish within %.1fs; dropping the rest "
                "(no LeaveGroup: the session timeout will evict the member)",
                self._group_id,
                timeout,
            )
        except Exception:
            pass  # the routine already reported and logged its failure
        finally:
            await self._finish_routine()

    async def _leave_abandoned(self) -> None:
        assert self._leave_after_close is not None
        node, member_id = self._leave_after_close
        self._leave_after_close = None
        await self._requests.leave_abandoned(node, member_id)

    async def abort(self) -> None:
        """Stop at once as if the process died: no commit, no revoke, no LeaveGroup."""
        await self._finish_routine()

    async def _finish_routine(self) -> None:
        routine = self._routine
        if routine is not None and not routine.done():
            routine.cancel()
        if routine is not None:
            # wait() neither raises the routine's error nor confuses its cancellation
            # with a cancellation of the caller (which still propagates from here).
            await asyncio.wait({routine})
            if not routine.cancelled() and routine.exception() is not None:
                log.debug("group %s: routine ended with %r", self._group_id, routine.exception())
        await self._children.aclose()
        self._listener_thread.close()

    # -- the routine ------------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        cluster = self._client.cluster
        cluster.add_listener(self._on_metadata)
        spawn_lifetime_children(
            self._children,
            self._subscription,
            lambda: self._inbox.put_nowait(_SubscriptionPoke()),
            self._fetch_for_refresh,
            self._retry_backoff,
            self._group_id,
        )
        # One getter outlives timeouts: wait() never cancels it, so no inbox item is
        # lost to a timeout and cancelling the routine never waits on the getter.
        getter: asyncio.Task[_InboxItem] | None = None
        try:
            self._on_subscription_poke()
            while self._membership.state not in (MemberState.CLOSED, MemberState.FATAL):
                deadline = self._membership.next_deadline()
                timeout = None if deadline is None else max(0.0, deadline - loop.time())
                if getter is None:
                    getter = loop.create_task(self._inbox.get())
                done, _ = await asyncio.wait({getter}, timeout=timeout)
                item: _InboxItem
                if getter in done:
                    item, getter = getter.result(), None
                else:
                    item = E.TimerFired()
                self._dispatch(item)
        except asyncio.CancelledError:
            raise
        except MembershipProtocolError as exc:
            log.error("group %s: membership machine rejected an event: %s", self._group_id, exc)
            self._subscription.report_error(KafkaError(f"group coordination failed: {exc}"))
            raise
        except Exception as exc:
            log.exception("group %s: coordination routine failed", self._group_id)
            self._subscription.report_error(KafkaError(f"group coordination failed: {exc!r}"))
            raise
        finally:
            if getter is not None:
                getter.cancel()
            cluster.remove_listener(self._on_metadata)
            await self._children.aclose()

    def _dispatch(self, item: _InboxItem) -> None:
        if isinstance(item, _ChildCrashed):
            raise item.exc
        if isinstance(item, _SubscriptionPoke):
            self._on_subscription_poke()
            return
        if isinstance(item, _MetadataPoke):
            self._on_metadata_poke()
            return
        if isinstance(item, _AbandonJoin):
            self._abandon_join()
            return
        self._feed(item)

    def _abandon_join(self) -> None:
        """Give up a JoinGroup in flight so close() leaves at once.

        A broker holds a JoinGroup until the rebalance completes (up to the rebalance
        timeout; Tansu about half the session timeout), so waiting for its answer made
        stop() take seconds.  The request task is cancelled - it then reports nothing -
        and the machine is told the join failed, which takes it to UNJOINED; with
        ``closing`` set it then leaves (LeaveGroup with the member id it has, if any)
        and closes.  Checked here, in the routine, so the state is current.
        """
        task = self._join_task
        m = self._membership
        if m.state is MemberState.PREPARING_REBALANCE and task is not None and task.cancel():
            if m.member_id and m.coordinator_id is not None and not m.static_member:
                # The machine counts the join as a failure (coordinator unknown) and
                # closes without a LeaveGroup; close() sends it once the routine ends.
                self._leave_after_close = (m.coordinator_id, m.member_id)
            self._feed(
                E.JoinGroupFailed(
                    "connection",
                    self._membership.generation_id,
                    "abandoned: the consumer is closing",
                )
            )

    def _feed(self, event: E.Event) -> None:
        """The one place the machine is driven; performs what it answers, in order."""
        loop = asyncio.get_running_loop()
        last_poll = self._subscription.last_poll
        if last_poll is not None and last_poll != self._last_fed_poll:
            self._last_fed_poll = last_poll
            self._perform_all(self._membership.handle(E.ApplicationPolled(last_poll), loop.time()))
        self._perform_all(self._membership.handle(event, loop.time()))
        machine = self._membership
        self._subscription.set_membership_valid_until(
            machine.timers.session_deadline() if machine.heartbeats_active else None
        )
        if self._membership.coordinator_id is None:
            self._coordinator_known.clear()
        else:
            self._coordinator_known.set()

    def _perform_all(self, actions: Iterable[A.Action]) -> None:
        for action in actions:
            self._perform(action)

    def _perform(self, action: A.Action) -> None:
        self.metrics.on_action(action)
        performer = _PERFORMERS.get(type(action))
        if performer is None:  # pragma: no cover - a new action type without a performer
            raise TypeError(f"no performer for {action!r}")
        performer(self, action)

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
        self._join_task = self._children.spawn(self._requests.join_group(action), "JoinGroup")

    def _compute_assignment(self, action: A.ComputeAssignment) -> None:
        self._children.spawn(self._requests.compute_assignment(action), "assign")

    def _sync_group(self, action: A.SendSyncGroup) -> None:
        self._children.spawn(self._requests.sync_group(action), "SyncGroup")

    def _heartbeat(self, action: A.SendHeartbeat) -> None:
        self._children.spawn(self._requests.heartbeat(action), "Heartbeat")

    def _leave_group(self, action: A.SendLeaveGroup) -> None:
        log.info("group %s: leaving the group - %s", self._group_id, action.reason)
        self._children.spawn(self._requests.leave_group(action), "LeaveGroup")

    def _mark_revoking(self, action: A.MarkRevoking) -> None:
        self._subscription.mark_revoking(action.partitions)

    def _revoke(self, action: A.InvokeOnPartitionsRevoked) -> None:
        log.info("group %s: revoking %s", self._group_id, sorted(action.partitions) or "nothing")
        parts = action.partitions
        commit_first = action.commit_first

        async def revoke() -> None:
            if commit_first:
                await self._auto_commit(parts, "before revocation")
            await self._listener.on_partitions_revoked(set(parts))

        self._listeners.start("revoked", revoke)

    def _assigned(self, action: A.InvokeOnPartitionsAssigned) -> None:
        log.info(
            "group %s: generation %d assigned %s",
            self._group_id,
            action.generation_id,
            sorted(action.partitions) or "no new partitions",
        )
        # New partitions are held until the callback (and the seeks to the offsets
        # it returns) are done, however it ends.
        added = action.partitions
        self._subscription.mark_assigning(added, True)
        self._listeners.start(
            "assigned",
            lambda: self._run_assigned(added),
            on_done=lambda: self._subscription.mark_assigning(added, False),
        )

    def _lost(self, action: A.InvokeOnPartitionsLost) -> None:
        log.warning(
            "group %s: membership lost; partitions lost: %s",
            self._group_id,
            sorted(action.partitions),
        )
        parts = action.partitions
        self._listeners.start("lost", lambda: self._listener.on_partitions_lost(set(parts)))

    def _cancel_listener(self, action: A.CancelListener) -> None:
        self._listeners.cancel(action.reason)

    def _start_auto_commit(self, action: A.AutoCommit) -> None:
        self._children.spawn(self._auto_commit(None, action.reason), "auto-commit")

    def _backoff(self, action: A.Backoff) -> None:
        log.debug("group %s: backing off %.3fs: %s", self._group_id, action.seconds, action.reason)

    async def _run_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        offsets = await self._listener.on_partitions_assigned(set(partitions))
        self._subscription.apply_start_offsets(offsets)

    # -- subscription and metadata --------------------------------------------------------

    def _on_metadata(self, cluster: Any) -> None:
        self._inbox.put_nowait(_MetadataPoke())

    def _on_subscription_poke(self) -> None:
        sub = self._subscription.subscription
        if sub.group_managed:
            # Kept after unsubscribe: the revocation that follows must reach it.
            self._listener = as_async_listener(sub.listener, thread=self._listener_thread)
            if sub.type is SubscriptionType.AUTO_PATTERN:
                if not self._all_topics_metadata:
                    self._all_topics_metadata = True
                    self._client.set_topics([])  # a pattern needs every topic's metadata
                self._match_pattern()
            else:
                self._client.set_topics(sorted(sub.topics | self._requests.group_topics))
        elif sub.type is SubscriptionType.USER_ASSIGNED:
            self._subscription.request_commit_refresh()
        diff = classic_subscription_diff(self._subscription_key, subscription_view(sub))
        self._subscription_key = diff.key
        if isinstance(diff.event, E.SubscriptionChanged):
            self._feed(diff.event)

    def _match_pattern(self) -> None:
        sub = self._subscription.subscription
        if sub.pattern is None:
            return
        topics = self._client.cluster.topics(self._config.exclude_internal_topics)
        self._subscription.set_matched_topics(t for t in topics if sub.pattern.match(t))

    def _current_counts(self, topics: Iterable[str]) -> dict[str, int | None]:
        cluster = self._client.cluster
        return {t: len(cluster.partitions_for_topic(t) or ()) or None for t in topics}

    def _on_metadata_poke(self) -> None:
        if self._subscription.subscription.type is SubscriptionType.AUTO_PATTERN:
            self._match_pattern()
        if not self._partition_counts:
            return
        machine = self._membership
        change = partition_count_change(
            self._partition_counts,
            self._current_counts(self._partition_counts),
            leader=machine.leader_id is not None and machine.leader_id == machine.member_id,
        )
        if change.resnapshot:
            self._snapshot_partition_counts()
        if change.event is not None:
            self._feed(change.event)

    def _snapshot_partition_counts(self) -> None:
        topics = self._requests.group_topics | self._subscription.subscription.effective_topics
        counts = snapshot_counts(
            topics, self._current_counts(topics), self._requests.assignor_counts
        )
        self._partition_counts = counts
        missing = sorted(t for t, n in counts.items() if n is None)
        if missing and (self._missing_topics_task is None or self._missing_topics_task.done()):
            self._missing_topics_task = self._children.spawn(
                self._refresh_until_known(missing), "missing-topics"
            )

    async def _refresh_until_known(self, topics: list[str]) -> None:
        """Ask for metadata again until every subscribed topic is known.

        A topic created just before the group formed can be missing from the metadata
        the assignment was computed on (the broker answering Metadata had not learnt
        it yet).  The group is then stable with those partitions owned by nobody, and
        the periodic refresh (``metadata_max_age_ms``, 5 minutes by default) would be
        the first to notice.  As Java's client does for a subscribed topic it cannot
        see, refresh with a capped backoff; once the topic appears the metadata
        listener reports the partition-count change and the member rejoins.
        """
        delay = self._retry_backoff
        cluster = self._client.cluster
        while any(not cluster.partitions_for_topic(t) for t in topics):
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MISSING_TOPIC_BACKOFF_MAX)
            await self._client.force_metadata_update()

    def _perform_set_assignment(self, action: A.SetAssignment) -> None:
        self._set_assignment(action.partitions)

    def _set_assignment(self, partitions: frozenset[TopicPartition] | None) -> None:
        sub = self._subscription
        if sub.subscription.type is SubscriptionType.USER_ASSIGNED:
            return  # the application switched to assign(): that assignment is its own
        sub.set_assignment(partitions)
        if partitions is not None:
            self._snapshot_partition_counts()

    def _raise_to_application(self, action: A.RaiseToApplication) -> None:
        exc: BaseException
        if action.exception is not None:
            exc = action.exception
        elif action.error_code is not None:
            exc = error_for_code(action.error_code)(action.message)
        else:
            exc = KafkaError(action.message)
        if action.fatal:
            log.error("group %s: fatal: %s", self._group_id, action.message)
        else:
            log.warning("group %s: %s", self._group_id, action.message)
        self._subscription.report_error(exc)

    # -- group requests (each in its own child task) ----------------------------------------

    async def send(self, node_id: int, request: Any) -> Any:
        """Send on the coordination connection, timed (the group-request latency metric)."""
        return await self._requests.send(node_id, request)

    # -- commits -----------------------------------------------------------------------------

    async def _wait_coordinator(self) -> int:
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

    def check_running(self) -> None:
        routine = self._routine
        if routine is None or routine.done():
            raise KafkaError("the group coordinator is not running")

    async def commit_offsets(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], *, timeout: float | None
    ) -> None:
        """Commit ``offsets`` for this group; raises CommitFailedError if the group moved on."""
        if not offsets:
            return
        async with async_timeout.timeout(timeout):
            await self._commit(dict(offsets))

    async def _commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        await self._commits.commit(offsets, self._rules)

    async def _auto_commit(self, partitions: Iterable[TopicPartition] | None, why: str) -> None:
        """Commit positions of ``partitions`` (None: all assigned); failures are logged only."""
        timeout = self._config.request_timeout_ms / 1000
        await auto_commit(
            self._subscription,
            partitions,
            why,
            lambda offsets: self.commit_offsets(offsets, timeout=timeout),
            self._group_id,
        )

    async def fetch_committed_offsets(
        self, partitions: Iterable[TopicPartition], *, timeout: float | None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None for partitions with none)."""
        tps = sorted(set(partitions))
        if not tps:
            return {}
        async with async_timeout.timeout(timeout):
            return await self._commits.fetch(tps, self._rules)

    async def _fetch_for_refresh(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return await self.fetch_committed_offsets(
            tps, timeout=self._config.request_timeout_ms / 1000
        )

    # -- CommitPort: what the commit client borrows from this shell --------------------------

    async def coordinator_node(self) -> int:
        return await self._wait_coordinator()

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
        return OffsetFetchRequest(self._group_id, partitions)

    def next_epoch(self) -> Callable[[], Awaitable[None]]:
        # Classic generations never ask for a retry with a newer epoch: a plain backoff.
        return lambda: asyncio.sleep(self._retry_backoff)

    def commit_answered(self, result: Any, generation: int) -> None:
        self._inbox.put_nowait(E.OffsetCommitResponseReceived(result, generation))

    def offsets_request_failed(self, api: str, kind: str, generation: int, detail: str) -> None:
        if api == "OffsetCommit":
            self._inbox.put_nowait(E.OffsetCommitFailed(kind, generation, detail))
        else:
            self._inbox.put_nowait(E.OffsetFetchFailed(kind))


#: Action type -> its performer: every action the classic machine can return.
_PERFORMERS: dict[type[A.Action], Callable[[GroupCoordinator, Any], None]] = {
    A.FindCoordinator: GroupCoordinator._find_coordinator,
    A.SendJoinGroup: GroupCoordinator._join_group,
    A.ComputeAssignment: GroupCoordinator._compute_assignment,
    A.SendSyncGroup: GroupCoordinator._sync_group,
    A.SendHeartbeat: GroupCoordinator._heartbeat,
    A.SendLeaveGroup: GroupCoordinator._leave_group,
    A.MarkRevoking: GroupCoordinator._mark_revoking,
    A.InvokeOnPartitionsRevoked: GroupCoordinator._revoke,
    A.InvokeOnPartitionsAssigned: GroupCoordinator._assigned,
    A.InvokeOnPartitionsLost: GroupCoordinator._lost,
    A.CancelListener: GroupCoordinator._cancel_listener,
    A.SetAssignment: GroupCoordinator._perform_set_assignment,
    A.AutoCommit: GroupCoordinator._start_auto_commit,
    A.Backoff: GroupCoordinator._backoff,
    A.RaiseToApplication: GroupCoordinator._raise_to_application,
}
