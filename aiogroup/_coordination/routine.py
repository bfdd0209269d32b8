"""The life of a coordination routine, shared by both group protocols.

The classic shell (:mod:`aiogroup._coordination.classic_routine`) and the KIP-848 shell
(:mod:`aiogroup._coordination.consumer_protocol_routine`) differ in their machine, their performers
and their wire calls - not in how a routine lives.  This base class is that life:

* one **inbox** and one **routine task**, the single writer of the machine: it waits
  on the inbox until the machine's next deadline, feeds what arrives (an
  ``ApplicationPolled`` first when the application's polls changed since the last
  step: one started or returned, or one is still waiting for records) and
  performs the actions through the shell's table of performers;
* **supervision**: a scope for the routine's life and one per generation
  (:mod:`aiogroup._support.supervision` says which child goes where); a child
  that crashes ends the routine;
* **lifecycle**: ``start``, ``close`` (the machine's goodbye under a bounded, shielded
  deadline), ``abort`` (cancel: nothing is sent, as when a process dies);
* the **commit surface** the consumer calls (``commit_offsets``,
  ``fetch_committed_offsets``) and the :class:`~aiogroup._coordination.commit_client.CommitPort`
  the commit client borrows.

Every error that reaches the application goes through the machine: the routine
feeds it an event and performs the ``RaiseToApplication`` it answers with
(:meth:`_raise_to_application`, the one place that calls ``report_error``).
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import async_timeout
from aiokafka.client import AIOKafkaClient, ConnectionGroup

from aiogroup._coordination.commit_client import CommitClient, auto_commit, refresh_committed
from aiogroup._coordination.commit_outcome import CommitRules
from aiogroup._coordination.listener_runner import ListenerRunner
from aiogroup._coordination.watch import watch_subscription
from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._state.subscription import SubscriptionState
from aiogroup._support.supervision import GenerationScopes, TaskScope
from aiogroup._support.timeouts import wait_for
from aiogroup.config import ConsumerConfig
from aiogroup.errors import (
    ConfigurationError,
    IllegalStateError,
    KafkaError,
    authorization_error,
    is_authorization_error,
    is_retriable,
)
from aiogroup.group_metadata import MemberIdentity
from aiogroup.listeners import AsyncConsumerRebalanceListener, ListenerThread
from aiogroup.metrics import ConsumerMetrics
from aiogroup.structs import OffsetAndMetadata, TopicPartition

__all__ = [
    "ChildCrashed",
    "CoordinationRoutine",
    "Machine",
    "SubscriptionPoke",
    "topic_partitions",
]

log = logging.getLogger("aiogroup.coordinator")

#: A problem reported again within this many seconds is logged at DEBUG, not WARNING:
#: the application still gets each one (its next poll raises), the log gets one a minute.
REPEAT_QUIET = 60.0


def topic_partitions(partitions: Iterable[A.Partition]) -> frozenset[TopicPartition]:
    """The machines' ``(topic, partition)`` pairs as the TopicPartitions users see."""
    return frozenset(TopicPartition(topic, partition) for topic, partition in partitions)


class Machine(Protocol):
    """What the routine drives: every membership machine has this shape and speaks
    the one vocabulary of :mod:`aiogroup._membership.events` and ``.actions``."""

    @property
    def finished(self) -> bool:
        """Nothing more will happen (closed or failed): the routine ends."""

    def handle(self, event: E.Event, now: float) -> list[A.Action]:
        """Feed one event at loop time ``now``; the actions to perform, in order."""

    def next_deadline(self) -> float | None:
        """When TimerFired is due (None: only an event can move the machine)."""

    @property
    def awaiting_poll(self) -> bool:
        """Out of the group for want of a poll: the application's next poll must wake us."""

    @property
    def failed(self) -> bool:
        """Stopped for good on an unrecoverable error."""

    @property
    def joined(self) -> bool:
        """In the group with an assignment installed (readiness)."""

    @property
    def state_name(self) -> str:
        """The member state's name, in the protocol's own vocabulary (Java's names)."""


@dataclass(frozen=True, slots=True)
class SubscriptionPoke:
    """The subscription object changed; the routine reads it and tells the machine."""


@dataclass(frozen=True, slots=True)
class PollPoke:
    """The application started a poll while the machine waited for one."""


@dataclass(frozen=True, slots=True)
class ChildCrashed:
    """A child task failed in a way it could not turn into an event (a bug)."""

    exc: BaseException


