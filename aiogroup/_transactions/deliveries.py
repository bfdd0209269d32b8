"""The outputs a transform sent inside one transaction, and whether each was delivered.

Why: aiokafka's ``commit_transaction()`` flushes the open batches and sends EndTxn, but
a batch that failed (its Produce refused after the retries) only fails that batch's
futures - the transaction manager is not put in an error state, so the commit goes on
and the offsets land without the failed outputs: input marked done, output missing.
Java's producer turns such a failure into an abortable error.  :class:`DeliveryTracker`
hands the transform a producer whose ``send``/``send_batch`` keep the futures they
return, so the loop can await every delivery before it commits and abort instead.

It also lets the transform return without awaiting its deliveries: the loop awaits
them while the transaction's offsets go out (AddOffsetsToTxn, TxnOffsetCommit), so the
produce round trip and the producer's linger overlap the offset requests instead of
preceding them.
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["DeliveryTracker"]


class DeliveryTracker:
    """Wraps a producer for one transaction; every other attribute is the producer's own."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer
        self._futures: list[asyncio.Future[Any]] = []
        #: Outputs sent through this tracker in all (delivered or not).
        self.sent = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    async def send(self, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """``AIOKafkaProducer.send``: the record is in the producer's buffer; its future kept."""
        future: asyncio.Future[Any] = await self._producer.send(*args, **kwargs)
        self._futures.append(future)
        self.sent += 1
        return future

    async def send_batch(self, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """``AIOKafkaProducer.send_batch``: the batch is queued; its future kept."""
        future: asyncio.Future[Any] = await self._producer.send_batch(*args, **kwargs)
        self._futures.append(future)
        self.sent += 1
        return future

    @property
    def pending(self) -> int:
        """Outputs sent whose delivery is not known yet."""
        return sum(not f.done() for f in self._futures)

    async def delivered(self) -> int:
        """Await every output sent so far; raise the first failure.  Returns how many."""
        futures, self._futures = self._futures, []
        try:
            await asyncio.gather(*futures)
        except BaseException:
            # The transaction will be aborted: the rest need no awaiting, only their
            # exceptions retrieved (no "exception was never retrieved" noise).
            for f in futures:
                if f.done() and not f.cancelled():
                    f.exception()
            raise
        return len(futures)

    def forget(self) -> None:
        """The transaction was aborted: its outputs need no awaiting, but a failure of
        theirs, now or later, is retrieved (no "exception was never retrieved" noise)."""
        futures, self._futures = self._futures, []
        for f in futures:
            f.add_done_callback(_retrieve)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
