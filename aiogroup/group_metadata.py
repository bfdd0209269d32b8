"""A consumer's group metadata: who it is in its group, for fenced transactional commits.

Why it exists: exactly-once consume-transform-produce commits the input offsets
inside the producer's transaction (TxnOffsetCommit).  Since KIP-447 that commit
carries the consumer's group identity - generation, member id, instance id - so the
group coordinator can refuse it from a member the group has already replaced (a
"zombie").  ``GroupConsumer.group_metadata()`` hands out that identity as a frozen
value, taken at one instant; ``aiogroup.transactions.send_offsets_to_transaction``
sends it.

Under the consumer group protocol (KIP-848) a member has no generation; its *member
epoch* stands in the generation's place, as in Java's ``ConsumerGroupMetadata``.

The decision "is there an identity to hand out?" is :func:`decide_group_metadata`,
pure over a :class:`MemberIdentity` snapshot the coordination shells produce.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiogroup.errors import NotGroupMemberError

__all__ = ["ConsumerGroupMetadata", "MemberIdentity", "decide_group_metadata"]


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """A consumer's identity in its group at one instant (Java's ``ConsumerGroupMetadata``).

    ``generation_id`` is the classic protocol's generation, or under the consumer
    protocol (KIP-848) the member epoch.  Frozen: a transaction must commit under the
    identity it was started with, not under whatever the consumer has become since;
    the broker decides whether that identity is still current.
    """

    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    """What a coordination shell knows of its membership now (input to the decision).

    ``in_group``: it holds a membership the coordinator gave it (classic: a generation
    and member id; consumer protocol: a positive epoch in a member state).
    ``stopped``: closed or failed for good.  ``state``: the member state's name, for
    error messages.
    """

    generation_id: int
    member_id: str
    in_group: bool
    stopped: bool
    state: str


def decide_group_metadata(
    group_id: str | None,
    group_instance_id: str | None,
    *,
    group_managed: bool,
    identity: MemberIdentity | None,
    assigned: bool,
) -> ConsumerGroupMetadata:
    """The metadata to hand out, or :class:`NotGroupMemberError` saying why there is none.

    ``group_managed``: partitions come from the group (``subscribe``), not ``assign``.
    ``assigned``: an assignment from the group has been installed at least once - a
    classic member knows its generation from the JoinGroup answer, before SyncGroup
    has told it what it owns; metadata from then would commit for partitions it has
    never been given.
    """
    if group_id is None:
        raise NotGroupMemberError("group_metadata() needs a consumer created with a group_id")
    if identity is None:
        raise NotGroupMemberError("group_metadata(): the consumer is not started")
    if not group_managed:
        raise NotGroupMemberError(
            "group_metadata() needs group-managed partitions (subscribe()); with assign() "
            "there is no membership for the coordinator to fence - commit with the "
            "group id alone"
        )
    if identity.stopped:
        raise NotGroupMemberError(
            f"group_metadata(): the consumer's membership ended for good (state {identity.state})"
        )
    if not identity.in_group:
        raise NotGroupMemberError(
            f"group_metadata(): not a member of group {group_id!r} now (state "
            f"{identity.state}): wait for an assignment, e.g. in on_partitions_assigned"
        )
    if not assigned:
        raise NotGroupMemberError(
            f"group_metadata(): no assignment from group {group_id!r} yet (state "
            f"{identity.state}): call it after the first assignment"
        )
    return ConsumerGroupMetadata(
        group_id=group_id,
        generation_id=identity.generation_id,
        member_id=identity.member_id,
        group_instance_id=group_instance_id,
    )
