"""``group_metadata()``: the identity a fenced transactional commit carries (KIP-447).

The decision is pure (``decide_group_metadata``); the shells only report their
membership as a ``MemberIdentity``, checked here against each machine's own state.
"""

from __future__ import annotations

import dataclasses

import pytest

from aiogroup import GroupConsumer
from aiogroup.errors import IllegalStateError, NotGroupMemberError
from aiogroup.group_metadata import ConsumerGroupMetadata, MemberIdentity, decide_group_metadata

MEMBER = MemberIdentity(
    generation_id=7, member_id="m-1", in_group=True, stopped=False, state="STABLE"
)


def test_a_member_with_an_assignment_gets_its_identity() -> None:
    meta = decide_group_metadata("g", "i-1", group_managed=True, identity=MEMBER, assigned=True)
    assert meta == ConsumerGroupMetadata("g", 7, "m-1", "i-1")


def test_the_metadata_is_frozen() -> None:
    meta = decide_group_metadata("g", None, group_managed=True, identity=MEMBER, assigned=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta.generation_id = 8  # type: ignore[misc]


@pytest.mark.parametrize(
    ("group_id", "managed", "identity", "assigned", "fragment"),
    [
        (None, True, MEMBER, True, "needs a consumer created with a group_id"),
        ("g", False, MEMBER, True, "assign\\(\\)"),
        ("g", True, None, True, "not started"),
        ("g", True, dataclasses.replace(MEMBER, stopped=True, state="CLOSED"), True, "CLOSED"),
        (
            "g",
            True,
            dataclasses.replace(MEMBER, in_group=False, state="UNJOINED"),
            True,
            "not a member of group 'g' now \\(state UNJOINED\\)",
        ),
        ("g", True, MEMBER, False, "no assignment from group 'g' yet"),
    ],
)
def test_no_metadata_without_a_membership(
    group_id: str | None,
    managed: bool,
    identity: MemberIdentity | None,
    assigned: bool,
    fragment: str,
) -> None:
    with pytest.raises(NotGroupMemberError, match=fragment):
        decide_group_metadata(
            group_id, None, group_managed=managed, identity=identity, assigned=assigned
        )


def test_the_error_is_an_illegal_state_error() -> None:
    """aiokafka programs catching IllegalStateError for misuse of order keep working."""
    assert issubclass(NotGroupMemberError, IllegalStateError)


def test_before_start_the_consumer_says_so() -> None:
    consumer = GroupConsumer("t", group_id="g")
    with pytest.raises(NotGroupMemberError, match="not started"):
        consumer.group_metadata()


def test_without_a_group_id_the_consumer_says_so() -> None:
    consumer = GroupConsumer()
    with pytest.raises(NotGroupMemberError, match="group_id"):
        consumer.group_metadata()
