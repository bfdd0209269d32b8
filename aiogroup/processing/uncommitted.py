"""The work at risk: records started and not yet covered by a commit the broker answered.

After a ``kill -9`` the next owner of a partition starts from the committed offset and
skips the records the commit's metadata lists as finished; every other record the dead
member had started is processed again.  So "processed again after a crash" is at most
the records started and not *covered* by the last answered commit: below its offset,
or in its metadata runs (only where the broker keeps commit metadata - Tansu drops it,
and then only the offset covers).  ``Processor(max_uncommitted=N)`` keeps that count
at most N; this module is its bookkeeping and its start rule.

**Coverage is the latest answered commit's, not the union of all.**  The broker keeps
one (offset, metadata) per partition; a record a previous commit listed and the latest
one does not (metadata cut at its byte bound) is at risk again.

**The start rule, and why it keeps its own reserve.**  Counting alone could deadlock.
Under key ordering a partition's first unfinished record (its *gap*) can be waiting
while later records of other keys are started and finished: where only the offset
covers, those later records stay at risk until the gap itself has started, finished
and been committed - and the gap may not start once the count is at N.  So a
partition whose gap is waiting while it has records at risk beyond it holds one
*reserved* place for that gap, and a start is allowed only if the count plus the
reserved places stays at most N afterwards.  A gap may always take its partition's
reserved place; once it finishes and a commit is answered, the gap is covered, so
the count falls at least by the place the next gap may need.  With N >= 1 some start
or some commit can always make progress while anything waits (the unit tests drive
the worst orders).  A place is reserved only when the count nears N
(:meth:`UncommittedWork.may_start` first tests a cheap sufficient bound).

Pure: no I/O and no clock; the processor tells it what started and what was answered,
and gives it each partition's first unfinished offset.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Iterable

__all__ = ["GapOf", "UncommittedWork"]

#: A partition's first unfinished record's offset (None: no unfinished record).
GapOf = Callable[[Hashable], int | None]


class UncommittedWork:
    """Started, uncovered offsets per partition, and whether one more may start."""

    def __init__(self, limit: int) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"limit must be an int >= 1, got {limit!r}")
        self.limit = limit
        #: Records started and not covered, over all partitions.
        self.count = 0
        #: Partition -> its started, uncovered offsets (only partitions with some).
        self._risk: dict[Hashable, set[int]] = {}
        #: Partition -> the highest offset in its set.
        self._top: dict[Hashable, int] = {}
        #: Partition -> started offsets the latest answered commit covers by its runs
        #: only (not by its offset): a later commit that stops listing them uncovers them.
        self._listed: dict[Hashable, set[int]] = {}
        #: Partition -> the latest answered commit's runs (sorted, disjoint).
        self._runs: dict[Hashable, list[tuple[int, int]]] = {}
        #: Partition -> the size of its ``_listed`` after its last pruning.
        self._pruned: dict[Hashable, int] = {}

    # -- feeding ---------------------------------------------------------------------

    def started(self, tp: Hashable, offset: int) -> None:
        """A record's handler is about to run (before any answered commit covers it)."""
        risk = self._risk.get(tp)
        if risk is None:
            self._risk[tp] = {offset}
            self._top[tp] = offset
            self.count += 1
            return
        if offset in risk:
            return
        risk.add(offset)
        self.count += 1
        if offset > self._top[tp]:
            self._top[tp] = offset

    def covered(self, tp: Hashable, committed: int, runs: Iterable[tuple[int, int]] = ()) -> int:
        """A commit of ``tp`` at ``committed`` listing the finished ``runs`` (half-open)
        was answered: it is now what the broker holds, so the records below its offset
        or in its runs are covered, and no others.  Returns the change in the count
        (negative: records left it; positive: a cut list uncovered some again)."""
        spans = sorted((s, e) for s, e in runs if e > s)
        starts = [s for s, _ in spans]

        def run_of(o: int) -> int:
            """The index of the new run holding ``o``; -1: none."""
            i = bisect.bisect_right(starts, o) - 1
            return i if i >= 0 and o < spans[i][1] else -1

        def listed(o: int) -> bool:
            return run_of(o) >= 0

        before = self.count
        risk = self._risk.get(tp, set())
        listed_before = self._listed.get(tp)
        if listed_before and not self._still_listed(self._runs.get(tp, []), committed, run_of):
            # The new list dropped part of the old one: re-judge what it covered.
            back = {o for o in listed_before if o >= committed and not listed(o)}
            listed_before.difference_update(back)
            risk |= back
            self.count += len(back)
        now_listed = listed_before if listed_before is not None else set()
        keep: set[int] = set()
        for o in risk:
            if o < committed:
                self.count -= 1
            elif listed(o):
                now_listed.add(o)
                self.count -= 1
            else:
                keep.add(o)
        if keep:
            self._risk[tp] = keep
            self._top[tp] = max(keep)
        else:
            self._risk.pop(tp, None)
            self._top.pop(tp, None)
        if now_listed:
            # Records below the offset are covered for good; drop them now and then
            # (amortised: when the set has doubled since it was last pruned).
            if len(now_listed) > 2 * self._pruned.get(tp, 0) + 64:
                now_listed.difference_update([o for o in now_listed if o < committed])
                self._pruned[tp] = len(now_listed)
            self._listed[tp] = now_listed
            self._runs[tp] = spans
        else:
            self._listed.pop(tp, None)
            self._runs.pop(tp, None)
        return self.count - before

    @staticmethod
    def _still_listed(
        old: list[tuple[int, int]], committed: int, run_of: Callable[[int], int]
    ) -> bool:
        """Every old run's part at or above ``committed`` lies in one new run (new runs
        are disjoint and never adjacent: the format merges adjacent runs)."""
        for s, e in old:
            s = max(s, committed)
            if s >= e:
                continue
            i = run_of(s)
            if i < 0 or run_of(e - 1) != i:
                return False
        return True

    def forget(self, tp: Hashable) -> None:
        """``tp`` is not ours any more (revoked after its commit, or lost)."""
        risk = self._risk.pop(tp, None)
        self._top.pop(tp, None)
        self._listed.pop(tp, None)
        self._runs.pop(tp, None)
        self._pruned.pop(tp, None)
        if risk:
            self.count -= len(risk)

    # -- reading ---------------------------------------------------------------------

    def at_risk(self, tp: Hashable) -> int:
        risk = self._risk.get(tp)
        return len(risk) if risk else 0

    def partitions(self) -> list[Hashable]:
        """Partitions with records at risk."""
        return list(self._risk)

    def needs_reserve(self, tp: Hashable, gap: int | None) -> bool:
        """``tp``'s first unfinished record ``gap`` waits (not started) while records
        beyond it are at risk: it holds a reserved place."""
        risk = self._risk.get(tp)
        if not risk or gap is None:
            return False
        return gap not in risk and self._top[tp] > gap

    def reserved(self, gap_of: GapOf, but: Hashable = None) -> int:
        """The places held for waiting gaps (of every partition but ``but``)."""
        return sum(1 for tp in self._risk if tp != but and self.needs_reserve(tp, gap_of(tp)))

    def may_start(self, tp: Hashable, offset: int, gap_of: GapOf) -> bool:
        """Whether the record ``tp``@``offset`` (waiting, unfinished) may start now."""
        after = self.count + 1
        if after > self.limit:
            return False
        # Sufficient: even if every partition with records at risk, and this one,
        # needed a reserved place.
        if after + len(self._risk) + 1 <= self.limit:
            return True
        gap = gap_of(tp)
        risk = self._risk.get(tp)
        # Started here, the record leaves its partition's gap waiting behind it
        # (offset > gap: the gap is the first unfinished record).
        own = gap is not None and offset != gap and (risk is None or gap not in risk)
        return after + self.reserved(gap_of, but=tp) + (1 if own else 0) <= self.limit
