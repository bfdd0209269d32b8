"""Kafka's "sticky" assignor (eager), and the balancing core cooperative-sticky reuses.

Two goals, in this order: the assignment is balanced, and as few partitions as
possible move.  Balanced means no member could take a partition from a member that
holds two or more more than it (with equal subscriptions: counts differ by at most
one).  Sticky means every partition a member validly owned stays with it unless that
member is above its fair share.

Prior ownership comes from each member's subscription.  Under the eager protocol a
member has revoked everything before it joins, so Kafka's StickyAssignor carries the
previous assignment and its generation in user_data instead; we read and write that
same layout so a Java leader and an aiogroup leader understand each other.  When two
members claim the same partition (one of them missed a rebalance), the claim from the
higher generation wins; equal generations cancel out and nobody keeps it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka.protocol.struct import Struct
from aiokafka.protocol.types import Array, Int32, Schema, String

from aiogroup.assignors.abc import (
    ClusterView,
    ConsumerPartitionAssignor,
    MemberSubscription,
    build_assignments,
    member_sort_key,
    partitions_by_topic,
)
from aiogroup.consumer_protocol import ConsumerAssignment
from aiogroup.structs import TopicPartition

__all__ = [
    "OwnershipClaim",
    "StickyAssignor",
    "claims_from_subscriptions",
    "decode_sticky_user_data",
    "encode_sticky_user_data",
    "resolve_owners",
    "sticky_assignment",
]

NO_GENERATION = -1


class _StickyUserDataV1(Struct):  # type: ignore[misc]  # aiokafka is untyped
    """Kafka's StickyAssignor user data: the previous assignment and its generation."""

    SCHEMA = Schema(
        ("previous_assignment", Array(("topic", String("utf-8")), ("partitions", Array(Int32)))),
        ("generation", Int32),
    )


class _StickyUserDataV0(Struct):  # type: ignore[misc]
    """The first layout, written before generations were added."""

    SCHEMA = Schema(
        ("previous_assignment", Array(("topic", String("utf-8")), ("partitions", Array(Int32)))),
    )


@dataclass(frozen=True, slots=True)
class OwnershipClaim:
    """Partitions a member says it owned, and in which generation."""

    partitions: tuple[TopicPartition, ...]
    generation_id: int = NO_GENERATION


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation_id: int) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    encoded: bytes = _StickyUserDataV1(list(by_topic.items()), generation_id).encode()
    return encoded


def decode_sticky_user_data(data: bytes | None) -> OwnershipClaim | None:
    """Read a peer's StickyAssignor user data; None when absent or unreadable.

    A peer's unreadable user data must not stop the leader from assigning: the worst
    outcome of ignoring it is that the peer's partitions may move.
    """
    if not data:
        return None
    for layout in (_StickyUserDataV1, _StickyUserDataV0):
        try:
            decoded: Any = layout.decode(data)
            entries = decoded.previous_assignment
            generation = getattr(decoded, "generation", NO_GENERATION)
            if entries is None or not isinstance(generation, int):
                continue
            partitions = tuple(
                TopicPartition(topic, p) for topic, parts in entries for p in (parts or ())
            )
        except (ValueError, struct.error, UnicodeDecodeError, TypeError):
            continue
        if any(tp.topic is None for tp in partitions):
            continue
        return OwnershipClaim(partitions, generation)
    return None


def resolve_owners(
    claims: Mapping[str, OwnershipClaim], eligible: Mapping[TopicPartition, object]
) -> dict[TopicPartition, str]:
    """Who validly owns each partition: the unique highest-generation claimant.

    Claims on partitions not in ``eligible`` (topic gone, partition gone, or no longer
    subscribed; the caller filters per member) are dropped.
    """
    best: dict[TopicPartition, tuple[int, list[str]]] = {}
    for member_id, claim in claims.items():
        for tp in set(claim.partitions):
            if tp not in eligible:
                continue
            current = best.get(tp)
            if current is None or claim.generation_id > current[0]:
                best[tp] = (claim.generation_id, [member_id])
            elif claim.generation_id == current[0]:
                current[1].append(member_id)
    return {tp: owners[0] for tp, (_, owners) in best.items() if len(owners) == 1}


