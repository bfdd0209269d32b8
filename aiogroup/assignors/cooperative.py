"""Kafka's "cooperative-sticky" assignor (KIP-429 incremental rebalancing).

Under the cooperative protocol members keep their partitions while the group
rebalances, so a partition must never be handed to a new member in the same
generation its old owner still holds it.  The assignor therefore computes the same
balanced, sticky target as "sticky" and then holds back every partition that would
change hands: the old owner's assignment simply leaves it out (so it revokes it) and
nobody gets it yet.  Members that revoked something rejoin at once, and in that
follow-up rebalance the partition is unowned and goes to where balance wants it.
"""

from __future__ import annotations

from collections.abc import Mapping
from io import BytesIO

from aiokafka.protocol.types import Int32

from aiogroup._protocol.classic_embedded import ConsumerAssignment
from aiogroup.assignors.abc import (
    ClusterView,
    MemberSubscription,
    build_assignments,
    collector_paused,
)
from aiogroup.assignors.sticky import (
    NO_GENERATION,
    OwnershipClaim,
    StickyAssignor,
)
from aiogroup.structs import RebalanceProtocol, TopicPartition

__all__ = ["CooperativeStickyAssignor", "withhold_transfers"]


def withhold_transfers(
    target: Mapping[str, list[TopicPartition]], members: Mapping[str, MemberSubscription]
) -> dict[str, list[TopicPartition]]:
    """Drop from ``target`` every partition that would reach a member from another.

    A member keeps what it already claims; it is given anything else only if no other
    member claims it.  Every claim counts here, even a stale or losing one, because
    its holder may still be consuming until it sees this assignment and revokes.
    """
    claimants: dict[TopicPartition, set[str]] = {}
    for member_id, m in members.items():
        for tp in m.subscription.owned_partitions:
            claimants.setdefault(tp, set()).add(member_id)
    return {
        member_id: [tp for tp in partitions if member_id in claimants.get(tp, {member_id})]
        for member_id, partitions in target.items()
    }


def _generation_of(member: MemberSubscription) -> int:
    """Generation of a member's owned partitions.

    Subscription v2 carries it; older members put it in user_data as one int32 (the
    layout Kafka's CooperativeStickyAssignor uses for them).
    """
    sub = member.subscription
    if sub.version >= 2 or not sub.user_data:
        return sub.generation_id
    try:
        generation: int = Int32.decode(BytesIO(sub.user_data))
    except ValueError:
        return NO_GENERATION
    return generation


class CooperativeStickyAssignor(StickyAssignor):
    """Sticky balance with KIP-429's two-step hand-over; works under either protocol."""

    name = "cooperative-sticky"
    supported_protocols = (RebalanceProtocol.COOPERATIVE, RebalanceProtocol.EAGER)

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        # Only readers of subscription v0/v1 need this; v2+ carries generation_id itself.
        encoded: bytes = Int32.encode(self._generation_id)
        return encoded

    def claims(self, members: Mapping[str, MemberSubscription]) -> dict[str, OwnershipClaim]:
        """owned_partitions as sent; the generation from v2+, else from user_data."""
        return {
            member_id: OwnershipClaim(m.subscription.owned_partitions, _generation_of(m))
            for member_id, m in members.items()
        }

    def assign(
        self, cluster: ClusterView, members: Mapping[str, MemberSubscription]
    ) -> dict[str, ConsumerAssignment]:
        goal = self.target(cluster, members)
        with collector_paused():
            return build_assignments(members, withhold_transfers(goal, members))
