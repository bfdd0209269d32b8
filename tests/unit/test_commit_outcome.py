"""The commit / offset-fetch outcome function: an answer -> done, retry, or a named failure."""

from __future__ import annotations

from dataclasses import dataclass

from aiogroup._coordination.commit_outcome import (
    CommitRules,
    Next,
    commit_verdict,
    fetch_verdict,
    positions_to_commit,
)
from aiogroup._membership.codes import ErrorCode
from aiogroup._membership.commit_outcomes import CommitKind, CommitProtocol
from aiogroup._protocol.results import OffsetCommitResult, OffsetFetchResult
from aiogroup.errors import CommitFailedError, KafkaError
from aiogroup.structs import OffsetAndMetadata, TopicPartition

C = ErrorCode
CLASSIC = CommitRules(CommitProtocol.CLASSIC, "moved on: {tp} {code}")


def consumer_rules(in_group: bool, kind: CommitKind = CommitKind.AUTO) -> CommitRules:
    return CommitRules(CommitProtocol.CONSUMER, "stale: {tp} {code}", kind, lambda: in_group)


def test_all_ok_is_done() -> None:
    v = commit_verdict(OffsetCommitResult({("t", 0): 0, ("t", 1): 0}), CLASSIC)
    assert v.next is Next.DONE and v.error is None and not v.coordinator_moved


def test_rebalance_is_commit_failed_naming_the_partition() -> None:
    v = commit_verdict(OffsetCommitResult({("t", 1): C.REBALANCE_IN_PROGRESS}), CLASSIC)
    assert v.next is Next.FAIL and isinstance(v.error, CommitFailedError)
    assert "REBALANCE_IN_PROGRESS" in str(v.error) and "t" in str(v.error)


def test_not_coordinator_retries_and_says_the_coordinator_moved() -> None:
    v = commit_verdict(OffsetCommitResult({("t", 0): C.NOT_COORDINATOR}), CLASSIC)
    assert v.next is Next.RETRY and v.coordinator_moved


def test_load_in_progress_retries_without_moving() -> None:
    v = commit_verdict(OffsetCommitResult({("t", 0): C.COORDINATOR_LOAD_IN_PROGRESS}), CLASSIC)
    assert v.next is Next.RETRY and not v.coordinator_moved


def test_fatal_code_raises_its_error_even_after_a_retriable_one() -> None:
    v = commit_verdict(
        OffsetCommitResult({("a", 0): C.NOT_COORDINATOR, ("b", 0): C.OFFSET_METADATA_TOO_LARGE}),
        CLASSIC,
    )
    assert v.next is Next.FAIL and isinstance(v.error, KafkaError)
    assert not isinstance(v.error, CommitFailedError)
    assert v.coordinator_moved  # the partition before the failure still moved it


def test_stale_epoch_waits_for_the_next_heartbeat_in_the_group() -> None:
    code = ErrorCode.STALE_MEMBER_EPOCH
    user = commit_verdict(
        OffsetCommitResult({("t", 0): code}), consumer_rules(True, CommitKind.USER)
    )
    assert user.next is Next.FAIL and isinstance(user.error, CommitFailedError)
    v = commit_verdict(OffsetCommitResult({("t", 0): code}), consumer_rules(True))
    assert v.next is Next.RETRY_WITH_LATEST_EPOCH
    out = commit_verdict(OffsetCommitResult({("t", 0): code}), consumer_rules(False))
    assert out.next is Next.FAIL and isinstance(out.error, CommitFailedError)


def test_fetch_done_maps_missing_and_negative_to_none() -> None:
    a, b, c = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
    result = OffsetFetchResult(0, {("t", 0): (5, -1, "m", 0), ("t", 1): (-1, -1, None, 0)})
    v = fetch_verdict(result, [a, b, c], "g", CLASSIC)
    assert v.next is Next.DONE
    assert v.offsets == {a: OffsetAndMetadata(5, "m"), b: None, c: None}


def test_fetch_unknown_topic_is_no_offset() -> None:
    tp = TopicPartition("t", 0)
    result = OffsetFetchResult(0, {("t", 0): (-1, -1, None, C.UNKNOWN_TOPIC_OR_PARTITION)})
    assert fetch_verdict(result, [tp], "g", CLASSIC).offsets == {tp: None}


def test_fetch_group_level_error_wins() -> None:
    v = fetch_verdict(OffsetFetchResult(C.GROUP_AUTHORIZATION_FAILED), [], "g", CLASSIC)
    assert v.next is Next.FAIL and "group g" in str(v.error)


def test_fetch_retries_when_the_coordinator_moved_or_offsets_are_unstable() -> None:
    moved = fetch_verdict(OffsetFetchResult(C.NOT_COORDINATOR), [], "g", CLASSIC)
    assert moved.next is Next.RETRY and moved.coordinator_moved
    unstable = OffsetFetchResult(0, {("t", 0): (-1, -1, None, C.UNSTABLE_OFFSET_COMMIT)})
    v = fetch_verdict(unstable, [TopicPartition("t", 0)], "g", CLASSIC)
    assert v.next is Next.RETRY and not v.coordinator_moved


@dataclass
class Pos:
    tp: TopicPartition
    revoking: bool = False
    has_valid_position: bool = True
    position: int | None = 7


def test_positions_to_commit() -> None:
    a, b, c = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
    states = [Pos(a), Pos(b, revoking=True), Pos(c, has_valid_position=False)]
    # The interval auto-commit leaves what is being revoked to the commit before it.
    assert positions_to_commit(states, None, revoking=False) == {a: OffsetAndMetadata(7, "")}
    # The application's commit() (Java's commitSync()) commits every consumed position.
    assert positions_to_commit(states, None, revoking=True) == {
        a: OffsetAndMetadata(7, ""),
        b: OffsetAndMetadata(7, ""),
    }
    assert positions_to_commit(states, [b], revoking=False) == {b: OffsetAndMetadata(7, "")}
    assert positions_to_commit(states, [c], revoking=True) == {}
