"""The benchmark's broker view: where a group's records live, and what the samples say."""

from __future__ import annotations

import struct

from benchmarks.broker_view import (
    GroupWatch,
    Sample,
    decode_group_metadata,
    java_string_hash,
    offsets_partition,
)


def test_group_partition_follows_javas_string_hash() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    # The one string whose hash is Integer.MIN_VALUE: Kafka's Utils.abs maps it to 0.
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert offsets_partition("polygenelubricants", 50) == 0
    assert offsets_partition("hello", 50) == 99162322 % 50
    negative = "bench-rb-0000zzzz"
    if java_string_hash(negative) < 0:
        assert offsets_partition(negative, 50) == -java_string_hash(negative) % 50


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def test_group_metadata_records_give_group_and_generation() -> None:
    key = struct.pack(">h", 2) + _string("g1")
    value = struct.pack(">h", 3) + _string("consumer") + struct.pack(">i", 7) + b"rest"
    assert decode_group_metadata(key, value) == ("g1", 7)
    assert decode_group_metadata(key, None) is None  # tombstone: the group was deleted
    offset_key = struct.pack(">h", 1) + _string("g1") + _string("t") + struct.pack(">i", 0)
    assert decode_group_metadata(offset_key, value) is None


def _watch(samples: list[Sample]) -> GroupWatch:
    watch = GroupWatch("unused:9092", "g")
    watch.samples = samples
    return watch


def test_settled_needs_every_member_with_its_share_in_a_stable_group() -> None:
    even = {"A": frozenset({0, 1}), "B": frozenset({2, 3})}
    watch = _watch(
        [
            Sample(0.0, 0.01, "Stable", {"A": frozenset({0, 1, 2, 3})}),
            Sample(1.0, 1.01, "PreparingRebalance", {"A": frozenset(), "B": frozenset()}),
            # a cooperative first round: complete but uneven - not settled yet
            Sample(2.0, 2.01, "Stable", {"A": frozenset({0, 1}), "B": frozenset()}),
            Sample(3.0, 3.01, "Stable", even),
        ]
    )
    assert watch.reports_assignments()
    assert watch.settled_at(0.5, {"A", "B"}, 4) == 3.01
    assert watch.rounds_seen(0.5, 4.0) == 1  # the uneven Stable came after no new round


def test_without_broker_assignments_the_members_reports_decide_the_share() -> None:
    empty = {"A": frozenset(), "B": frozenset()}
    watch = _watch(
        [
            Sample(1.0, 1.01, "Unknown", empty),
            Sample(2.0, 2.01, "Stable", empty),
            Sample(3.0, 3.01, "Unknown", empty),
            Sample(4.0, 4.01, "Stable", empty),
        ]
    )
    assert not watch.reports_assignments()
    assert watch.settled_at(0.5, {"A", "B"}, 4, members_even=3.5) == 4.01
    assert watch.settled_at(0.5, {"A", "B"}, 4, members_even=None) is None
    assert watch.rounds_seen(0.5, 5.0) == 2


def test_consumer_protocol_rebalances_are_group_epoch_steps() -> None:
    one = {"A": frozenset({0})}
    watch = _watch(
        [
            Sample(0.0, 0.01, "Stable", one, epoch=1),
            Sample(1.0, 1.01, "Reconciling", one, epoch=2),
            Sample(2.0, 2.01, "Stable", one, epoch=2),
        ]
    )
    assert watch.epoch_before(0.5) == 1
    assert watch.epoch_last() == 2
