"""Producing failed records to the dead-letter topic: the producer's life and the send.

Why apart from :mod:`~aiogroup.processing.dead_letter` (the pure choice and its
headers): this is the I/O - the topic checked when a processor starts, a producer
started (or the application's borrowed), each failed record produced and awaited, the
producer stopped when the processor ends.  Both processors use it; each says where
its connection settings come from.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from typing import Any

from aiogroup.processing.dead_letter import DeadLetter, as_bytes, dead_letter_headers
from aiogroup.processing.errors import DeadLetterTopicError

__all__ = ["DeadLetterSender"]

log = logging.getLogger("aiogroup.processing")


class DeadLetterSender:
    """Sends records to ``choice.topic``; :meth:`open` before, :meth:`close` after."""

    def __init__(
        self,
        choice: DeadLetter,
        *,
        bootstrap_servers: Any,
        client_id: str,
        client_options: Mapping[str, Any],
    ) -> None:
        self.choice = choice
        self._bootstrap = bootstrap_servers
        self._client_id = client_id
        self._options = dict(client_options)
        self._producer: Any = None
        self._own = False

    async def open(self, topics: Collection[str]) -> None:
        """Check the topic is among ``topics`` (the cluster's), start the producer."""
        if self.choice.topic not in topics:
            raise DeadLetterTopicError(
                f"dead-letter topic {self.choice.topic!r} does not exist; create it first "
                "(the processor does not create topics)"
            )
        if self.choice.producer is not None:
            self._producer = self.choice.producer
            return
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            bootstrap_servers=self._bootstrap,
            client_id=f"{self._client_id}-dead-letter",
            acks="all",
            **self._options,
        )
        await producer.start()
        self._producer = producer
        self._own = True

    async def send(self, record: Any, exc: BaseException, attempts: int) -> None:
        """Produce ``record`` (key, value, headers + ours) and wait for the ack."""
        if self._producer is None:
            raise RuntimeError("DeadLetterSender.send() before open()")
        await self._producer.send_and_wait(
            self.choice.topic,
            value=as_bytes(record.value),
            key=as_bytes(record.key),
            headers=dead_letter_headers(record, exc, attempts),
        )
        log.warning(
            "dead-lettered %s[%d]@%d to %s after %d attempt(s): %r",
            record.topic,
            record.partition,
            record.offset,
            self.choice.topic,
            attempts,
            exc,
        )

    async def close(self) -> None:
        """Stop the producer if this sender started it (a borrowed one is left alone)."""
        producer, self._producer = self._producer, None
        if self._own and producer is not None:
            self._own = False
            await producer.stop()
