"""Dead-lettering: where a record goes when its handler failed every attempt.

``DeadLetter(topic=...)`` is the ``on_failure`` choice; :func:`dead_letter_headers`
builds the headers that name the record's origin and failure (pure, unit-tested).
The record's key and value are produced as they were read, so a dead-lettered
record can be replayed onto its source topic; that is why the processor requires
the raw bytes - the deserialised key/value are turned back into bytes only when
they already are bytes or str.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiogroup.structs import ConsumerRecord

__all__ = ["HEADER_PREFIX", "DeadLetter", "as_bytes", "dead_letter_headers"]

#: Every header the processor adds starts with this.
HEADER_PREFIX = "aiogroup.dlq."


@dataclass(frozen=True)
class DeadLetter:
    """Send failed records to ``topic``.

    ``producer``: an ``aiokafka.AIOKafkaProducer`` the application started (and
    stops); None: the processor starts its own with the consumer's bootstrap servers
    and security options, and stops it when ``run()`` ends.  The topic must exist
    (checked when ``run()`` starts).  After the produce is acknowledged the record
    counts as finished, so its offset can be committed.
    """

    topic: str
    producer: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError(f"DeadLetter.topic must be a non-empty str, got {self.topic!r}")


def as_bytes(value: Any) -> bytes | None:
    """A key or value as produced bytes: bytes and str pass, None stays None."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise TypeError(
        f"cannot dead-letter a deserialised {type(value).__name__}; use a consumer "
        "without key/value deserializers (deserialise in the handler) or a producer "
        "with serializers (DeadLetter(producer=...))"
    )


def dead_letter_headers(
    record: ConsumerRecord, error: BaseException, attempts: int
) -> list[tuple[str, bytes]]:
    """The record's own headers, then ours naming its origin and the failure."""
    own = [(k, bytes(v) if v is not None else b"") for k, v in (record.headers or ())]
    message = str(error)
    if len(message) > 1000:
        message = message[:1000] + "..."
    return [
        *own,
        (HEADER_PREFIX + "topic", record.topic.encode()),
        (HEADER_PREFIX + "partition", str(record.partition).encode()),
        (HEADER_PREFIX + "offset", str(record.offset).encode()),
        (HEADER_PREFIX + "exception", type(error).__qualname__.encode()),
        (HEADER_PREFIX + "message", message.encode(errors="replace")),
        (HEADER_PREFIX + "attempts", str(attempts).encode()),
    ]
