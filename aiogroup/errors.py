"""Exceptions raised to applications.

Kafka's own broker errors are aiokafka's classes (``aiokafka.errors``) so that code
catching them keeps working; the classes below cover what aiokafka has no name for.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aiokafka.errors import (
    BrokerResponseError,
    ConsumerStoppedError,
    IllegalStateError,
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NodeNotReadyError,
    NoOffsetForPartitionError,
    RequestTimedOutError,
    for_code,
)
from aiokafka.errors import CommitFailedError as _AIOKafkaCommitFailedError

from aiogroup.structs import TopicPartition

__all__ = [
    "AUTHORIZATION_CODES",
    "RETRIABLE_CODES",
    "STALE_METADATA_CODES",
    "TRANSPORT_ERRORS",
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
    "NotGroupMemberError",
    "RebalanceListenerError",
    "RecordDeserializationError",
    "TransactionFencedError",
    "TransactionInDoubtError",
    "authorization_error",
    "error_for_code",
    "is_authorization_error",
    "is_retriable",
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


class NotGroupMemberError(IllegalStateError):
    """The consumer holds no group membership to name: no group metadata exists yet.

    Raised by ``group_metadata()`` before the first assignment, after the membership
    was lost, for a consumer without a group or with ``assign()``-ed partitions.  An
    ``IllegalStateError`` (aiokafka's) because calling it then is a misuse of order,
    not a broker fault; the message says which of the cases it is.
    """


class TransactionFencedError(KafkaError):
    """A transactional offset commit was refused because its sender is a zombie.

    Either the group has replaced the consumer member whose metadata the commit
    carried (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID,
    STALE_MEMBER_EPOCH, FENCED_MEMBER_EPOCH: KIP-447) or another producer took over
    the transactional id (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH).  One class for
    all of them because the application's answer is the same: the work of this
    transaction belongs to someone else now - drop it, do not retry it.

    ``code`` is the broker's error code and ``error`` aiokafka's class for it
    (``UnknownError`` for the KIP-848 epoch codes, which aiokafka does not name; the
    message names them); ``producer_fenced`` tells the two kinds apart (a fenced
    producer cannot start another transaction and must be closed); ``aborted`` says
    whether the transaction's abort was confirmed (a fenced producer cannot abort:
    the new owner of the transactional id aborts it on its behalf).
    """

    def __init__(
        self,
        message: str,
        *,
        code: int,
        error: type[BaseException],
        producer_fenced: bool,
        aborted: bool,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.error = error
        self.producer_fenced = producer_fenced
        self.aborted = aborted


class TransactionInDoubtError(KafkaTimeoutError):
    """A transaction's commit was sent and its answer did not come in time.

    Whether it committed is unknown: aiokafka's EndTxn cannot be recalled and is sent
    again to a new coordinator, so the coordinator may still complete it.  Reading the
    transaction's input again before the answer is known may write its outputs twice;
    the group's committed offsets tell a later start which way it went.  A
    ``KafkaTimeoutError`` (it is one) that must not be handled by simply retrying.
    """


def error_for_code(code: int) -> type[BrokerResponseError]:
    """Map a Kafka error code to its exception class, including codes aiokafka lacks."""
    if code == FencedInstanceIdError.errno:
        return FencedInstanceIdError
    cls: type[BrokerResponseError] = for_code(code)
    return cls


#: Kafka's authorization codes and the ACL resource each one is about.
AUTHORIZATION_CODES: dict[int, str] = {
    29: "topic",  # TOPIC_AUTHORIZATION_FAILED
    30: "group",  # GROUP_AUTHORIZATION_FAILED
    31: "cluster",  # CLUSTER_AUTHORIZATION_FAILED
}


def is_authorization_error(exc: BaseException) -> bool:
    """A refusal by the broker's authorizer (an ACL is missing), not a transient fault."""
    return getattr(exc, "errno", None) in AUTHORIZATION_CODES


