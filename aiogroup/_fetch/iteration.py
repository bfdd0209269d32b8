"""Records built ahead for ``async for``, handed out one at a time with the delivery checks.

Why: ``async for`` asks for one record per step, and sending each through the whole
read path (errors, the drain, a fresh sink, the walker, a result dict) cost about
70,000 instructions a record against getmany's 8,000
(``python -m benchmarks.record_path_cost``).  So the iterator's refill builds as
many records as a ``getmany`` would, in the one drain, and each later step takes the
next of them after the same checks delivery makes, synchronously (no ``await``
between the check and the hand-over):

* no error waits for the application (the fetcher's, the group's) and the fetcher
  is open;
* the partition is still assigned with the same ``PartitionState`` and ``epoch``
  (a seek, a reset or a new assignment changes them), it is not ``revoking`` or
  ``paused``, and its fetch status is ``READY``;
* its position is where the last record handed out left it;
* the membership gate is open (``SubscriptionState.membership_current``).

Made in full for every record, the checks and the calls around them cost as much as
building the record.  So they are made in full once (``take``), and the steps after
it compare one number instead (:func:`iterate`): the subscription state's
``DeliveryChanges`` count, which every write that can fail a check bumps.  While it
has not moved since the full check, and the partition's run of held records goes
on, the result of the check cannot have changed - except the gate, which is a
deadline on the loop's clock and is read at every step while one is set (a process
frozen past it must not hand out another record when it wakes).  A run's last
record, the next partition's first and any step after a bump take the full check.
``expire`` forces one too: the consumer's once-a-second poll bookkeeping.

Positions never run ahead of the application: the drain moved each partition's
position past the records it built, so ``hold`` puts it back where it was, and each
record handed out moves it past itself; after a partition's last held record the
position goes where the drain left it (past control records and aborted
transactions).  A commit therefore never covers a record the application has not
been given.

A partition whose held record fails the check gives back the rest of its held
records: when its state is still the current one (paused, say, or another read path
is used), its position is sought to the first record not handed out.  A seek bumps
the epoch, so the fetcher drops that partition's read-ahead and fetches again from
there: nothing is skipped and nothing is handed out twice.

What was handed out is counted for the metrics lazily (``handed_out``), per run
rather than per step: a run handed out to its end adds the key + value bytes the
sink counted while building it (``RecordSink.sizes``), in O(1); only a part of a
run (the once-a-second count, a give-back) reads sizes back from its records.

The steps between full checks run in C when the native module has ``HeldSteps``
(:func:`iterate`): written as an async generator (:func:`iterate_python`, the
fallback) a step cost about 2,200 instructions a record over getmany's, most of it
the generator protocol and the bytecode of the comparisons; ``HeldSteps`` is its own
awaitable and completes through ``am_send`` without a ``StopIteration`` or a frame.
It makes the same comparisons (the count, the gate, the run's end) and calls
the ``slow`` coroutine of :func:`iterate_native` for everything else.  The one difference:
it reads the gate's deadline when a run is loaded rather than at every step, which
is sound because ``SubscriptionState.set_membership_valid_until`` bumps the count;
while a deadline is set it still reads the clock at every step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiogroup._fetch import native
from aiogroup._fetch.walker import key_value_bytes
from aiogroup._state.subscription import (
    Assignment,
    DeliveryChanges,
    FetchStatus,
    PartitionState,
    SubscriptionState,
)
from aiogroup.structs import ConsumerRecord, TopicPartition

__all__ = ["HeldRecords", "held_steps_type", "iterate", "iterate_python"]


class _Run:
    """One partition's held records and where handing them out has got to."""

    __slots__ = (
        "assignment",
        "counted",
        "counted_bytes",
        "end",
        "epoch",
        "index",
        "last",
        "nbytes",
        "records",
        "start",
        "state",
    )

    def __init__(
        self,
        assignment: Assignment,
        state: PartitionState,
        records: list[ConsumerRecord],
        start: int,
        end: int,
        nbytes: int | None = None,
    ) -> None:
        #: Replaced, never mutated: while it is the current one, ``state`` is in it.
        self.assignment = assignment
        self.state = state
        self.epoch = state.epoch
        self.records = records
        #: The next record to hand out.
        self.index = 0
        #: The index of the run's last record: the step before it takes the full check.
        self.last = len(records) - 1
        #: Records before this index are counted for the metrics already, and
        #: ``counted_bytes`` are their key + value bytes.
        self.counted = 0
        self.counted_bytes = 0
        #: The key + value bytes of all of ``records`` (the sink counted them as it
        #: built them), or None: read them back from the records when needed.
        self.nbytes = nbytes
        #: The position before the run's first record.
        self.start = start
        #: Where the drain left the position: set after the last record goes out.
        self.end = end

    @property
    def expected(self) -> int:
        """The position the partition must still have for the next record to go out."""
        i = self.index
        return self.start if i == 0 else self.records[i - 1].offset + 1

    def count(self) -> tuple[int, int]:
        """Records handed out since the last count, and their key + value bytes.

        O(1) when the run is handed out to its end and its bytes are known (the
        common case: the total less what was counted before); otherwise the sizes of
        the shorter side of the slice are read back from the records (once a second
        in the middle of a run, or a run given back part-way).
        """
        i, c = self.index, self.counted
        if i <= c:
            return 0, 0
        records, total = self.records, self.nbytes
        if total is None:
            nbytes = key_value_bytes(records[c:i])
        elif i == len(records):
            nbytes = total - self.counted_bytes
        elif len(records) - i < i - c:
            nbytes = total - self.counted_bytes - key_value_bytes(records[i:])
        else:
            nbytes = key_value_bytes(records[c:i])
        self.counted = i
        self.counted_bytes += nbytes
        return i - c, nbytes


_READY = FetchStatus.READY


class HeldRecords:
    """Records of one refill, per partition in the drain's order.

    ``run`` is the partition being handed out; ``verified`` is the value of
    ``changes`` when its checks were last made in full, or -1 when the next step
    must make them (see the module docstring).
    """

    __slots__ = ("_pending", "_runs", "changes", "run", "stepper", "verified")

    def __init__(self, changes: DeliveryChanges | None = None) -> None:
        self._runs: deque[_Run] = deque()
        self.run: _Run | None = None
        self.changes = DeliveryChanges() if changes is None else changes
        self.verified = -1
        #: Records handed out and bytes, of runs no longer current, not yet counted.
        self._pending = [0, 0]
        #: The native ``HeldSteps`` that last loaded the current run: its steps do
        #: not write ``run.index``, so ``_sync`` has it written before one is read.
        self.stepper: Any = None

    def __bool__(self) -> bool:
        return self.run is not None

    def hold(
        self,
        assignment: Assignment,
        result: dict[TopicPartition, list[ConsumerRecord]],
        before: dict[TopicPartition, int | None],
        sizes: dict[TopicPartition, int] | None = None,
    ) -> None:
        """Keep a drain's records; ``before``: each partition's position before it;
        ``sizes``: each partition's key + value bytes in ``result``, if counted."""
        for tp, records in result.items():
            st = assignment.get(tp)
            start = before.get(tp)
            if not records or st is None or start is None or st.position is None:
                continue
            nbytes = None if sizes is None else sizes.get(tp)
            run = _Run(assignment, st, records, start, st.position, nbytes)
            st.position = start  # nothing of it is handed out yet
            self._runs.append(run)
        if self.run is None and self._runs:
            self.run = self._runs.popleft()
        self._moved()

    def expire(self) -> None:
        """Make the next step take the full check (and the caller's bookkeeping)."""
        self._moved()

    def _moved(self) -> None:
        """Runs or their progress changed here: every iterator's next step checks in full.

        Bumps the count, so an iterator that keeps the current run in its own
        variables (``iterate``) - another task's, say - cannot go on from them.
        """
        self.verified = -1
        self.changes.value += 1

    def take(self, assignment: Assignment) -> ConsumerRecord | None:
        """The next held record that may still go out, checked in full; None: none left.

        Leaves ``verified`` set when the run that is current afterwards passed the
        check with nothing changed since, so the next steps may go without it.
        """
        self._sync()
        self._moved()
        run = self.run
        while run is not None:
            if self._holds(assignment, run):
                records = run.records
                record = records[run.index]
                run.index += 1
                st = run.state
                if run.index < len(records):
                    st.position = record.offset + 1
                    # Nothing changed since the check a line above: the next steps
                    # may compare the count instead.
                    self.verified = self.changes.value
                else:
                    st.position = run.end
                    self._next_run()
                    if self.run is not None and self._holds(assignment, self.run):
                        self.verified = self.changes.value
                return record
            self._give_back(assignment, run)
            run = self.run
        return None

    def release(self, assignment: Assignment | None) -> None:
        """Give back every record not handed out (another read path is about to read)."""
        self._sync()
        self._moved()
        run = self.run
        while run is not None:
            self._give_back(assignment, run)
            run = self.run

    def handed_out(self) -> tuple[int, int]:
        """Records handed out, and their key + value bytes, since the last call."""
        self._sync()
        n, nbytes = self._pending
        self._pending = [0, 0]
        run = self.run
        if run is not None:
            more, more_bytes = run.count()
            n += more
            nbytes += more_bytes
        return n, nbytes

    # -- internals ----------------------------------------------------------------------

    def _sync(self) -> None:
        """The native stepper's progress into ``run.index``; it lets go of the run."""
        stepper = self.stepper
        if stepper is not None:
            self.stepper = None
            stepper.sync()

    @staticmethod
    def _holds(assignment: Assignment, run: _Run) -> bool:
        st = run.state
        return (
            run.assignment is assignment
            and st.position == run.expected
            and st.epoch == run.epoch
            and not st.revoking
            and not st.paused
            and st.status is _READY
        )

    def _next_run(self) -> None:
        """The current run is done with: count what went out, go to the next."""
        run = self.run
        if run is not None:
            n, nbytes = run.count()
            self._pending[0] += n
            self._pending[1] += nbytes
        self.run = self._runs.popleft() if self._runs else None

    def _give_back(self, assignment: Assignment | None, run: _Run) -> None:
        st = run.state
        if (
            assignment is not None
            and assignment.get(st.tp) is st
            and st.epoch == run.epoch
            and st.position == run.expected
        ):
            # Refetch from the first record not handed out; the read-ahead past it goes.
            st.seek(run.expected)
        self._next_run()


