"""Exceptions raised to applications.

Kafka's own broker errors are aiokafka's classes (``aiokafka.errors``) so that code
catching them keeps working; the classes below cover what aiokafka has no name for.
"""

from __future__ import annotations

from typing import Any

from aiokafka.errors import (
    BrokerResponseError,
    ConsumerStoppedError,
    IllegalStateError,
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
    NoOffsetForPartitionError,
    for_code,
)
from aiokafka.errors import CommitFailedError as _AIOKafkaCommitFailedError

__all__ = [
    "BrokerResponseError",
    "CommitFailedError",
    "ConfigurationError",
    "ConsumerStoppedError",
    "FencedInstanceIdError",
    "IllegalStateError",
    "InvalidTopicNameError",
    "KafkaError",
    "KafkaTimeoutError",
    "MalformedProtocolDataError",
    "NoOffsetForPartitionError",
    "RebalanceListenerError",
    "error_for_code",
]


class ConfigurationError(KafkaConfigurationError, ValueError):
    """A consumer option, or a combination of options, is invalid.

    A ``KafkaError`` (aiokafka's ``KafkaConfigurationError``) so that an aiokafka
    program's ``except KafkaError`` still catches it, and a ``ValueError`` because
    that is what a bad argument is in Python.
    """


class InvalidTopicNameError(KafkaError, ValueError):
    """A topic name breaks Kafka's naming rules (a ``KafkaError`` and a ``ValueError``)."""


class CommitFailedError(_AIOKafkaCommitFailedError):
    """A commit was refused; the message starts with the actual reason.

    aiokafka's class prepends a fixed paragraph about ``max_poll_interval_ms`` to
    every message, which buries the reason (a partition not owned, a rebalance in
    progress) at the end of a tuple repr.  This subclass keeps aiokafka's class in
    the hierarchy (``except aiokafka.errors.CommitFailedError`` still catches it)
    but its message is just the reason given.
    """

    def __init__(self, *args: Any) -> None:
        KafkaError.__init__(self, *args)


class MalformedProtocolDataError(KafkaError):
    """Bytes from a peer (subscription or assignment metadata) could not be decoded."""


class RebalanceListenerError(KafkaError):
    """Wraps nothing: listeners' own exceptions are re-raised as they are.

    Kept for applications that want one class to catch rebalance failures raised by
    aiogroup itself (for example a listener that did not finish in time).
    """


class FencedInstanceIdError(BrokerResponseError):
    """Another consumer with the same ``group_instance_id`` has joined (KIP-345)."""

    errno = 82
    message = "FENCED_INSTANCE_ID"
    description = (
        "The broker fenced this static member: another instance uses its group_instance_id."
    )


def error_for_code(code: int) -> type[BrokerResponseError]:
    """Map a Kafka error code to its exception class, including codes aiokafka lacks."""
    if code == FencedInstanceIdError.errno:
        return FencedInstanceIdError
    cls: type[BrokerResponseError] = for_code(code)
    return cls
