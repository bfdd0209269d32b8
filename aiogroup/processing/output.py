"""What a handler of a transactional processor returns: the records its input becomes.

Why the handler returns its outputs rather than sending them: under
``Processor(..., transactional_producer=producer)`` a record's outputs must land in
the very transaction whose offsets count the record as finished - no output in a
transaction that does not count its record, no record counted in a transaction that
lacks its outputs.  A handler that sent while it ran could not know which transaction
that will be (one may be closing while it runs); so it hands its outputs back, and the
processor sends them into the transaction that is open when it takes the finish.

Pure: the value and the check of a handler's return value.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Output", "outputs_of"]


@dataclass(frozen=True, slots=True)
class Output:
    """One record to produce (the arguments of ``AIOKafkaProducer.send``).

    ``value`` and ``key`` are bytes (or None), as the producer was created to take
    them (its own serializers apply); ``headers`` pairs of ``(str, bytes)``;
    ``partition`` None lets the producer's partitioner choose.
    """

    topic: str
    value: Any
    key: Any = None
    headers: Sequence[tuple[str, bytes]] = ()
    partition: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError(f"Output.topic must be a non-empty str, got {self.topic!r}")
        if self.partition is not None and (
            not isinstance(self.partition, int)
            or isinstance(self.partition, bool)
            or self.partition < 0
        ):
            raise ValueError(
                f"Output.partition must be an int >= 0 or None, got {self.partition!r}"
            )


def outputs_of(result: object) -> list[Output]:
    """A handler's return value as its outputs: None (none), one :class:`Output`, or an
    iterable of them.  Anything else is a ``TypeError`` naming what came back - a
    handler that sends itself and returns something else must not pass silently."""
    if result is None:
        return []
    if isinstance(result, Output):
        return [result]
    if isinstance(result, str | bytes | bytearray | dict) or not isinstance(result, Iterable):
        raise TypeError(
            "a transactional processor's handler returns None, an Output or an iterable "
            f"of Output (the records its input becomes), not {type(result).__name__}"
        )
    outputs = list(result)
    for item in outputs:
        if not isinstance(item, Output):
            raise TypeError(
                "a transactional processor's handler returned an iterable holding "
                f"{type(item).__name__}, not Output"
            )
    return outputs
