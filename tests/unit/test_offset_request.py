"""The tries of one OffsetCommit / OffsetFetch: each step decided from the verdicts alone.

The client that performs these steps sends, waits and raises; every choice it
makes - how long to wait, when the epoch is awaited, what the caller's exception
says - is fed here as data, on no clock.
"""

from __future__ import annotations

import pytest
from aiokafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
from hypothesis import given
from hypothesis import strategies as st

from aiogroup._coordination.commit_outcome import (
    CommitRules,
    Next,
    Verdict,
    commit_verdict,
    fetch_verdict,
)
from aiogroup._coordination.offset_request import (
    AwaitEpoch,
    Backoff,
    Done,
    Fail,
    OffsetRequest,
)
from aiogroup._membership.backoff import DEFAULT_BACKOFF_MAX, RetryPolicy
from aiogroup._membership.codes import ErrorCode
from aiogroup._membership.commit_outcomes import CommitKind, CommitProtocol
from aiogroup._protocol.results import OffsetCommitResult, OffsetFetchResult
from aiogroup.errors import CommitFailedError
from aiogroup.structs import OffsetAndMetadata, TopicPartition

C = ErrorCode
CLASSIC = CommitRules(CommitProtocol.CLASSIC, "moved on: {tp} {code}")
POLICY = RetryPolicy.from_backoff(0.1)


def commit_op() -> OffsetRequest:
    return OffsetRequest("OffsetCommit", "g", ["orders", "audit"], POLICY)


def retry() -> Verdict:
    return commit_verdict(
        OffsetCommitResult({("orders", 0): C.COORDINATOR_LOAD_IN_PROGRESS}), CLASSIC
    )


def test_a_clean_answer_is_done_at_once() -> None:
    op = commit_op()
    assert op.answered(commit_verdict(OffsetCommitResult({("orders", 0): 0}), CLASSIC)) == Done()
    assert op.failures == 0


def test_retries_back_off_doubling_up_to_the_maximum() -> None:
    op = commit_op()
    steps = [op.answered(retry()) for _ in range(3)] + [op.unanswered() for _ in range(3)]
    assert steps == [Backoff(d) for d in (0.1, 0.2, 0.4, 0.8, DEFAULT_BACKOFF_MAX, 1.0)]
    assert op.failures == 6


def test_a_backoff_longer_than_the_maximum_is_kept_as_it_is() -> None:
    op = OffsetRequest("OffsetCommit", "g", [], RetryPolicy.from_backoff(2.5))
    assert [op.unanswered(), op.unanswered()] == [Backoff(2.5), Backoff(2.5)]


def test_a_stale_member_epoch_awaits_the_next_epoch_without_growing_the_backoff() -> None:
    rules = CommitRules(CommitProtocol.CONSUMER, "stale {tp} {code}", CommitKind.AUTO)
    stale = commit_verdict(OffsetCommitResult({("orders", 0): C.STALE_MEMBER_EPOCH}), rules)
    assert stale.next is Next.RETRY_WITH_LATEST_EPOCH  # the premise
    op = commit_op()
    assert op.answered(stale) == AwaitEpoch() and op.failures == 0
    assert op.answered(retry()) == Backoff(0.1)  # the first failure of the coordinator


def test_a_refusal_is_raised_as_the_verdict_says() -> None:
    refused = commit_verdict(OffsetCommitResult({("orders", 3): C.ILLEGAL_GENERATION}), CLASSIC)
    step = commit_op().answered(refused)
    assert isinstance(step, Fail) and step.error is refused.error
    assert isinstance(step.error, CommitFailedError)
    assert "ILLEGAL_GENERATION" in str(step.error)


@pytest.mark.parametrize(
    ("code", "cls", "acl"),
    [
        (C.GROUP_AUTHORIZATION_FAILED, GroupAuthorizationFailedError, "READ on group 'g'"),
        (C.TOPIC_AUTHORIZATION_FAILED, TopicAuthorizationFailedError, "orders"),
    ],
)
def test_an_authorization_refusal_names_the_group_the_topics_and_the_request(
    code: int, cls: type[Exception], acl: str
) -> None:
    answer = commit_verdict(OffsetCommitResult({("orders", 0): code}), CLASSIC)
    step = commit_op().answered(answer)
    assert isinstance(step, Fail) and isinstance(step.error, cls)
    text = str(step.error)
    assert acl in text and "OffsetCommit" in text
    assert step.error.__cause__ is answer.error  # the broker's own error is kept


def test_an_offset_fetch_hands_back_the_offsets_and_names_its_request() -> None:
    tp = TopicPartition("orders", 0)
    op = OffsetRequest("OffsetFetch", "g", ["orders"], POLICY)
    found = fetch_verdict(
        OffsetFetchResult(0, {("orders", 0): (42, -1, "m", 0)}), [tp], "g", CLASSIC
    )
    assert op.answered(found) == Done({tp: OffsetAndMetadata(42, "m")})
    denied = fetch_verdict(OffsetFetchResult(C.GROUP_AUTHORIZATION_FAILED, {}), [tp], "g", CLASSIC)
    step = op.answered(denied)
    assert isinstance(step, Fail) and "OffsetFetch" in str(step.error) and "'g'" in str(step.error)


@given(st.lists(st.booleans(), min_size=1, max_size=40))
def test_every_wait_is_within_the_policy_and_never_shrinks_while_failing(
    answered: list[bool],
) -> None:
    op = commit_op()
    delays = []
    for was_answered in answered:
        step = op.answered(retry()) if was_answered else op.unanswered()
        assert isinstance(step, Backoff)
        delays.append(step.delay)
    assert all(POLICY.initial <= d <= POLICY.maximum for d in delays)
    assert delays == sorted(delays) and op.failures == len(answered)