def sticky_assignment(
    cluster: ClusterView,
    members: Mapping[str, MemberSubscription],
    claims: Mapping[str, OwnershipClaim],
) -> dict[str, list[TopicPartition]]:
    """A balanced assignment that keeps as many validly owned partitions as it can."""
    order = sorted(members.values(), key=member_sort_key)
    rank = {m.member_id: i for i, m in enumerate(order)}
    subscribed = {m.member_id: frozenset(m.subscription.topics) for m in order}
    topics = partitions_by_topic(cluster, (t for m in order for t in m.subscription.topics))

    eligible: dict[TopicPartition, list[str]] = {}
    for topic, partitions in topics.items():
        takers = [m.member_id for m in order if topic in subscribed[m.member_id]]
        for p in partitions:
            eligible[TopicPartition(topic, p)] = takers

    valid_claims = {
        member_id: OwnershipClaim(
            tuple(tp for tp in claim.partitions if tp.topic in subscribed[member_id]),
            claim.generation_id,
        )
        for member_id, claim in claims.items()
        if member_id in members
    }
    owner = resolve_owners(valid_claims, eligible)

    held: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for tp, member_id in owner.items():
        held[member_id].add(tp)

    def load(member_id: str) -> tuple[int, int]:
        return (len(held[member_id]), rank[member_id])

    # Partitions with the fewest possible takers go first, while those takers still
    # have room; otherwise a freely placeable partition could crowd them out.
    unowned = sorted(
        (tp for tp in eligible if tp not in owner),
        key=lambda tp: (len(eligible[tp]), tp.topic, tp.partition),
    )
    for tp in unowned:
        held[min(eligible[tp], key=load)].add(tp)

    _rebalance(held, subscribed, owner, load)
    return {member_id: sorted(partitions) for member_id, partitions in held.items()}


def _rebalance(
    held: dict[str, set[TopicPartition]],
    subscribed: Mapping[str, frozenset[str]],
    owner: Mapping[TopicPartition, str],
    load: Callable[[str], tuple[int, int]],
) -> None:
    """Move partitions one at a time from heavy to light members until no move helps.

    Each move lowers the sum of squared counts, so the loop ends.  One partition per
    move, re-ranking in between: draining a donor down to the receiver's level in
    one go would overshoot (4/4/4/0 would give 2/4/4/2 and then take one back from a
    member that never needed to change) and move partitions between members that
    both stay.  The heaviest member gives first and gives away what it did not own
    before, which is what keeps owned partitions in place whenever balance allows.
    """
    while True:
        move: tuple[str, str, TopicPartition] | None = None
        for receiver in sorted(held, key=load):
            for donor in sorted(held, key=lambda m: (-len(held[m]), load(m)[1])):
                if len(held[donor]) < len(held[receiver]) + 2:
                    break
                tp = min(
                    (tp for tp in held[donor] if tp.topic in subscribed[receiver]),
                    key=lambda tp: (owner.get(tp) == donor, tp.topic, tp.partition),
                    default=None,
                )
                if tp is not None:
                    move = (donor, receiver, tp)
                    break
            if move is not None:
                break
        if move is None:
            return
        donor, receiver, tp = move
        held[donor].remove(tp)
        held[receiver].add(tp)


def claims_from_subscriptions(
    members: Mapping[str, MemberSubscription],
) -> dict[str, OwnershipClaim]:
    """Ownership as the subscriptions state it (owned_partitions and generation_id)."""
    return {
        member_id: OwnershipClaim(m.subscription.owned_partitions, m.subscription.generation_id)
        for member_id, m in members.items()
    }


class StickyAssignor(ConsumerPartitionAssignor):
    """Kafka's eager "sticky" assignor."""

    name = "sticky"

    def __init__(self) -> None:
        self._last: tuple[TopicPartition, ...] | None = None
        self._generation_id = NO_GENERATION

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        if self._last is None:
            return None
        return encode_sticky_user_data(self._last, self._generation_id)

    def on_assignment(self, assignment: ConsumerAssignment, generation_id: int) -> None:
        self._last = assignment.partitions
        self._generation_id = generation_id

    def assign(
        self, cluster: ClusterView, members: Mapping[str, MemberSubscription]
    ) -> dict[str, ConsumerAssignment]:
        claims = claims_from_subscriptions(members)
        for member_id, m in members.items():
            # Eager members arrive with nothing owned; user_data remembers for them.
            from_user_data = decode_sticky_user_data(m.subscription.user_data)
            if from_user_data is not None:
                claims[member_id] = from_user_data
        return build_assignments(members, sticky_assignment(cluster, members, claims))