def authorization_error(
    code: int,
    *,
    group_id: str | None = None,
    topics: Iterable[str] = (),
    during: str = "",
) -> BrokerResponseError:
    """The exception for an authorization code, its message naming the resource and the
    ACL that is missing (the class stays aiokafka's, so ``except
    GroupAuthorizationFailedError`` keeps working).

    Why: the broker answers only a code; "GroupAuthorizationFailedError: Heartbeat"
    sends an operator looking in the wrong place.  What a consumer needs is fixed
    (Kafka's consumer ACLs): READ on its group, READ on each topic it reads (which
    implies DESCRIBE).
    """
    cls = error_for_code(code)
    name = cls.message if isinstance(getattr(cls, "message", None), str) else str(code)
    where = f" ({name}{'; ' + during if during and during != name else ''})"
    kind = AUTHORIZATION_CODES.get(code)
    names = sorted(set(topics))
    if kind == "group":
        text = (
            f"not authorized for group {group_id!r}{where}: the principal needs READ on "
            f"group {group_id!r} (an ACL: resource GROUP, operation READ)"
        )
    elif kind == "topic":
        shown = ", ".join(repr(t) for t in names) if names else "a topic it reads"
        text = (
            f"not authorized for topic {shown}{where}: the principal needs READ on each "
            f"topic it consumes (an ACL: resource TOPIC, operation READ; READ implies DESCRIBE)"
        )
        if group_id is not None:
            text += f"; group {group_id!r}"
    else:
        text = f"not authorized for the cluster{where}"
    error = cls(text)
    error.explained = True  # not explained twice
    return error


class RecordDeserializationError(KafkaError):
    """The key or value deserializer rejected a record (Java's KIP-334 rule).

    Every record before it has been delivered; the partition's position stays on
    this record, so every read of the partition raises this again until the
    application seeks past it (``seek(tp, offset + 1)``) or elsewhere.  Nothing is
    skipped silently.  The deserializer's own exception is ``__cause__``.

    The error is also an instance of the deserializer's exception class: built with a
    ``json.JSONDecodeError`` cause it is a ``RecordDeserializationError`` *and* a
    ``json.JSONDecodeError`` (so a ``ValueError``), carrying that exception's
    attributes (``msg``, ``pos``, ...).  aiokafka lets the deserializer's exception out
    of ``getmany()`` unchanged, so code written for it that catches ``ValueError``
    keeps catching it, and code written for aiogroup that catches this class (or
    ``KafkaError``) does too.  The class is made once per deserializer exception
    class (see :func:`_with_cause_type`); where Python cannot combine the two (a
    conflicting C layout, a ``BaseException`` that is not an ``Exception``) the
    nearest base class that can be combined is used, at worst none.
    """

    #: The deserializer exception class this error is also an instance of (None: none).
    cause_type: type[BaseException] | None = None

    def __new__(
        cls, tp: TopicPartition, offset: int, origin: str, cause: BaseException
    ) -> RecordDeserializationError:
        if cls is RecordDeserializationError:
            cls = _with_cause_type(type(cause))
        base = cls.cause_type
        if base is not None:
            try:
                # The cause class's allocator: a C-level one (OSError's) must make it.
                made: RecordDeserializationError = base.__new__(cls)
                return made
            except TypeError:
                cls = RecordDeserializationError
        return Exception.__new__(cls)

    def __init__(self, tp: TopicPartition, offset: int, origin: str, cause: BaseException) -> None:
        message = (
            f"the {origin} deserializer rejected the record of {tp.topic}-{tp.partition} at "
            f"offset {offset} ({type(cause).__name__}: {cause}); the position stays there: "
            f"seek({tp.topic}-{tp.partition}, {offset + 1}) to skip it"
        )
        base = self.cause_type
        if base is not None:
            # The cause's own state, so its handlers find what they read (a C-level
            # exception's fields through its __init__, a Python one's through __dict__).
            try:
                base.__init__(self, *cause.args)
            except Exception:  # an __init__ wanting other arguments: __dict__ below
                pass
            self.__dict__.update(getattr(cause, "__dict__", {}))
        super().__init__(message)
        self.args = (message,)
        #: The record's partition and offset, and which deserializer failed.
        self.tp = tp
        self.offset = offset
        self.origin = origin
        self.__cause__ = cause

    def __str__(self) -> str:
        # KafkaError's "<class>: <message>", without the cause class's own __str__
        # (UnicodeDecodeError's would describe the cause's fields, not this message).
        return f"RecordDeserializationError: {BaseException.__str__(self)}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (RecordDeserializationError, (self.tp, self.offset, self.origin, self.__cause__))


