"""Records kept out of the cyclic collector while the fetcher still holds them.

Why: the fetcher pauses the collector while it builds records (``Delivery.drain``),
so a collection runs at most once per call, but that one collection, right after
the call, walked every record just handed out: each is a GC-tracked
``ConsumerRecord`` and the application holds them.  On a Tansu 1 KiB drain that
was about 180 ns a record, 13.7 % of the CPU (perf; docs/benchmarks.md, "Records out
of the collector's way").  The application usually drops a call's records by the
next call, before any collection needs them.

Untracking a record for good would leak: a cycle the application makes through it
(``r.note = [r]``, or the record put into its own deserialized value) is never found
by the collector.  So the rule here is: a natively built record is untracked only
while this object holds a reference of its own to it, and before that reference is
dropped the record is tracked again if anything else refers to it
(``aiogroup_native.retrack_shared``: a reference count above one).  A record nobody
else holds is freed by its reference count, and cannot be in a cycle; one still
held is tracked again, and from then on the collector treats it as any object.  A
cycle through a record is therefore collected, later than it would have been: after
the second drain that builds records after the one that built it (the consumer's
``getmany`` / ``async for`` refills), at ``close()``, or when the consumer itself is
collected.  Until then ``gc.is_tracked(record)`` is False and ``gc.get_referrers``
does not list the record, as for the tuples and dicts CPython untracks itself.

The price: records the application dropped are freed when the fetcher next looks
(``sweep``: at the next drain, or at the event loop's next turn after the call that
handed them out, whichever comes first), not at once; records still held are tracked
again after two drains.  A first version let go of records only two drains later and
made the next drain build into cold memory: its CPU rose by about what the collector
saved (docs/benchmarks.md).  Records of the pure path (no native module) are not
untracked.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from aiogroup._fetch.native import native_gc_tracking
from aiogroup.structs import ConsumerRecord

__all__ = ["YoungRecords"]

#: Drains a generation of records stays untracked: the one that built it and the
#: next.  At the start of the second drain after it, the application that does
#: ``records = await consumer.getmany()`` has replaced them (one drain is not
#: enough: the name still holds them while the next call drains).
GENERATIONS = 2


class YoungRecords:
    """The records the fetcher built and untracked, by drain, until they may go.

    ``adopt`` (as a batch is built) untracks records and keeps a reference to each;
    ``sweep`` frees those nobody else holds; ``turn`` (at the start of each drain)
    sweeps, starts a new generation and lets the oldest go, tracked again where still
    shared; ``release`` lets every one go the same way (close).  Without the native
    module's functions it does nothing.
    """

    __slots__ = ("_built", "_gens", "_keep", "_retrack", "_untrack")

    def __init__(self) -> None:
        fns = native_gc_tracking()
        self._untrack: Callable[[list[Any], type], int] | None = None
        self._retrack: Callable[[list[Any], type], int] | None = None
        self._keep: Callable[[list[Any], type], list[Any]] | None = None
        if fns is not None:
            self._untrack, self._retrack, self._keep = fns
        self._gens: deque[list[ConsumerRecord]] = deque([[]])
        #: Records were adopted since the last turn (a sweep may have freed them all:
        #: the generations still age, so a record kept from an older one is let go).
        self._built = False

    def adopt(self, records: list[ConsumerRecord]) -> None:
        """Untrack ``records`` (natively built ones) and hold each until released."""
        untrack = self._untrack
        if untrack is None or not records:
            return
        self._gens[-1].extend(records)  # our own reference first, then untrack
        self._built = True
        untrack(records, ConsumerRecord)

    def sweep(self) -> None:
        """Free the records only held here (the application dropped them); age nothing."""
        keep = self._keep
        if keep is None:
            return
        gens = self._gens
        for i, g in enumerate(gens):
            if g:
                gens[i] = keep(g, ConsumerRecord)

    def turn(self) -> None:
        """A drain starts: records only held here are freed; if records were built since
        the last turn, a new generation starts and the one two drains old goes."""
        gens = self._gens
        built, self._built = self._built, False
        # Freed now, as the application's drop would have freed them, rather than a
        # drain later: their memory is reused while still in the caches.
        self.sweep()
        if not built:
            return  # nothing built since the last turn: nothing ages
        gens.append([])
        while len(gens) > GENERATIONS:
            self._let_go(gens.popleft())

    def release(self) -> None:
        """Let every held record go (tracked again where shared)."""
        gens = self._gens
        while gens:
            self._let_go(gens.popleft())
        gens.append([])

    def _let_go(self, records: list[Any]) -> None:
        retrack = self._retrack
        if retrack is not None and records:
            retrack(records, ConsumerRecord)
        records.clear()

    @property
    def held(self) -> int:
        """How many records are held (untracked, or shared and about to be tracked)."""
        return sum(len(g) for g in self._gens)

    def __del__(self) -> None:
        # The consumer was dropped without close(): what is shared is tracked again
        # before the references go (never leave an untracked record behind).
        try:
            self.release()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass
