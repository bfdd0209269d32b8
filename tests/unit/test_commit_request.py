"""commit_request: the application's commit offsets, normalized or refused by name."""

from __future__ import annotations

from typing import Any

import pytest

from aiogroup._coordination.commit_request import check_owned, normalize_offsets
from aiogroup.errors import CommitFailedError
from aiogroup.structs import OffsetAndMetadata, TopicPartition

A, B, C = (TopicPartition("t", p) for p in range(3))


def test_ints_become_offset_and_metadata_and_those_pass_as_they_are() -> None:
    kept = OffsetAndMetadata(9, "why")
    assert normalize_offsets({A: 0, B: kept}) == {A: OffsetAndMetadata(0, ""), B: kept}
    assert normalize_offsets({}) == {}


@pytest.mark.parametrize(
    ("offsets", "error", "message"),
    [
        ({("t", 0): 1}, TypeError, "commit() keys must be TopicPartition, got ('t', 0)"),
        ({A: "5"}, TypeError, f"commit() offset for {A} must be int or OffsetAndMetadata"),
        ({A: 5.0}, TypeError, f"commit() offset for {A} must be int or OffsetAndMetadata"),
        ({A: None}, TypeError, f"commit() offset for {A} must be int or OffsetAndMetadata"),
        ({A: True}, TypeError, f"commit() offset for {A} must be int or OffsetAndMetadata"),
        ({A: -1}, ValueError, f"commit() offset for {A} must be >= 0, got -1"),
        (
            {A: OffsetAndMetadata(-2, "")},
            ValueError,
            f"commit() offset for {A} must be >= 0, got -2",
        ),
    ],
)
def test_bad_keys_and_values_are_refused_naming_them(
    offsets: dict[Any, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as info:
        normalize_offsets(offsets)
    assert str(info.value) == message


def test_the_first_bad_entry_is_named_even_after_good_ones() -> None:
    with pytest.raises(ValueError, match="partition=1"):
        normalize_offsets({A: 1, B: -1})


#: (group_managed, user_assigned) of each kind of subscription.
SUBSCRIBED, ASSIGNED, NEITHER = (True, False), (False, True), (False, False)


@pytest.mark.parametrize("kind", [SUBSCRIBED, ASSIGNED, NEITHER])
def test_owned_partitions_pass_under_every_subscription(kind: tuple[bool, bool]) -> None:
    group_managed, user_assigned = kind
    check_owned([A, B], {A, B, C}, group_managed=group_managed, user_assigned=user_assigned)
    check_owned([], set(), group_managed=group_managed, user_assigned=user_assigned)


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (SUBSCRIBED, "not assigned to this member: "),
        (ASSIGNED, "not in this consumer's assign(): "),
    ],
)
def test_partitions_not_owned_are_refused_sorted_by_name(
    kind: tuple[bool, bool], message: str
) -> None:
    group_managed, user_assigned = kind
    with pytest.raises(CommitFailedError) as info:
        check_owned([C, A, B], {B}, group_managed=group_managed, user_assigned=user_assigned)
    assert message + str([A, C]) in str(info.value)
    assert str(info.value).endswith("assign() them first") == (kind == ASSIGNED)


def test_with_no_subscription_nothing_is_owned_and_nothing_checked() -> None:
    """A group-less tool may commit for a group it is not part of."""
    check_owned([A, B, C], set(), group_managed=False, user_assigned=False)
