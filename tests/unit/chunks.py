"""A fetched chunk as the fetcher makes one, for unit tests of the record path.

Several test modules hand record sets straight to the delivery and decoding code; the
chunk they need is always the same shape (the batches split as the fetcher splits
them, the size the fetcher accounts, the raw bytes the native module reads), so it is
built here once.
"""

from __future__ import annotations

from aiogroup._fetch.fetcher import Chunk, split_batches
from aiogroup._state.subscription import PartitionState


def chunk_of(
    state: PartitionState,
    data: bytes,
    fetch_offset: int = 0,
    *,
    end: int | None = None,
    aborted: list[tuple[int, int]] | None = None,
    check_crcs: bool = True,
) -> Chunk:
    """``data`` (whole batches) fetched at ``fetch_offset`` for ``state``.

    ``end``: the partition's end offset the answer gave (default: after the last batch);
    ``aborted``: the answer's aborted transactions, (producer id, first offset) pairs.
    """
    batches = split_batches(data)
    return Chunk(
        state,
        state.epoch,
        fetch_offset,
        batches,
        len(data),
        end_offset=batches[-1].next_offset if end is None else end,
        check_crcs=check_crcs,
        aborted=aborted,
        data=data,  # as the fetcher gives it: the native module reads the bytes
    )
