"""The pause between one transaction's end and the next one's first partition.

When EndTxn is answered the transaction coordinator has only logged the decision; it
then writes the commit (or abort) markers to the partitions and completes the
transaction.  An AddPartitionsToTxn that arrives in between is answered
CONCURRENT_TRANSACTIONS, and aiokafka sends it again 20 ms later (its fixed backoff
for this case, after KAFKA-5477) - twenty times the gap it tried to save.  A
consume-transform-produce loop starts its next transaction within a fraction of a
millisecond, so on Apache Kafka 4.4 (one local node) 38-41 % of 200 back-to-back
transactions of 100 records paid that retry; with the first send of the next
transaction held 1 ms after the previous end, 2-5 % did, and aiokafka's transaction
rate went from 61-66 to 104-119 a second (a loop of ``async with
producer.transaction()`` around 100 sends, counting requests at the client,
2026-11-27, load 4-8).  librdkafka schedules its first AddPartitionsToTxn on a 1 ms
timer, which has the same effect.

Only the moments are kept here (per producer, weakly); :mod:`aiogroup.transactions`
marks the end of each transaction it commits or aborts and waits out the rest of the
pause before the next one begins.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

__all__ = ["MARKER_PAUSE_S", "ended", "wait_for_markers"]

#: How long after a transaction's end the next one's first partition is added.
MARKER_PAUSE_S = 0.001

#: Per producer, the loop time its last transaction ended (commit or abort answered).
_ENDED: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def ended(producer: Any) -> None:
    """``producer``'s transaction just ended (its EndTxn was answered)."""
    try:
        _ENDED[producer] = asyncio.get_running_loop().time()
    except TypeError:  # not weakly referenceable (a test double): no pacing
        pass


async def wait_for_markers(producer: Any, pause: float = MARKER_PAUSE_S) -> None:
    """Wait out what is left of ``pause`` since ``producer``'s last transaction ended."""
    try:
        last = _ENDED.get(producer)
    except TypeError:
        return
    if last is None:
        return
    remaining = last + pause - asyncio.get_running_loop().time()
    if remaining > 0:
        await asyncio.sleep(remaining)
