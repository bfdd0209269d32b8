"""The subscription/assignment state object: the one board the tasks meet on.

The coordination routine writes the assignment; the fetcher and the application
read it.  Instead of polling flags, readers *await* futures held here:

* ``wait_subscription_changed()`` - the coordinator's subscription watcher wakes
  when topics, a pattern's matches or the subscription type change;
* ``wait_for_assignment()`` - the fetcher sleeps until there is something to fetch;
* ``Assignment.unassigned`` - resolved when that assignment is replaced, so a
  fetcher holding it knows to re-plan (cooperative rebalances replace the object
  but carry the ``PartitionState`` of kept partitions across, so positions and
  buffered records of partitions that stay are not disturbed);
* ``commit_refresh_needed`` - an event the commit-refresh task waits on; set when a
  partition needs its committed offset looked up;
* per partition, ``wait_position()`` ("position ready") and ``wait_resumed()``;
  ``SubscriptionState.wait_position(tp)`` is the one ``position()`` uses: it follows
  the partition across rebalances that replace its ``PartitionState``.

Every waiter is resolved through ``_resolve`` / ``_fail`` so that no path leaves a
future pending forever: ``close()`` fails them all with ``ConsumerStoppedError``.

Nothing here does I/O; asyncio is used only for its futures and events.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka.errors import ConsumerStoppedError, IllegalStateError

from aiogroup.structs import OffsetResetStrategy, TopicPartition

__all__ = [
    "Assignment",
    "DeliveryChanges",
    "FetchStatus",
    "PartitionState",
    "Subscription",
    "SubscriptionState",
    "SubscriptionType",
]

T = TypeVar("T")


def _resolve(fut: asyncio.Future[T] | None, value: T) -> None:
    if fut is not None and not fut.done():
        fut.set_result(value)


def _fail(fut: asyncio.Future[Any] | None, exc: BaseException) -> None:
    if fut is not None and not fut.done():
        fut.set_exception(exc)
        # Nobody may be waiting; mark the exception retrieved so asyncio does not warn.
        fut.exception()


class _Unassigned(IllegalStateError):  # type: ignore[misc]
    """A ``PartitionState`` was dropped from the assignment while someone waited on it.

    Internal: ``SubscriptionState.wait_position`` catches it and decides whether the
    partition came back (a new state to wait on) or was revoked for good.
    """


class FetchStatus(enum.Enum):
    """Where a partition's position comes from next."""

    #: Position known; the fetcher may fetch from it.
    READY = "ready"
    #: Waiting for the coordinator to look up the committed offset.
    AWAITING_COMMITTED = "awaiting_committed"
    #: Waiting for the fetcher to reset it by ``reset_strategy`` (ListOffsets).
    AWAITING_RESET = "awaiting_reset"


class DeliveryChanges:
    """A count bumped by every change that can stop a record from being handed out.

    Why: ``async for`` hands out records a refill built ahead, one per step, and each
    step must make delivery's checks (the partition still in this assignment with
    this epoch, not revoking or paused, its position where the last record left it,
    no error waiting).  Made per record, those checks cost more than the rest of the
    step (``python -m benchmarks.record_path_cost``).  Instead, every write that can
    fail one of them bumps this count - a new assignment, a revocation, a seek, reset
    or lookup (the epoch), a pause or resume, an error reported, a drain by another
    read path, close - and the step compares one number with the one it saw when it
    last made the checks in full (``aiogroup._fetch.iteration``).  A bump that
    changes nothing only costs one full check.

    One per ``SubscriptionState``, shared by its ``PartitionState`` objects.
    """

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def bump(self) -> None:
        self.value += 1


