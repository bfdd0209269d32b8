"""The processing layer's errors."""

from __future__ import annotations

from aiogroup.errors import ConfigurationError
from aiogroup.structs import TopicPartition

__all__ = ["DeadLetterTopicError", "ProcessingError"]


class ProcessingError(Exception):
    """A record's handler failed every attempt and ``on_failure="stop"`` was chosen.

    Raised from ``Processor.run()``; the handler's last exception is ``__cause__``.
    Nothing at or past ``offset`` of ``partition`` has been committed, so the record
    is processed again by the next owner of the partition.
    """

    def __init__(self, partition: TopicPartition, offset: int, attempts: int, cause: BaseException):
        self.partition = partition
        self.offset = offset
        self.attempts = attempts
        self.cause = cause
        super().__init__(
            f"handler failed on {partition.topic}[{partition.partition}]@{offset} after "
            f"{attempts} attempt(s): {type(cause).__name__}: {cause}"
        )


class DeadLetterTopicError(ConfigurationError):
    """The dead-letter topic does not exist (raised by ``run()`` before any record)."""
