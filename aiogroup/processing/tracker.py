"""Per-partition offset tracking: what may be committed while handlers run out of order.

A partition's records reach the processor in offset order but finish in any order
(other keys, other lanes).  The tracker keeps the records received and not yet
finished; everything else it has seen - finished records, and offsets the fetch
skipped (compacted away, transaction markers) - is done.  So:

* the **committable offset** is the first unfinished record (or, with none, the
  offset after the last record received, carried further over runs the previous
  owner reported finished);
* the **finished beyond** it are the done runs between unfinished records, plus the
  runs inherited from the committed metadata that have not been received yet, so a
  commit made before they arrive still hands them on;
* a record whose offset lies in an inherited run is *skipped*: it was finished by
  the previous owner (:meth:`PartitionTracker.received` returns False).

Pure: no I/O and no clock; the processor feeds it and reads it.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable

from aiogroup.processing import offset_metadata

__all__ = ["CommitPoint", "PartitionTracker"]

CommitPoint = tuple[int, str]


class PartitionTracker:
    """Received, unfinished and inherited-finished offsets of one assigned partition."""

    def __init__(self, start: int | None = None, inherited: Iterable[tuple[int, int]] = ()) -> None:
        #: One past the highest offset received (the committed offset at assignment
        #: before any record arrived; None: nothing committed, nothing received).
        self._next: int | None = start
        self._nothing_received = True
        self._pending: set[int] = set()
        #: The unfinished offsets in increasing order, with finished ones not yet popped
        #: from the front: records arrive in offset order, so a deque is the sorted
        #: order for free (a heap paid a log-time push and pop per record); its front,
        #: once finished ones are popped, is the first unfinished record.
        self._order: deque[int] = deque()
        runs = sorted((s, e) for s, e in inherited if e > s and (start is None or e > start))
        self._skip_starts = [s for s, _ in runs]
        self._skip = runs
        #: Where the last inherited run ends (a received offset at or past it is in none).
        self._skip_end = max((e for _, e in runs), default=None)
        #: :meth:`finished_beyond` and :meth:`commit_point` of the current state (None:
        #: not computed since the last change).  Each change clears it with one store;
        #: reading them costs a walk over the unfinished offsets, and a processor with
        #: ``max_uncommitted`` commits every few records, mostly with some partitions
        #: unchanged since their last commit (issue 25: recomputed per partition per
        #: commit, the walk was half of that option's cost).
        self._runs_cache: list[tuple[int, int]] | None = None
        self._point_cache: tuple[int, CommitPoint | None] | None = None
        #: Offsets reported by :attr:`finish_later` and not applied yet.
        self._finished_log: list[int] = []
        #: ``finish_later(offset)``: :meth:`finished_if_pending`, deferred - the offset
        #: is noted (a list's own append, no Python frame) and applied, all noted ones
        #: at once, by the next call of any other method here, so what the tracker
        #: answers is the same as if each had been applied at once.  The processor's
        #: handler tasks finish some 100,000 records a second at concurrency 1000,
        #: and the commits, pauses and metrics read the tracker a few times a second
        #: (issue 25: the per-record call was a tenth of the processor's own work).
        self.finish_later: Callable[[int], None] = self._finished_log.append

    def _apply_finished(self) -> None:
        """Apply the offsets noted by :attr:`finish_later` (each as
        :meth:`finished_if_pending`: one no longer pending is ignored)."""
        log = self._finished_log
        pending = self._pending
        pending.difference_update(log)
        log.clear()
        self._runs_cache = self._point_cache = None
        order = self._order
        # The front of the order is pending (or the order empty) after every change.
        while order and order[0] not in pending:
            order.popleft()

    # -- feeding ---------------------------------------------------------------------

    def received(self, offset: int) -> bool:
        """A record arrived; True: process it, False: it is done already (skip it).

        Records of a partition arrive in increasing offset order; one at or below the
        last received is a repeat (a re-fetch after a seek) and is not processed
        twice while the tracker knows it.
        """
        if self._finished_log:
            self._apply_finished()
        if self._next is None or (self._nothing_received and offset < self._next):
            # The first record, or one before the committed offset (the application's
            # listener returned an earlier start offset): the window starts here.
            self._next = offset
        if offset < self._next:
            return False
        self._runs_cache = self._point_cache = None
        self._next = offset + 1
        self._nothing_received = False
        if self._skip and self._inherited(offset):
            return False
        self._pending.add(offset)
        self._order.append(offset)
        return True

    def received_run(self, first: int, count: int) -> bool:
        """Records ``first`` .. ``first + count - 1`` arrived, with no gap: True when
        all of them are to be processed and were taken in at once; False, with nothing
        changed, when any may not be (the first records after an assignment, a repeat,
        a gap, inherited runs still ahead) - the caller then takes them one by one with
        :meth:`received`.

        The common case of a read (offsets follow on from the last one received) costs
        one call per partition rather than one per record.
        """
        if self._finished_log:
            self._apply_finished()
        if (
            self._nothing_received
            or first != self._next
            or count < 1
            or (self._skip_end is not None and self._skip_end > first)
        ):
            return False
        self._runs_cache = self._point_cache = None
        end = first + count
        offsets = range(first, end)
        self._pending.update(offsets)
        self._order.extend(offsets)
        self._next = end
        return True

    def finished(self, offset: int) -> None:
        """The record at ``offset`` is done (handled, or dead-lettered)."""
        if not self.finished_if_pending(offset):
            raise KeyError(f"offset {offset} is not an unfinished record of this partition")

    def finished_if_pending(self, offset: int) -> bool:
        """:meth:`finished` for a record that may not be pending here (its partition
        was revoked and assigned back while it ran): False, and nothing changes.

        One set lookup on the per-record path instead of a test and then a finish.
        """
        if self._finished_log:
            self._apply_finished()
        pending = self._pending
        if offset not in pending:
            return False
        pending.discard(offset)
        self._runs_cache = self._point_cache = None
        order = self._order
        if order[0] == offset:
            # Only the front's end moves the committable offset; a record finished
            # behind an unfinished one is popped when the front reaches it.
            order.popleft()
            while order and order[0] not in pending:
                order.popleft()
        return True

    # -- reading ---------------------------------------------------------------------

    @property
    def unfinished(self) -> int:
        """Records received and not finished (in flight, retrying or waiting for a lane)."""
        if self._finished_log:
            self._apply_finished()
        return len(self._pending)

    def first_unfinished(self) -> int | None:
        """The lowest record received and not finished (None: there is none)."""
        if self._finished_log:
            self._apply_finished()
        return self._order[0] if self._order else None

    def is_pending(self, offset: int) -> bool:
        if self._finished_log:
            self._apply_finished()
        return offset in self._pending

    def committable(self) -> int | None:
        """The offset a commit may carry now; None before anything is known."""
        if self._finished_log:
            self._apply_finished()
        if self._order:
            return self._order[0]
        if self._next is None:
            return None
        offset = self._next
        # Inherited runs starting right here are done: carry the offset over them.
        i = bisect.bisect_left(self._skip_starts, offset)
        if i > 0 and self._skip[i - 1][1] > offset:
            i -= 1
            offset = self._skip[i][1]
            i += 1
        while i < len(self._skip) and self._skip[i][0] == offset:
            offset = self._skip[i][1]
            i += 1
        return offset

    def finished_beyond(self) -> list[tuple[int, int]]:
        """The done runs above :meth:`committable`, sorted, as half-open intervals.

        Every offset between two unfinished records (or between the last one and the
        end received) is done - finished, or never delivered (compacted away, a
        transaction marker) - then the inherited runs not received yet.  One pass over
        the unfinished offsets, cached until the next change; the caller must not
        change the list.
        """
        if self._finished_log:
            self._apply_finished()
        cached = self._runs_cache
        if cached is not None:
            return cached
        committed = self.committable()
        if committed is None:
            return []
        runs: list[tuple[int, int]] = []
        pending = self._pending
        received_end = self._next if self._next is not None else committed
        # The front of the order is pending (finished ones are popped from it), so the
        # runs found here start above the committable offset and never touch.
        prev: int | None = None
        for offset in self._order:
            if offset in pending:
                if prev is not None and offset > prev + 1:
                    runs.append((prev + 1, offset))
                prev = offset
        if prev is not None and received_end > prev + 1:
            runs.append((prev + 1, received_end))
        for start, end in self._skip:
            if end <= received_end:
                continue
            start = max(start, received_end, committed + 1)
            if end <= start:
                continue
            if runs and runs[-1][1] >= start:
                runs[-1] = (runs[-1][0], max(runs[-1][1], end))
            else:
                runs.append((start, end))
        self._runs_cache = runs
        return runs

    @property
    def inherited_runs(self) -> int:
        """How many runs the previous owner's metadata reported finished."""
        return len(self._skip)

    def finish_adds_run(self, offset: int) -> int:
        """How the number of :meth:`finished_beyond` runs changes if the unfinished
        record at ``offset`` (not the first unfinished) finishes: +1 (a new run), 0 (it
        extends one), -1 (it joins two).  Conservative: an offset past the last received
        counts as not finished, so the answer is never below the truth.
        """
        if self._finished_log:
            self._apply_finished()

        def done(n: int) -> bool:
            return self._next is not None and n < self._next and n not in self._pending

        return 1 - done(offset - 1) - done(offset + 1)

    def commit_point(
        self, max_bytes: int = offset_metadata.DEFAULT_MAX_BYTES
    ) -> CommitPoint | None:
        """(offset, metadata) to commit, or None when there is nothing to commit yet
        (cached until the next change, per ``max_bytes``)."""
        if self._finished_log:
            self._apply_finished()
        cached = self._point_cache
        if cached is not None and cached[0] == max_bytes:
            return cached[1]
        committed = self.committable()
        point = (
            None
            if committed is None
            else (committed, offset_metadata.encode(committed, self.finished_beyond(), max_bytes))
        )
        self._point_cache = (max_bytes, point)
        return point

    def _inherited(self, offset: int) -> bool:
        i = bisect.bisect_right(self._skip_starts, offset) - 1
        return i >= 0 and offset < self._skip[i][1]
