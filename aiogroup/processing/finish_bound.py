"""Which finishes a transactional commit can represent: the bound on finished-beyond runs.

Why: a commit carries a partition's first unfinished offset and, in its metadata, the
runs of records finished beyond it (:mod:`~aiogroup.processing.offset_metadata`).  The
metadata has a size bound, and :func:`~aiogroup.processing.offset_metadata.encode`
drops the farthest runs to stay under it: outside transactions that only costs
processing them again.  Inside one it costs duplicates - the dropped records' outputs
are committed with the transaction, yet the next owner processes them again.  So a
transactional processor takes a finish only if the commit could still represent every
finished record: the finish of the first unfinished record always (it moves the
committed offset, it adds no run), any other only while the runs stay within
:func:`max_runs`, a count that always fits whatever the offsets.  A finish held back
waits (its outputs unsent) until the committed offset moves.

Pure: reads a :class:`~aiogroup.processing.tracker.PartitionTracker`, decides.
"""

from __future__ import annotations

from aiogroup.processing import offset_metadata
from aiogroup.processing.tracker import PartitionTracker

__all__ = ["RUN_BYTES", "admissible", "max_runs"]

#: The most bytes one run can take in the metadata: a gap and a length, each below
#: 2**63 so at most 13 base-36 digits, the dot between and the comma before.
RUN_BYTES = 13 + 1 + 13 + 1


def max_runs(max_bytes: int) -> int:
    """How many runs always fit in ``max_bytes`` of metadata, whatever their offsets."""
    runs = (max_bytes - len(offset_metadata.PREFIX) + 1) // RUN_BYTES
    if runs < 1:
        raise ValueError(
            f"metadata_max_bytes ({max_bytes}) must leave room for one run of finished "
            f"offsets ({len(offset_metadata.PREFIX) + RUN_BYTES - 1} bytes)"
        )
    return runs


def admissible(tracker: PartitionTracker, offset: int, limit: int) -> bool:
    """May the unfinished record at ``offset`` be counted finished now, so that a commit
    of the tracker still lists every finished record within ``limit`` runs?

    The first unfinished record: always (the committed offset moves past it).  Others:
    at once when even the worst case fits - every run beyond the committed offset
    follows an unfinished record, so there are at most (unfinished - 1) of them after
    this finish, plus the inherited runs not yet received - else by the exact count
    (:meth:`PartitionTracker.finished_beyond`, and the run this finish adds, joins or
    extends).
    """
    if tracker.committable() == offset:
        return True
    if tracker.unfinished - 1 + tracker.inherited_runs <= limit:
        return True
    return len(tracker.finished_beyond()) + tracker.finish_adds_run(offset) <= limit
