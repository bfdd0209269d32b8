"""Records built ahead for ``async for``, handed out one at a time with the delivery checks.

Why: ``async for`` asks for one record per call, and sending each through the whole
read path (errors, the drain, a fresh sink, the walker, a result dict) cost about
70,000 instructions a record against getmany's 8,000
(``python -m benchmarks.record_path_cost``).  So the iterator's refill builds as
many records as a ``getmany`` would, in the one drain, and each later step takes the
next of them after the same checks delivery makes, synchronously (no ``await``
between the check and the hand-over):

* the partition is still assigned with the same ``PartitionState`` and ``epoch``
  (a seek, a reset or a new assignment changes them), it is not ``revoking`` or
  ``paused``, and its fetch status is ``READY``;
* its position is where the last record handed out left it.

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
"""

from __future__ import annotations

from collections import deque

from aiogroup._state.subscription import Assignment, FetchStatus, PartitionState
from aiogroup.structs import ConsumerRecord, TopicPartition

__all__ = ["HeldRecords"]


class _Run:
    """One partition's held records and where handing them out has got to."""

    __slots__ = ("assignment", "end", "epoch", "expected", "index", "records", "state")

    def __init__(
        self,
        assignment: Assignment,
        state: PartitionState,
        records: list[ConsumerRecord],
        start: int,
        end: int,
    ) -> None:
        #: Replaced, never mutated: while it is the current one, ``state`` is in it.
        self.assignment = assignment
        self.state = state
        self.epoch = state.epoch
        self.records = records
        self.index = 0
        #: The position the partition must still have for the next record to go out.
        self.expected = start
        #: Where the drain left the position: set after the last record goes out.
        self.end = end


_READY = FetchStatus.READY


class HeldRecords:
    """Records of one refill, per partition in the drain's order."""

    __slots__ = ("_run", "_runs")

    def __init__(self) -> None:
        self._runs: deque[_Run] = deque()
        self._run: _Run | None = None

    def __bool__(self) -> bool:
        return self._run is not None

    def hold(
        self,
        assignment: Assignment,
        result: dict[TopicPartition, list[ConsumerRecord]],
        before: dict[TopicPartition, int | None],
    ) -> None:
        """Keep a drain's records; ``before``: each partition's position before it."""
        for tp, records in result.items():
            st = assignment.get(tp)
            start = before.get(tp)
            if not records or st is None or start is None or st.position is None:
                continue
            run = _Run(assignment, st, records, start, st.position)
            st.position = start  # nothing of it is handed out yet
            self._runs.append(run)
        if self._run is None and self._runs:
            self._run = self._runs.popleft()

    def take(self, assignment: Assignment) -> ConsumerRecord | None:
        """The next held record that may still go out, or None when none is left."""
        run = self._run
        while run is not None:
            st = run.state
            if (
                run.assignment is assignment
                and st.position == run.expected
                and st.epoch == run.epoch
                and not st.revoking
                and not st.paused
                and st.status is _READY
            ):
                records = run.records
                i = run.index
                record = records[i]
                i += 1
                if i < len(records):
                    run.index = i
                    st.position = run.expected = record.offset + 1
                else:
                    st.position = run.end
                    self._run = self._runs.popleft() if self._runs else None
                return record
            self._give_back(assignment, run)
            run = self._run = self._runs.popleft() if self._runs else None
        return None

    def release(self, assignment: Assignment | None) -> None:
        """Give back every record not handed out (another read path is about to read)."""
        run = self._run
        while run is not None:
            self._give_back(assignment, run)
            run = self._runs.popleft() if self._runs else None
        self._run = None

    @staticmethod
    def _give_back(assignment: Assignment | None, run: _Run) -> None:
        st = run.state
        if (
            assignment is not None
            and assignment.get(st.tp) is st
            and st.epoch == run.epoch
            and st.position == run.expected
        ):
            # Refetch from the first record not handed out; the read-ahead past it goes.
            st.seek(run.expected)