_WITH_CAUSE_TYPE: dict[type[BaseException], type[RecordDeserializationError]] = {}


def _with_cause_type(cause_type: type[BaseException]) -> type[RecordDeserializationError]:
    """The subclass of RecordDeserializationError and ``cause_type`` (made once, cached).

    Walks ``cause_type``'s MRO to the first class Python can combine with this one;
    ``Exception`` and above add nothing and are not used.
    """
    made = _WITH_CAUSE_TYPE.get(cause_type)
    if made is not None:
        return made
    made = RecordDeserializationError
    for base in cause_type.__mro__:
        if base in (Exception, BaseException, object) or not issubclass(base, Exception):
            break
        if issubclass(RecordDeserializationError, base) or issubclass(base, KafkaError):
            break  # already one (a KafkaError cause): nothing to add
        try:
            made = type(
                "RecordDeserializationError",
                (RecordDeserializationError, base),
                {
                    "__module__": __name__,
                    "__qualname__": "RecordDeserializationError",
                    "cause_type": base,
                },
            )
        except TypeError:
            continue  # layout conflict: try the next base
        break
    if len(_WITH_CAUSE_TYPE) < 1024:  # bounded: deserializers raise few distinct classes
        _WITH_CAUSE_TYPE[cause_type] = made
    return made


#: Partition-level codes that stale metadata explains (Kafka's InvalidMetadataException
#: family): the same request can succeed once metadata names the partition's current
#: leader, so the answer is a metadata refresh and a retry, never an error.
STALE_METADATA_CODES = frozenset(
    {
        3,  # UNKNOWN_TOPIC_OR_PARTITION: metadata not yet propagated
        5,  # LEADER_NOT_AVAILABLE: an election is in progress
        6,  # NOT_LEADER_OR_FOLLOWER
        56,  # KAFKA_STORAGE_ERROR: the leader's log dir went offline
        74,  # FENCED_LEADER_EPOCH
        75,  # UNKNOWN_LEADER_EPOCH
    }
)

#: Every code the package answers by retrying after a backoff, the one list for all
#: request paths (Fetch, ListOffsets, the high watermark probe, offset fetches).  The
#: codes aiokafka marks ``retriable`` plus the newer ones it has no class for.
RETRIABLE_CODES = STALE_METADATA_CODES | frozenset(
    {
        7,  # REQUEST_TIMED_OUT
        14,  # COORDINATOR_LOAD_IN_PROGRESS
        15,  # COORDINATOR_NOT_AVAILABLE
        16,  # NOT_COORDINATOR
        19,  # NOT_ENOUGH_REPLICAS
        20,  # NOT_ENOUGH_REPLICAS_AFTER_APPEND
        41,  # NOT_CONTROLLER
        78,  # OFFSET_NOT_AVAILABLE: a leader change is in progress
    }
)

#: Failures of the connection rather than of the request: retry once metadata is fresh.
TRANSPORT_ERRORS: tuple[type[KafkaError], ...] = (
    KafkaConnectionError,
    NodeNotReadyError,
    RequestTimedOutError,
)


def is_retriable(exc: BaseException) -> bool:
    """Whether asking again (after a backoff) can succeed where ``exc`` failed."""
    # Imported here, not at module level: the pure membership machine and the assignors
    # import this module and must not pull in asyncio (tests/unit/membership/test_purity.py).
    import asyncio

    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, *TRANSPORT_ERRORS)):
        return True
    errno = getattr(exc, "errno", None)
    return errno in RETRIABLE_CODES or bool(getattr(exc, "retriable", False))