def held_steps_type() -> Any:
    """``aiogroup_native.HeldSteps``, or None (no module, an older build, ``AIOGROUP_NATIVE=0``)."""
    return getattr(native._enabled(), "HeldSteps", None)


def iterate(
    held: HeldRecords,
    sub: SubscriptionState,
    clock: Callable[[], float],
    step: Callable[[], Awaitable[ConsumerRecord | None]],
) -> AsyncIterator[ConsumerRecord]:
    """``async for``'s steps: held records by the count's check, else ``step``.

    The native ``HeldSteps`` when there is one, else :func:`iterate_python`; both
    hand out the same records with the same checks (tests/unit/test_fetch_iteration.py
    runs every case on both).  ``step`` is the full step (errors, the full check, the
    caller's bookkeeping, a refill when nothing is held); None from it ends the
    iteration (the consumer stopped).  ``clock``: the loop's clock, for the gate.
    """
    steps_type = held_steps_type()
    if steps_type is None:
        return iterate_python(held, sub, clock, step)
    return iterate_native(steps_type, held, sub, clock, step)


def iterate_native(
    steps_type: Any,
    held: HeldRecords,
    sub: SubscriptionState,
    clock: Callable[[], float],
    step: Callable[[], Awaitable[ConsumerRecord | None]],
) -> AsyncIterator[ConsumerRecord]:
    """:func:`iterate` with the native fast step (``steps_type``: ``HeldSteps``).

    ``HeldSteps`` hands out ``records[i]`` while ``i`` is before the run's last
    record, the count is the one loaded with the run and the gate is open; for
    any other step it awaits ``slow(it)``, which does what
    :func:`iterate_python` does there and loads the run the next steps may go on with.
    """
    loaded = [-1]  # the count the current load was checked at; -1: none

    async def slow(it: Any) -> ConsumerRecord:
        taken = None
        if held.changes.value == loaded[0] and sub.membership_current(clock()):
            # The run's last record with nothing changed since the full check (no
            # error waits, the gate is open): ``take`` checks in full, hands it out
            # and checks the next run, without the full step.
            assignment = sub.assignment
            taken = None if assignment is None else held.take(assignment)
        if taken is None:
            taken = await step()
            if taken is None:
                loaded[0] = -1
                it.load(None, None, 0, 0, None, None)
                raise StopAsyncIteration
        run = held.run
        if run is None or held.verified < 0 or run.index > run.last:
            loaded[0] = -1
            it.load(None, None, 0, 0, None, None)
        else:
            loaded[0] = held.verified
            it.load(held.verified, run.records, run.index, run.last, run, run.state)
            held.stepper = it
        return taken

    it: AsyncIterator[ConsumerRecord] = steps_type(held.changes, sub, clock, slow)
    return it


async def iterate_python(
    held: HeldRecords,
    sub: SubscriptionState,
    clock: Callable[[], float],
    step: Callable[[], Awaitable[ConsumerRecord | None]],
) -> AsyncIterator[ConsumerRecord]:
    """:func:`iterate` as an async generator: the fallback without the native module.

    ``step`` is the full step (errors, the full check, the caller's bookkeeping, a
    refill when nothing is held); None from it ends the iteration (the consumer
    stopped).  ``clock``: the loop's clock, for the membership gate.

    The fast branch below is the whole per-record cost of ``async for`` once a refill
    is held: one resumption of this generator, one comparison of the count, the
    gate's deadline (and the clock while one is set), the position moved past the
    record.  No function call and no await: nothing else runs between the check and
    the hand-over.  The current run is kept in local variables, read again after each
    full step; anything else that moves a run (another task's step, a refill, a give
    back, ``expire``) bumps the count, so the locals are never used stale.
    """
    changes = held.changes
    seen = -1  # the count when this generator last made the full check
    records: list[ConsumerRecord] = []
    i = last = 0
    run: _Run | None = None
    state: PartitionState | None = None
    while True:
        if changes.value == seen:
            until = sub.membership_valid_until
            if until is None or clock() < until:
                if i < last:
                    record = records[i]
                    i += 1
                    run.index = i  # type: ignore[union-attr]
                    state.position = record.offset + 1  # type: ignore[union-attr]
                    yield record
                    continue
                # The run's last record.  Nothing changed since the full step (no
                # error waits, the gate is open): ``take`` checks in full, hands it
                # out and checks the next run, without the full step's coroutine.
                assignment = sub.assignment
                taken = None if assignment is None else held.take(assignment)
                if taken is not None:
                    run = held.run
                    if run is None:
                        seen = -1
                    else:
                        seen = held.verified
                        records, i, last, state = run.records, run.index, run.last, run.state
                    yield taken
                    continue
        taken = await step()
        if taken is None:
            return
        run = held.run
        if run is None:
            seen = -1
        else:
            seen = held.verified
            records, i, last, state = run.records, run.index, run.last, run.state
        yield taken