class CoordinationRoutine(ABC):
    """Inbox, routine task, supervision and commit surface; the shell fills the hooks."""

    #: Names the routine task: ``aiogroup-<task_name>-<group id>``.
    task_name = "coordinator"

    def __init__(
        self,
        client: AIOKafkaClient,
        subscription: SubscriptionState,
        config: ConsumerConfig,
        metrics: ConsumerMetrics,
        machine: Machine,
        performers: Mapping[type[A.Action], Callable[[Any, Any], object]],
    ) -> None:
        if config.group_id is None:
            raise ConfigurationError(f"{type(self).__name__} needs config.group_id")
        self._machine = machine
        #: Action type -> its performer (the shell's table).
        self._performers = performers
        self._client = client
        self._subscription = subscription
        self._config = config
        self._group_id: str = config.group_id
        self._retry_backoff = config.retry_backoff_ms / 1000
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._routine: asyncio.Task[None] | None = None
        self._children = TaskScope(self._child_crashed)
        self._generation = GenerationScopes(self._child_crashed, self._children)
        self._commits = CommitClient(self, self._group_id, self._retry_backoff)
        #: Sync listener methods run here, off the loop, one at a time.
        self._listener_thread = ListenerThread()
        #: The application's listener, handed over once by ``set_listener``; kept after
        #: unsubscribe, since the revocation that follows must reach it.
        self._listener: AsyncConsumerRebalanceListener = AsyncConsumerRebalanceListener()
        #: Callbacks belong to their generation's scope and are awaited, never cancelled,
        #: when it ends: cancelling one is the machine's decision (its overrun rule).
        self._listeners = ListenerRunner(
            self._group_id,
            self._listener_thread,
            lambda coro, name: self._generation.spawn(coro, name, cancel_on_close=False),
            lambda kind, error: self._inbox.put_nowait(E.ListenerCompleted(kind, error)),
        )
        #: (last poll time, a poll is waiting) as last told to the machine.
        self._last_fed_poll: tuple[float, bool] | None = None
        self._subscription_key: object = None
        #: The last problem logged at WARNING and when: the same problem again within
        #: REPEAT_QUIET seconds (a member refused for good retries it) goes to DEBUG.
        self._last_warned: tuple[str, float] | None = None
        #: Replaced by GroupConsumer with the consumer's shared instance.
        self.metrics = metrics

    # -- what the facade reads, whichever protocol --------------------------------------------

    @property
    def listener_thread(self) -> ListenerThread:
        """The thread a sync listener's methods run in (one callback at a time)."""
        return self._listener_thread

    def set_listener(self, listener: AsyncConsumerRebalanceListener) -> None:
        """The listener for the callbacks from now on (``subscribe()`` hands it over;
        a sync one must already be adapted to run in :attr:`listener_thread`)."""
        self._listener = listener

    @property
    def failed(self) -> bool:
        """The member stopped for good: its next poll raises what stopped it."""
        return self._machine.failed

    @property
    def joined(self) -> bool:
        """In the group with an assignment installed."""
        return self._machine.joined

    @property
    def state_name(self) -> str:
        """The member state's name (Java's names; reported by metrics and health)."""
        return self._machine.state_name

    # -- what each shell provides ---------------------------------------------------------

    @abstractmethod
    def identity(self) -> MemberIdentity:
        """The membership now, as ``group_metadata()`` decides on it (a snapshot)."""

    @abstractmethod
    def _after_step(self) -> None:
        """After every machine step: publish what the machine says (the delivery gate)."""

    @abstractmethod
    def _generation_key(self) -> object:
        """The machine's generation identity now (None: between generations)."""

    @abstractmethod
    def _on_subscription_poke(self) -> None:
        """The subscription changed: follow it, and tell the machine what matters."""

    @abstractmethod
    def _commit_rules(self, auto: bool) -> CommitRules:
        """How this protocol classifies commit / offset-fetch answers."""

    def _on_start(self) -> None:  # noqa: B027 - an optional hook
        """Start the shell's own lifetime children."""

    def _on_stop(self) -> None:  # noqa: B027 - an optional hook
        """Undo what ``_on_start`` registered."""

    def _dispatch_other(self, item: Any) -> None:
        """An inbox item that is not an event of the machine (the shell's own)."""
        self._feed(item)

    async def _after_close(self, remaining: float) -> None:  # noqa: B027 - an optional hook
        """Run after the routine ended in ``close()``, within what is left of its timeout."""

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the coordination routine; returns at once (joining happens in the background)."""
        if self._routine is not None:
            raise IllegalStateError(f"{type(self).__name__}.start() called twice")
        loop = asyncio.get_running_loop()
        name = f"aiogroup-{self.task_name}-{self._group_id}"
        self._routine = loop.create_task(self._run(), name=name)

    async def close(self, *, timeout: float) -> None:
        """Let the machine say goodbye (commit, revoke, leave), bounded by ``timeout``.

        The routine performs the goodbye under a shield, so cancelling ``close()``
        itself only stops waiting; everything is torn down before returning or raising.
        """
        routine = self._routine
        if routine is None or routine.done():
            await self._finish_routine()
            return
        self._inbox.put_nowait(E.CloseRequested())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            await wait_for(asyncio.shield(routine), timeout)
            await self._after_close(max(0.0, deadline - loop.time()))
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
        await self._generation.aclose()
        await self._children.aclose()
        self._listener_thread.close()

    # -- the routine ----------------------------------------------------------------------

    def _child_crashed(self, exc: BaseException) -> None:
        self._inbox.put_nowait(ChildCrashed(exc))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        sub = self._subscription
        poke = lambda: self._inbox.put_nowait(SubscriptionPoke())  # noqa: E731
        self._children.spawn(watch_subscription(sub, poke), "subscription-watcher")
        sub.add_poll_callback(self._poll_started)
        refresh = refresh_committed(sub, self._fetch_for_refresh, self._refresh)
        self._children.spawn(refresh, "commit-refresh")
        self._on_start()
        # One getter outlives timeouts: wait() never cancels it, so no inbox item is
        # lost to a timeout and cancelling the routine never waits on the getter.
        getter: asyncio.Task[Any] | None = None
        try:
            self._on_subscription_poke()
            while not self._machine.finished:
                deadline = self._machine.next_deadline()
                timeout = None if deadline is None else max(0.0, deadline - loop.time())
                if getter is None:
                    getter = loop.create_task(self._inbox.get())
                done, _ = await asyncio.wait({getter}, timeout=timeout)
                if getter in done:
                    item, getter = getter.result(), None
                else:
                    item = E.TimerFired()
                self._dispatch(item)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("group %s: coordination routine failed", self._group_id)
            self._report_crash(exc)
            raise
        finally:
            if getter is not None:
                getter.cancel()
            sub.remove_poll_callback(self._poll_started)
            self._on_stop()
            await self._generation.aclose()
            await self._children.aclose()

    def _poll_started(self) -> None:
        """A poll started: wake the routine only when the machine is waiting for one
        (a member taken out for want of a poll rejoins now, not at some later step)."""
        if self._machine.awaiting_poll:
            self._inbox.put_nowait(PollPoke())

    def _report_crash(self, exc: BaseException) -> None:
        """Tell the application through the machine; if the machine itself is what broke
        and cannot take even that, report directly - the one way left to say it."""
        message = f"group coordination failed: {exc!r}"
        try:
            self._feed(E.RoutineFailed(message, KafkaError(message)))
        except Exception:
            log.exception("group %s: the machine could not take its own failure", self._group_id)
            self._subscription.report_error(KafkaError(message), fatal=True)

    def _dispatch(self, item: Any) -> None:
        if isinstance(item, ChildCrashed):
            raise item.exc
        if isinstance(item, SubscriptionPoke):
            self._on_subscription_poke()
        elif isinstance(item, PollPoke):
            self._feed(E.TimerFired())  # the poll itself is fed first
        else:
            self._dispatch_other(item)

    def _feed(self, event: E.Event) -> None:
        """The one place the machine is driven; performs what it answers, in order."""
        now = asyncio.get_running_loop().time()
        sub = self._subscription
        if sub.last_poll is not None:
            poll = (sub.last_poll, sub.polls_waiting > 0)
            if poll != self._last_fed_poll:
                self._last_fed_poll = poll
                self._perform_all(self._machine.handle(E.ApplicationPolled(*poll), now))
        actions = self._machine.handle(event, now)
        # A generation that ended closes its scope before this step's actions start
        # the next generation's children (see _support/supervision.py).
        self._generation.enter(self._generation_key())
        self._perform_all(actions)
        self._after_step()

    def _perform_all(self, actions: Iterable[A.Action]) -> None:
        for action in actions:
            self._perform(action)

    def _perform(self, action: A.Action) -> None:
        performer = self._performers.get(type(action))
        if performer is None:  # pragma: no cover - a new action type without a performer
            raise TypeError(f"no performer for {action!r}")
        performer(self, action)

    # -- the callbacks (performers both shells share) ---------------------------------------

    def _start_revoke(self, parts: frozenset[TopicPartition], commit_first: bool) -> None:
        log.info("group %s: revoking %s", self._group_id, sorted(parts) or "nothing")

        async def revoke() -> None:
            if commit_first:
                await self._auto_commit(parts, "before revocation")
            await self._listener.on_partitions_revoked(set(parts))

        self._listeners.start(E.Listener.REVOKED, revoke)

    def _start_lost(self, parts: frozenset[TopicPartition]) -> None:
        log.warning("group %s: partitions lost: %s", self._group_id, sorted(parts))
        self._listeners.start(
            E.Listener.LOST, lambda: self._listener.on_partitions_lost(set(parts))
        )

    def _perform_auto_commit(self, action: A.AutoCommit) -> None:
        # Interval auto-commits serve one generation (supervision.py).
        self._generation.spawn(self._auto_commit(None, action.reason), "auto-commit")

    def _perform_refresh_committed(self, action: A.RefreshCommittedOffsets) -> None:
        self._subscription.request_commit_refresh()  # wakes the commit-refresh task

    def _perform_log_warning(self, action: A.LogWarning) -> None:
        log.warning("group %s: %s", self._group_id, action.message)

    async def _run_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        offsets = await self._listener.on_partitions_assigned(set(partitions))
        self._subscription.apply_start_offsets(offsets)

    def _raise_to_application(self, exc: BaseException, message: str, fatal: bool) -> None:
        """Perform a ``RaiseToApplication``: the next poll raises ``exc``."""
        if is_authorization_error(exc) and not getattr(exc, "explained", False):
            # Name the group (or topics) and the missing ACL.
            exc = authorization_error(
                getattr(exc, "errno", 0),
                group_id=self._group_id,
                topics=self._subscription.subscription.effective_topics,
                during=message,
            )
            message = str(exc)
        if fatal:
            log.error("group %s: fatal: %s", self._group_id, message)
        else:
            now = asyncio.get_running_loop().time()
            last = self._last_warned
            if last is not None and last[0] == message and now - last[1] < REPEAT_QUIET:
                log.debug("group %s: %s (again)", self._group_id, message)
            else:
                self._last_warned = (message, now)
                log.warning("group %s: %s", self._group_id, message)
        self._subscription.report_error(exc, fatal=fatal)

    # -- commits ----------------------------------------------------------------------------

    def check_running(self) -> None:
        routine = self._routine
        if routine is None or routine.done():
            raise KafkaError("the group coordinator is not running")

    async def commit_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        timeout: float | None,
        auto: bool = False,
    ) -> None:
        """Commit ``offsets`` for this group; CommitFailedError when the group moved on."""
        if not offsets:
            return
        async with async_timeout.timeout(timeout):
            await self._commits.commit(dict(offsets), self._commit_rules(auto))

    async def _auto_commit(self, partitions: Iterable[TopicPartition] | None, why: str) -> None:
        """Commit positions of ``partitions`` (None: all assigned); failures are logged only."""
        timeout = self._config.request_timeout_ms / 1000
        await auto_commit(
            self._subscription,
            partitions,
            why,
            lambda offsets: self.commit_offsets(offsets, timeout=timeout, auto=True),
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
            return await self._commits.fetch(tps, self._commit_rules(False))

    async def _fetch_for_refresh(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        return await self.fetch_committed_offsets(
            tps, timeout=self._config.request_timeout_ms / 1000
        )

    def _refresh(self, exc: BaseException) -> None:
        """A committed-offset lookup failed: the machine decides whether the user hears,
        and when to ask again (RefreshCommittedOffsets)."""
        self._inbox.put_nowait(E.CommittedOffsetsUnavailable(exc, is_retriable(exc)))

    # -- CommitPort: what the commit client borrows ----------------------------------------

    @abstractmethod
    async def coordinator_node(self) -> int:
        """The coordinator's node id, once known."""

    @abstractmethod
    def commit_request(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> tuple[Any, int]:
        """The OffsetCommit request and the generation (epoch) it commits under."""

    @abstractmethod
    def fetch_request(self, partitions: list[TopicPartition]) -> Any:
        """The OffsetFetch request."""

    async def send(self, node: int, request: Any) -> Any:
        """Send on the coordination connection, timed (the group-request latency metric)."""
        send = self._client.send(node, request, group=ConnectionGroup.COORDINATION)
        return await self.metrics.timed_group_request(request, send)

    def next_epoch(self) -> Callable[[], Awaitable[None]]:
        """Classic generations never ask for a retry with a newer epoch: a plain backoff."""
        return lambda: asyncio.sleep(self._retry_backoff)

    def commit_answered(self, result: Any, generation: int) -> None:  # noqa: B027 - an optional hook
        """Tell the machine an OffsetCommit answer arrived (default: it does not care)."""

    def offsets_request_failed(  # noqa: B027 - an optional hook
        self, api: str, kind: str, generation: int, detail: str
    ) -> None:
        """Tell the machine a commit or fetch got no answer (default: it does not care)."""
