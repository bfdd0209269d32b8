"""Kafka protocol error codes, one enum for every group protocol's machine.

Why one: the classic and the consumer-protocol (KIP-848) machines answer the same
broker numbering; a code means one thing whichever API carried it.  What a code
*does* differs by API and protocol, so each machine keeps its reaction tables (data)
keyed by these members.  A share-group machine (KIP-932) adds its codes here.
"""

from __future__ import annotations

import enum

__all__ = ["ErrorCode", "code_name"]


class ErrorCode(enum.IntEnum):
    """The codes the group APIs (classic, consumer protocol, share groups, offsets) answer with."""

    NONE = 0
    UNKNOWN_TOPIC_OR_PARTITION = 3
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    OFFSET_METADATA_TOO_LARGE = 12
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    UNSTABLE_OFFSET_COMMIT = 88
    UNKNOWN_TOPIC_ID = 100
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    # Share groups (KIP-932): a record not in the state an acknowledgement needs
    # (its lock expired, it was already acknowledged), and share-session errors.
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    INVALID_REGULAR_EXPRESSION = 128
    SHARE_SESSION_LIMIT_REACHED = 133


def code_name(code: int) -> str:
    """The code's Kafka name, or "error code N" for one no group API documents."""
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"