class PartitionState:
    """Per-partition position and flags.

    ``position`` is the next offset to hand to the application; the fetcher keeps its
    own read-ahead cursor.  Every change that invalidates read-ahead (seek, reset,
    revocation) bumps ``epoch``; a fetch result or buffered batch carrying an older
    epoch is dropped rather than delivered.
    """

    __slots__ = (
        "_change_waiters",
        "_position_waiters",
        "_resumed_waiter",
        "assigning",
        "changes",
        "delivery_changes",
        "epoch",
        "highwater",
        "last_stable_offset",
        "log_start_offset",
        "paused",
        "position",
        "reset_strategy",
        "revoking",
        "status",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        default_reset: OffsetResetStrategy,
        delivery_changes: DeliveryChanges | None = None,
    ) -> None:
        self.tp = tp
        #: Bumped with every change of epoch, pause or revocation (see the class).
        self.delivery_changes = DeliveryChanges() if delivery_changes is None else delivery_changes
        self.position: int | None = None
        self.status = FetchStatus.AWAITING_COMMITTED
        self.reset_strategy: OffsetResetStrategy = default_reset
        self.paused = False
        #: Set the moment a revoke or lost callback for this partition starts: from then
        #: on no record of it reaches the application and the fetcher leaves it alone.
        self.revoking = False
        #: Set while this (newly added) partition's on_partitions_assigned callback runs:
        #: nothing is fetched or delivered until it returns, so offsets it seeks to (or
        #: returns) are where delivery starts - as in Java, where the callback runs
        #: inside poll().
        self.assigning = False
        self.epoch = 0
        #: How many changes ``wait_changed`` has announced (see its ``seen``).
        self.changes = 0
        self.highwater: int | None = None
        self.last_stable_offset: int | None = None
        self.log_start_offset: int | None = None
        self._position_waiters: list[asyncio.Future[int]] = []
        self._change_waiters: list[asyncio.Future[None]] = []
        self._resumed_waiter: asyncio.Future[None] | None = None

    # -- position ----------------------------------------------------------------

    @property
    def has_valid_position(self) -> bool:
        return self.status is FetchStatus.READY and self.position is not None

    @property
    def is_fetchable(self) -> bool:
        return (
            self.has_valid_position and not self.paused and not self.revoking and not self.assigning
        )

    def set_assigning(self, assigning: bool) -> None:
        """Hold (True) or release (False) the partition around its assigned callback."""
        if self.assigning != assigning:
            self.assigning = assigning
            self._changed()

    def seek(self, offset: int) -> None:
        """Set the position (user seek, committed offset found, reset done)."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset} for {self.tp}")
        self.position = offset
        self.status = FetchStatus.READY
        self.epoch += 1
        waiters, self._position_waiters = self._position_waiters, []
        for fut in waiters:
            _resolve(fut, offset)
        self._changed()

    def await_committed(self) -> None:
        """Forget the position until the committed offset is looked up."""
        self.position = None
        self.status = FetchStatus.AWAITING_COMMITTED
        self.epoch += 1
        self._changed()

    def await_reset(self, strategy: OffsetResetStrategy | None = None) -> None:
        """Forget the position until the fetcher resets it by ``strategy``."""
        self.position = None
        self.status = FetchStatus.AWAITING_RESET
        if strategy is not None:
            self.reset_strategy = strategy
        self.epoch += 1
        self._changed()

    def consumed_to(self, next_offset: int) -> None:
        """The application received records up to ``next_offset`` (exclusive)."""
        self.position = next_offset

    async def wait_position(self) -> int:
        """Wait until the partition has a valid position ("position ready")."""
        if self.has_valid_position:
            assert self.position is not None
            return self.position
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._position_waiters.append(fut)
        return await fut

    async def wait_changed(self, seen: int | None = None) -> None:
        """Wait until the position's status changes (a seek, a reset or a lookup asked for).

        The fetcher performs resets, so whoever asks for one (a seek_to_*, the
        commit-refresh task finding no committed offset) must wake it; waiting on this
        keeps them from having to know the fetcher exists.  ``seen``: the ``changes``
        count the caller planned with; a change since then returns at once (a watcher
        task starts a loop iteration after it is planned, and a change in between -
        the committed-offset lookup answering "none" - was otherwise missed, leaving
        the reset undone until something else woke the fetcher).
        """
        if seen is not None and seen != self.changes:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._change_waiters.append(fut)
        await fut

    def _changed(self) -> None:
        self.delivery_changes.value += 1
        self.changes += 1
        waiters, self._change_waiters = self._change_waiters, []
        for fut in waiters:
            _resolve(fut, None)

    # -- pause / resume -------------------------------------------------------------

    def pause(self) -> None:
        self.paused = True
        self.delivery_changes.value += 1

    def resume(self) -> None:
        self.paused = False
        self.delivery_changes.value += 1
        waiter, self._resumed_waiter = self._resumed_waiter, None
        _resolve(waiter, None)

    async def wait_resumed(self) -> None:
        if not self.paused:
            return
        if self._resumed_waiter is None or self._resumed_waiter.done():
            self._resumed_waiter = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._resumed_waiter)

    def _abort(self, exc: BaseException) -> None:
        waiters, self._position_waiters = self._position_waiters, []
        for fut in waiters:
            _fail(fut, exc)
        changes, self._change_waiters = self._change_waiters, []
        for change in changes:
            _fail(change, exc)
        waiter, self._resumed_waiter = self._resumed_waiter, None
        _fail(waiter, exc)

    def __repr__(self) -> str:
        return (
            f"PartitionState({self.tp.topic}-{self.tp.partition}, position={self.position}, "
            f"status={self.status.value}, paused={self.paused}, revoking={self.revoking})"
        )


class Assignment:
    """One version of the set of partitions this member owns.

    Replaced, never mutated in membership: the old object's ``unassigned`` future
    resolves when its successor is installed.
    """

    __slots__ = ("_states", "unassigned", "version")

    def __init__(self, states: Mapping[TopicPartition, PartitionState], version: int) -> None:
        self._states: dict[TopicPartition, PartitionState] = dict(states)
        self.version = version
        self.unassigned: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def partitions(self) -> frozenset[TopicPartition]:
        return frozenset(self._states)

    def state(self, tp: TopicPartition) -> PartitionState:
        try:
            return self._states[tp]
        except KeyError:
            raise IllegalStateError(f"partition {tp} is not assigned to this consumer") from None

    def get(self, tp: TopicPartition) -> PartitionState | None:
        return self._states.get(tp)

    def states(self) -> Iterable[PartitionState]:
        return self._states.values()

    def __contains__(self, tp: object) -> bool:
        return tp in self._states

    def __len__(self) -> int:
        return len(self._states)

    def fetchable(self) -> list[TopicPartition]:
        return [tp for tp, st in self._states.items() if st.is_fetchable]

    # A partition whose revoke (or lost) callback runs is still in the assignment until
    # the callback returns: nothing of it is fetched or delivered, but its position is
    # still looked up, so position() awaited inside the callback answers (as Java's
    # does during onPartitionsRevoked) instead of waiting for the callback to end.

    def needing_committed(self) -> list[TopicPartition]:
        return [
            tp for tp, st in self._states.items() if st.status is FetchStatus.AWAITING_COMMITTED
        ]

    def needing_reset(self) -> list[TopicPartition]:
        return [tp for tp, st in self._states.items() if st.status is FetchStatus.AWAITING_RESET]


class SubscriptionType(enum.Enum):
    NONE = "none"
    AUTO_TOPICS = "auto_topics"
    AUTO_PATTERN = "auto_pattern"
    USER_ASSIGNED = "user_assigned"


@dataclass
class Subscription:
    """What the application asked for: topics, a pattern, or explicit partitions."""

    type: SubscriptionType
    topics: frozenset[str] = frozenset()
    pattern: re.Pattern[str] | None = None
    user_partitions: frozenset[TopicPartition] = frozenset()
    #: Topics matched by ``pattern`` against the last metadata (AUTO_PATTERN only).
    matched_topics: frozenset[str] = field(default_factory=frozenset)

    @property
    def group_managed(self) -> bool:
        return self.type in (SubscriptionType.AUTO_TOPICS, SubscriptionType.AUTO_PATTERN)

    @property
    def effective_topics(self) -> frozenset[str]:
        if self.type is SubscriptionType.AUTO_PATTERN:
            return self.matched_topics
        if self.type is SubscriptionType.USER_ASSIGNED:
            return frozenset(tp.topic for tp in self.user_partitions)
        return self.topics


class SubscriptionState:
    """Subscription, assignment, application errors and poll bookkeeping.

    Single writer per field: the application (through ``GroupConsumer``) writes the
    subscription, pause flags and seeks; the coordination routine writes the
    assignment; the fetcher writes positions it resets and high watermarks.
    """

    def __init__(self, default_reset: OffsetResetStrategy = OffsetResetStrategy.LATEST) -> None:
        self.default_reset = default_reset
        self.subscription = Subscription(SubscriptionType.NONE)
        self._assignment: Assignment | None = None
        self._version = 0
        #: Bumped by every change that can stop a record from being handed out.
        self.delivery_changes = DeliveryChanges()
        self._subscription_waiters: list[asyncio.Future[Subscription]] = []
        self._assignment_waiters: list[asyncio.Future[Assignment]] = []
        #: Resolved at every change of subscription (any type, NONE included).
        self._any_subscription_waiters: list[asyncio.Future[None]] = []
        self._subscription_changed: asyncio.Event = asyncio.Event()
        self.commit_refresh_needed: asyncio.Event = asyncio.Event()
        self._pending_error: BaseException | None = None
        #: The error that ended the membership for good: every poll after it raises it
        #: again (a member out of its group must not look like a quiet topic).
        self._fatal_error: BaseException | None = None
        self._error_callbacks: list[Callable[[], None]] = []
        self._closed: BaseException | None = None
        #: Loop time the application's last getone/getmany/getmany_arrow started or
        #: returned (max_poll_interval_ms).
        self.last_poll: float | None = None
        #: How many of those are in progress now, waiting for records.  A waiting poll
        #: is the application polling (as in Java and aiokafka): the membership
        #: machine reads it, through the routine, as "polling now".
        self.polls_waiting = 0
        #: Called when a poll starts (the routine wakes when its machine waits for one).
        self._poll_callbacks: list[Callable[[], None]] = []
        #: Loop time until which the group membership is known to hold (the client-side
        #: session deadline while heartbeating), written by the coordination routine;
        #: None when no session bounds delivery (no group, or joining).  A process that
        #: was frozen (SIGSTOP, a long GC or swap) past it wakes with records buffered
        #: and the routine's overdue timer not yet run: the fetcher hands nothing out
        #: until the routine has decided whether the membership survived, so a fenced
        #: member never delivers another record before it learns of the fence.
        self.membership_valid_until: float | None = None

    # -- subscription (written by the application) -------------------------------------

    def _check_open(self) -> None:
        if self._closed is not None:
            raise ConsumerStoppedError()

    def subscribe(self, topics: Iterable[str]) -> None:
        """Subscribe to ``topics`` (the listener goes to the routine, not through here)."""
        self._check_open()
        self._set_subscription(Subscription(SubscriptionType.AUTO_TOPICS, topics=frozenset(topics)))

    def subscribe_pattern(self, pattern: re.Pattern[str]) -> None:
        self._check_open()
        self._set_subscription(Subscription(SubscriptionType.AUTO_PATTERN, pattern=pattern))

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> None:
        self._check_open()
        parts = frozenset(partitions)
        self._set_subscription(Subscription(SubscriptionType.USER_ASSIGNED, user_partitions=parts))
        self.set_assignment(parts)

    def unsubscribe(self) -> None:
        """Drop the subscription.

        A manual assignment is dropped at once.  A group-managed one is only marked
        revoking here: the coordinator notices the change, runs the revoke
        listener (which may still commit or read positions of those partitions),
        clears the assignment with ``set_assignment(None)`` and leaves the group.
        """
        was_group = self.subscription.group_managed
        self._set_subscription(Subscription(SubscriptionType.NONE))
        if was_group and self._assignment is not None:
            self.mark_revoking(self._assignment.partitions)
        else:
            self.set_assignment(None)

    def set_matched_topics(self, topics: Iterable[str]) -> bool:
        """Record the topics a pattern matched; True when that changed the subscription."""
        sub = self.subscription
        new = frozenset(topics)
        if sub.type is not SubscriptionType.AUTO_PATTERN or new == sub.matched_topics:
            return False
        sub.matched_topics = new
        self._notify_subscription_changed()
        return True

    def _set_subscription(self, sub: Subscription) -> None:
        self.subscription = sub
        self._notify_subscription_changed()
        changed, self._any_subscription_waiters = self._any_subscription_waiters, []
        for change in changed:
            _resolve(change, None)
        if sub.type is not SubscriptionType.NONE:
            waiters, self._subscription_waiters = self._subscription_waiters, []
            for fut in waiters:
                _resolve(fut, sub)

    def _notify_subscription_changed(self) -> None:
        self._subscription_changed.set()

    async def wait_for_subscription(self) -> Subscription:
        """Wait until there is a subscription (of any type but NONE)."""
        self._check_open()
        if self.subscription.type is not SubscriptionType.NONE:
            return self.subscription
        fut: asyncio.Future[Subscription] = asyncio.get_running_loop().create_future()
        self._subscription_waiters.append(fut)
        return await fut

    async def wait_subscription_changed(self) -> None:
        """Wait for the next change of subscription (topics, pattern match, type)."""
        await self._subscription_changed.wait()

    def clear_subscription_changed(self) -> None:
        self._subscription_changed.clear()

    # -- assignment (written by the coordinator, or by assign_from_user) ------------------

    @property
    def assignment(self) -> Assignment | None:
        return self._assignment

    @property
    def assigned_partitions(self) -> frozenset[TopicPartition]:
        return self._assignment.partitions if self._assignment is not None else frozenset()

    def set_assignment(self, partitions: Iterable[TopicPartition] | None) -> Assignment | None:
        """Install a new assignment, keeping the state of partitions that stay.

        Eager rebalancing revokes everything first (``set_assignment(None)``), so kept
        state only survives when the caller kept the partitions - the cooperative case
        and user re-assigns of overlapping sets.
        """
        old = self._assignment
        if partitions is None:
            new: Assignment | None = None
        else:
            keep = {} if old is None else {tp: old._states[tp] for tp in partitions if tp in old}
            for tp in partitions:
                if tp not in keep:
                    keep[tp] = PartitionState(tp, self.default_reset, self.delivery_changes)
            self._version += 1
            new = Assignment(keep, self._version)
        if old is not None:
            dropped = old.partitions - (new.partitions if new is not None else frozenset())
            for tp in dropped:
                st = old._states[tp]
                st.revoking = True
                st.epoch += 1
                st._abort(_Unassigned(f"partition {tp} was unassigned"))
            _resolve(old.unassigned, None)
        self._assignment = new
        self.delivery_changes.value += 1
        if new is not None:
            if new.needing_committed():
                self.commit_refresh_needed.set()
            waiters, self._assignment_waiters = self._assignment_waiters, []
            for fut in waiters:
                _resolve(fut, new)
        return new

    def mark_revoking(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop delivering and fetching these partitions: their revoke/lost callback starts.

        Called synchronously right before the listener coroutine is created, so no
        ``getmany`` running between the two can hand out their records.
        """
        if self._assignment is None:
            return
        for tp in partitions:
            st = self._assignment.get(tp)
            if st is not None:
                st.revoking = True
                st.epoch += 1
        self.delivery_changes.value += 1

    def mark_assigning(self, partitions: Iterable[TopicPartition], assigning: bool) -> None:
        """Hold these new partitions while on_partitions_assigned runs; release after.

        Called synchronously right before the listener coroutine is created (hold)
        and when it ended, however it ended (release).
        """
        if self._assignment is None:
            return
        for tp in partitions:
            st = self._assignment.get(tp)
            if st is not None:
                st.set_assigning(assigning)

    def apply_start_offsets(self, offsets: object) -> None:
        """Seek to what ``on_partitions_assigned`` returned (None, or {TopicPartition: offset}).

        One rule for both group protocols' routines; a bad return value names the problem.
        """
        if not offsets:
            return
        if not isinstance(offsets, Mapping):
            raise TypeError(
                "on_partitions_assigned must return None or {TopicPartition: offset}, "
                f"got {type(offsets).__name__}"
            )
        assignment = self._assignment
        for tp, offset in offsets.items():
            if assignment is None or tp not in assignment:
                raise IllegalStateError(
                    f"on_partitions_assigned returned an offset for {tp}, which is not assigned"
                )
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise TypeError(f"on_partitions_assigned offset for {tp} must be an int")
            assignment.state(tp).seek(offset)

    async def wait_for_assignment(self) -> Assignment:
        """Wait until there is an assignment (possibly empty in group mode)."""
        self._check_open()
        if self._assignment is not None:
            return self._assignment
        fut: asyncio.Future[Assignment] = asyncio.get_running_loop().create_future()
        self._assignment_waiters.append(fut)
        return await fut

    async def wait_position(self, tp: TopicPartition) -> int:
        """The position of ``tp`` once known, following it across rebalances.

        A rebalance may replace the ``PartitionState`` a waiter holds: a cooperative
        one drops a revoked partition, an eager one drops every partition (assignment
        None) and installs new states for those that come back, and a lost
        membership drops them all before the member rejoins.  A waiter left on the
        dropped state would never see the new one resolved, so this loops: when its
        state is dropped it waits (eager, lost) for the assignment that decides,
        then waits on the partition's new state if it came back to this member, and
        raises ``IllegalStateError`` naming the partition if it did not.  ``close()``
        ends every wait with ``ConsumerStoppedError``; the caller bounds it in time.
        """
        while True:
            self._check_open()
            assignment = self._assignment
            if assignment is None or tp not in assignment:
                raise IllegalStateError(f"partition {tp} is not assigned to this consumer")
            try:
                return await assignment.state(tp).wait_position()
            except _Unassigned:
                pass
            while self._assignment is None and self.subscription.group_managed:
                await self._next_assignment_or_subscription()
            if self._assignment is None or tp not in self._assignment:
                raise IllegalStateError(
                    f"partition {tp} was revoked from this consumer while position() waited for it"
                ) from None

    async def _next_assignment_or_subscription(self) -> None:
        """Until an assignment is installed or the subscription changes (or close)."""
        self._check_open()
        loop = asyncio.get_running_loop()
        assigned: asyncio.Future[Assignment] = loop.create_future()
        changed: asyncio.Future[None] = loop.create_future()
        self._assignment_waiters.append(assigned)
        self._any_subscription_waiters.append(changed)
        waiters: set[asyncio.Future[Any]] = {assigned, changed}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for fut in (assigned, changed):
                if not fut.done():
                    fut.cancel()
            with contextlib.suppress(ValueError):
                self._assignment_waiters.remove(assigned)
            with contextlib.suppress(ValueError):
                self._any_subscription_waiters.remove(changed)
        for fut in waiters:
            error = fut.exception() if fut.done() and not fut.cancelled() else None
            if error is not None:
                raise error

    def request_commit_refresh(self) -> None:
        self.commit_refresh_needed.set()

    def set_membership_valid_until(self, until: float | None) -> None:
        """The routine moved the deadline: wake a poll that waits because it had passed.

        Bumps ``delivery_changes``: the native ``async for`` step reads the deadline
        when it loads a run and relies on the count to hear of a new one (it still
        reads the clock at every step while one is set).  A heartbeat moves it every
        few seconds: one full check each time.
        """
        if until == self.membership_valid_until:
            return
        self.membership_valid_until = until
        self.delivery_changes.value += 1
        for callback in self._error_callbacks:
            callback()

    def membership_current(self, now: float) -> bool:
        """Whether records may be handed out at loop time ``now`` (see the attribute)."""
        until = self.membership_valid_until
        return until is None or now < until

    def poll_started(self, now: float) -> None:
        """The application called getone/getmany/getmany_arrow at loop time ``now``."""
        self.polls_waiting += 1
        self.last_poll = now
        for callback in list(self._poll_callbacks):
            callback()

    def poll_ended(self, now: float) -> None:
        """That call returned (or raised) at loop time ``now``: the idle time starts here."""
        self.polls_waiting = max(0, self.polls_waiting - 1)
        self.last_poll = now

    def add_poll_callback(self, callback: Callable[[], None]) -> None:
        self._poll_callbacks.append(callback)

    def remove_poll_callback(self, callback: Callable[[], None]) -> None:
        with contextlib.suppress(ValueError):
            self._poll_callbacks.remove(callback)

    # -- application-facing errors ------------------------------------------------------

    def report_error(self, exc: BaseException, *, fatal: bool = False) -> None:
        """Keep an error (listener exception, group error) for the next poll; a
        ``fatal`` one for every poll after it too."""
        if self._pending_error is None:
            self._pending_error = exc
        if fatal and self._fatal_error is None:
            self._fatal_error = exc
        self.delivery_changes.value += 1
        for callback in self._error_callbacks:
            callback()

    def add_error_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever an error is reported.

        The fetcher uses it to wake a poll that is already waiting, so an error
        surfaces from that poll instead of the next one (getone() has no deadline).
        """
        self._error_callbacks.append(callback)

    def raise_pending_error(self) -> None:
        exc, self._pending_error = self._pending_error, None
        if exc is None and self._fatal_error is not None:
            # Raised again on each poll: drop the traceback the last raise left, so a
            # loop that polls on does not grow it without end.
            exc = self._fatal_error.with_traceback(None)
        if exc is not None:
            raise exc

    @property
    def repeats_fatal_error(self) -> bool:
        """The next poll raises the fatal error again (nothing new is pending)."""
        return self._pending_error is None and self._fatal_error is not None

    @property
    def pending_error(self) -> BaseException | None:
        return self._pending_error if self._pending_error is not None else self._fatal_error

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def close(self) -> None:
        """Fail every waiter with ConsumerStoppedError; the object is unusable afterwards."""
        exc = ConsumerStoppedError()
        self._closed = exc
        self.delivery_changes.value += 1
        for sub_fut in self._subscription_waiters:
            _fail(sub_fut, exc)
        self._subscription_waiters = []
        for asg_fut in self._assignment_waiters:
            _fail(asg_fut, exc)
        self._assignment_waiters = []
        for change in self._any_subscription_waiters:
            _fail(change, exc)
        self._any_subscription_waiters = []
        if self._assignment is not None:
            for st in self._assignment.states():
                st._abort(exc)
            _resolve(self._assignment.unassigned, None)
        self._subscription_changed.set()
        self.commit_refresh_needed.set()
