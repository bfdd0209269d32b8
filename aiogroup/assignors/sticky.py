"""Kafka's "sticky" assignor (eager), and the balancing core cooperative-sticky reuses.

Two goals, in this order: the assignment is balanced, and as few partitions as
possible move.  Balanced means no member could take a partition from a member that
holds two or more more than it, directly or through a chain of members that could
each pass one on (with equal subscriptions: counts differ by at most one).  Sticky
means every partition a member validly owned stays with it unless that member is
above its fair share.

Like Kafka's AbstractStickyAssignor there are two builders: equal subscriptions take
the closed-form one in :mod:`aiogroup.assignors.uniform` (Kafka's "constrained"
builder, whose answers it reproduces exactly, racks included); unequal ones take the
general builder here, which keeps owned partitions, places the rest on the least
loaded eligible member and then balances along chains, preferring rack-local members
and partitions at each step when racks are known (KIP-881).  Both are checked against
Apache Kafka's own test suites in tests/unit/assignors/.

Prior ownership comes from each member's subscription.  Under the eager protocol a
member has revoked everything before it joins, so Kafka's StickyAssignor carries the
previous assignment and its generation in user_data instead; we read and write that
same layout so a Java leader and an aiogroup leader understand each other.  When two
members claim the same partition (one of them missed a rebalance), the claim from the
higher generation wins; equal generations cancel out and nobody keeps it.
"""

from __future__ import annotations

import bisect
import heapq
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise

from aiokafka.protocol.struct import Struct
from aiokafka.protocol.types import Array, Int32, Schema, String

from aiogroup._protocol.classic_embedded import ConsumerAssignment
from aiogroup.assignors.abc import (
    ClusterView,
    ConsumerPartitionAssignor,
    MemberSubscription,
    build_assignments,
    collector_paused,
    member_rack,
    member_sort_key,
    partition_racks,
    partitions_by_topic,
    use_rack_aware,
)
from aiogroup.assignors.uniform import RackInfo, uniform_assignment
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
_NO_RACKS: frozenset[str] = frozenset()


class _StickyUserDataV1(Struct):  # type: ignore[misc]  # aiokafka is untyped
    """Kafka's StickyAssignor user data: the previous assignment and its generation."""

    SCHEMA = Schema(
        ("previous_assignment", Array(("topic", String("utf-8")), ("partitions", Array(Int32)))),
        ("generation", Int32),
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
    outcome of ignoring it is that the peer's partitions may move.  The layout is
    read with ``struct`` directly rather than through aiokafka's generic decoder: a
    leader of 2,000 members owning a million partitions reads them all on every
    rebalance, and the generic path spent over five seconds on it.  Version 1 ends
    with the generation; version 0 stops after the partitions (no generation).
    """
    if not data:
        return None
    try:
        return _read_sticky_user_data(bytes(data))
    except (ValueError, struct.error, UnicodeDecodeError):
        return None


_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")


def _read_sticky_user_data(data: bytes) -> OwnershipClaim:
    (topic_count,) = _INT32.unpack_from(data, 0)
    if topic_count < 0:
        raise ValueError("negative topic count")
    offset = 4
    partitions: list[TopicPartition] = []
    for _ in range(topic_count):
        (length,) = _INT16.unpack_from(data, offset)
        offset += 2
        if length < 0 or offset + length > len(data):
            raise ValueError("bad topic name length")
        topic = data[offset : offset + length].decode("utf-8")
        offset += length
        (count,) = _INT32.unpack_from(data, offset)
        offset += 4
        if count == -1:  # a null partition array: nothing owned of this topic
            continue
        if count < 0 or offset + 4 * count > len(data):
            raise ValueError("bad partition count")
        numbers = struct.unpack_from(f">{count}i", data, offset)
        offset += 4 * count
        partitions.extend(TopicPartition(topic, p) for p in numbers)
    generation = NO_GENERATION
    if len(data) - offset >= 4:
        (generation,) = _INT32.unpack_from(data, offset)
    return OwnershipClaim(tuple(partitions), generation)


def resolve_owners(
    claims: Mapping[str, OwnershipClaim], eligible: Mapping[TopicPartition, object]
) -> dict[TopicPartition, str]:
    """Who validly owns each partition: the unique highest-generation claimant.

    Claims on partitions not in ``eligible`` (topic gone, partition gone, or no longer
    subscribed; the caller filters per member) are dropped.  Equal generations cancel
    out: the partition then has no valid owner, as in Kafka, since either claimant
    may still be consuming it.
    """
    owner: dict[TopicPartition, str | None] = {}
    generation_of: dict[TopicPartition, int] = {}
    for member_id, claim in claims.items():
        generation = claim.generation_id
        for tp in claim.partitions:
            if tp not in eligible:
                continue
            current = generation_of.get(tp)
            if current is None or generation > current:
                generation_of[tp] = generation
                owner[tp] = member_id
            elif generation == current and owner[tp] != member_id:
                owner[tp] = None
    return {tp: member_id for tp, member_id in owner.items() if member_id is not None}


def sticky_assignment(
    cluster: ClusterView,
    members: Mapping[str, MemberSubscription],
    claims: Mapping[str, OwnershipClaim],
    prefer_rack_aware: bool = False,
) -> dict[str, list[TopicPartition]]:
    """A balanced assignment that keeps as many validly owned partitions as it can.

    Equal subscriptions take the closed-form path of :mod:`aiogroup.assignors.uniform`
    (Kafka's "constrained" builder); anything else the general one below.
    """
    order = sorted(members.values(), key=member_sort_key)
    subscribed = {m.member_id: frozenset(m.subscription.topics) for m in order}
    topics = partitions_by_topic(cluster, (t for m in order for t in m.subscription.topics))

    valid_claims = {
        member_id: OwnershipClaim(
            tuple(tp for tp in claim.partitions if tp.topic in subscribed[member_id]),
            claim.generation_id,
        )
        for member_id, claim in claims.items()
        if member_id in members
    }
    if len(set(subscribed.values())) <= 1:
        all_partitions = [TopicPartition(t, p) for t, parts in topics.items() for p in parts]
        exists = dict.fromkeys(all_partitions)
        owned: dict[str, list[TopicPartition]] = {m: [] for m in subscribed}
        for tp, member_id in resolve_owners(valid_claims, exists).items():
            owned[member_id].append(tp)
        racks = _rack_info(cluster, order, all_partitions, prefer_rack_aware)
        assignment = uniform_assignment(all_partitions, owned, racks)
        return {m: sorted(ps) for m, ps in assignment.items()}
    every = (TopicPartition(t, p) for t, parts in topics.items() for p in parts)
    racks = _rack_info(cluster, order, every, prefer_rack_aware)
    return _general_assignment(order, subscribed, topics, valid_claims, racks)


def _rack_info(
    cluster: ClusterView,
    order: list[MemberSubscription],
    partitions: Iterable[TopicPartition],
    prefer: bool,
) -> RackInfo | None:
    """Racks for KIP-881 matching, or None when matching would not apply (no member
    rack, no overlap with replica racks, or every partition on every rack)."""
    member_racks = {m.member_id: r for m in order if (r := member_rack(m)) is not None}
    if not member_racks:
        return None
    replica_racks = {tp: partition_racks(cluster, tp) or frozenset() for tp in partitions}
    if not use_rack_aware(set(member_racks.values()), replica_racks, prefer):
        return None
    return RackInfo(member_racks, replica_racks)


def _general_assignment(
    order: list[MemberSubscription],
    subscribed: Mapping[str, frozenset[str]],
    topics: Mapping[str, list[int]],
    valid_claims: Mapping[str, OwnershipClaim],
    racks: RackInfo | None = None,
) -> dict[str, list[TopicPartition]]:
    """Unequal subscriptions: keep owned partitions, place the rest, then rebalance.

    Kafka's GeneralAssignmentBuilder does the same three things: it keeps every valid
    claim, gives each unassigned partition to the least loaded member that may take
    it (partitions with the fewest possible takers first), and then keeps moving
    partitions while a move makes the assignment more balanced.

    With ``racks`` (KIP-881; None when matching would change nothing, see
    ``_rack_info``) each of the three steps prefers locality, and none of them gives
    up balance for it, as in Kafka's builder:

    * a member keeps only the owned partitions with a replica on its rack; the
      others are freed like partitions nobody owned, so they may go to a local member
      (stickiness yields to locality for these, as in the equal-subscription path);
    * placement runs twice over the same ordering: first each partition goes to the
      least loaded of its takers that is local to it (a member that states no rack
      counts as local to everything: it has no rack to miss), with no quota; then
      whatever had no local taker goes to the least loaded taker of all;
    * the first pass can leave a member that is local to little with little, so the
      rebalancing below restores balance exactly as without racks; racks only decide
      which partition each link of a chain hands over (see ``_rebalance``).
    """
    rank = {m.member_id: i for i, m in enumerate(order)}
    eligible: dict[TopicPartition, list[str]] = {}
    same_takers: dict[tuple[str, ...], list[str]] = {}
    for topic, partitions in topics.items():
        found = [m.member_id for m in order if topic in subscribed[m.member_id]]
        takers = same_takers.setdefault(tuple(found), found)
        for p in partitions:
            eligible[TopicPartition(topic, p)] = takers
    owner = resolve_owners(valid_claims, eligible)
    if racks is not None:
        owner = {tp: m for tp, m in owner.items() if not racks.mismatch(m, tp)}

    held: dict[str, set[TopicPartition]] = {m.member_id: set() for m in order}
    for tp, member_id in owner.items():
        held[member_id].add(tp)

    # Partitions with the fewest possible takers go first, while those takers still
    # have room; otherwise a freely placeable partition could crowd them out.  Each
    # goes to its least loaded taker (ties to the first in member order).
    unowned = sorted(
        (tp for tp in eligible if tp not in owner),
        key=lambda tp: (len(eligible[tp]), tp.topic, tp.partition),
    )
    least_loaded = _LeastLoaded(held, rank)
    if racks is not None:
        unowned = _place_locally(unowned, eligible, racks, held, least_loaded)
    for tp in unowned:
        held[least_loaded.pop(eligible[tp])].add(tp)

    _rebalance(held, subscribed, owner, rank, racks, eligible)
    return {member_id: sorted(partitions) for member_id, partitions in held.items()}


def _place_locally(
    unowned: list[TopicPartition],
    eligible: Mapping[TopicPartition, list[str]],
    racks: RackInfo,
    held: dict[str, set[TopicPartition]],
    least_loaded: _LeastLoaded,
) -> list[TopicPartition]:
    """Give each partition to its least loaded rack-local taker; return the others.

    The local takers of a partition depend only on its takers and its replicas'
    racks, so partitions sharing both share one list (and one heap in
    ``least_loaded``); the lists stay alive in ``local_takers`` for as long as the
    heaps are keyed by them.
    """
    local_takers: dict[tuple[int, frozenset[str]], list[str]] = {}
    left: list[TopicPartition] = []
    for tp in unowned:
        takers = eligible[tp]
        replica_racks = racks.replica_racks.get(tp, frozenset())
        key = (id(takers), replica_racks)
        local = local_takers.get(key)
        if local is None:
            local = [m for m in takers if not racks.mismatch(m, tp)]
            local_takers[key] = local
        if local:
            held[least_loaded.pop(local)].add(tp)
        else:
            left.append(tp)
    return left


class _LeastLoaded:
    """The least loaded member among a set of takers, in logarithmic time.

    One heap per distinct set of takers (topics with the same subscribers share
    one).  Loads only grow while partitions are placed, so a heap entry can only
    understate its member's load: an entry found stale at the top is pushed back
    with the real load, and an accurate top entry is the true minimum.  Scanning
    every taker instead made a fresh 100,000-partition, 2,000-member assignment
    take half a minute.
    """

    def __init__(self, held: Mapping[str, set[TopicPartition]], rank: Mapping[str, int]) -> None:
        self._held = held
        self._rank = rank
        self._heaps: dict[int, list[tuple[int, int, str]]] = {}

    def pop(self, takers: list[str]) -> str:
        heap = self._heaps.get(id(takers))
        if heap is None:
            heap = [(len(self._held[m]), self._rank[m], m) for m in takers]
            heapq.heapify(heap)
            self._heaps[id(takers)] = heap
        while True:
            count, order, member_id = heap[0]
            actual = len(self._held[member_id])
            if actual == count:
                heapq.heapreplace(heap, (count + 1, order, member_id))
                return member_id
            heapq.heapreplace(heap, (actual, order, member_id))


def _rebalance(
    held: dict[str, set[TopicPartition]],
    subscribed: Mapping[str, frozenset[str]],
    owner: Mapping[TopicPartition, str],
    rank: Mapping[str, int],
    racks: RackInfo | None,
    eligible: Mapping[TopicPartition, list[str]],
) -> None:
    """Shift partitions along chains of members until no chain improves balance.

    A chain starts at a member holding at least two more partitions than the member
    it ends at; each link passes one partition to the next member, which must be
    subscribed to its topic.  The first member loses one, the last gains one, the
    ones between keep their counts, so every chain lowers the sum of squared counts
    and the loop ends.  A direct move is the one-link chain; longer chains matter
    with unequal subscriptions: in Kafka's testAssignmentWithMultipleGenerations2, a
    member subscribed to one topic holds 3, another holds 5, and the 5's extra
    partition is of a topic the 3 cannot take, so the fix is 5 -> 4 -> 3 through a
    member subscribed to both.  Kafka's general builder reaches the same end by
    trying every partition on every consumer that could take it, for as long as a
    reassignment improves balance; searching chains breadth first from the lightest
    member finds the shortest such sequence of moves, so as few partitions move as
    balance needs.

    At each link the giver hands over a partition it did not own before if it has
    one (that keeps owned partitions in place), else its lowest (partition, topic),
    so a member shedding several spreads the loss across topics (KAFKA-16277).
    Once no chain exists, no member holding two more than another holds a partition
    the other could take, directly or through intermediaries.

    With racks (KIP-881) the chains are the same, since balance comes first, but the
    partition each link hands over is chosen for locality: one with a replica on the
    taker's rack if there is one (the move gains locality), else one without a
    replica on the giver's rack (the move loses none).  Kafka's builder consults
    racks here only to decide whether a move is due, and every move it makes goes to
    the least loaded taker whatever its rack; in effect it walks the partitions in
    its placement order (fewest takers, then topic, then partition) and moves the
    first whose holder is two ahead of another taker.  Among equally local
    candidates we take the first in
    that same order, so a Java leader and an aiogroup leader agree on Kafka's
    testRackAwareAssignmentWithNonEqualSubscription partition for partition (the
    (partition, topic) order would hand over t3-0 where Kafka hands over t1-1).
    Without racks the KAFKA-16277 order above stays: Kafka's tests accept either
    order there, and it spreads a member's losses across topics.
    """
    topic_load: dict[str, dict[str, int]] = {m: {} for m in held}
    for member_id, partitions in held.items():
        counts = topic_load[member_id]
        for tp in partitions:
            counts[tp.topic] = counts.get(tp.topic, 0) + 1

    def can_give(giver: str, taker: str) -> bool:
        counts = topic_load[giver]
        wanted = subscribed[taker]
        if len(counts) <= len(wanted):
            return any(t in wanted for t in counts)
        return any(t in counts for t in wanted)

    def pick(giver: str, taker: str) -> TopicPartition:
        wanted = subscribed[taker]
        candidates = (tp for tp in held[giver] if tp.topic in wanted)
        if racks is None:
            return min(candidates, key=lambda tp: (owner.get(tp) == giver, tp.partition, tp.topic))
        replica_racks = racks.replica_racks
        taker_rack = racks.member_racks.get(taker)
        giver_rack = racks.member_racks.get(giver)

        def preference(tp: TopicPartition) -> tuple[bool, bool, bool, int, str, int]:
            on = replica_racks.get(tp, _NO_RACKS)
            return (
                owner.get(tp) == giver,
                taker_rack is not None and taker_rack not in on,  # RackInfo.mismatch
                giver_rack is None or giver_rack in on,
                len(eligible[tp]),
                tp.topic,
                tp.partition,
            )

        return min(candidates, key=preference)

    def move(tp: TopicPartition, giver: str, taker: str) -> None:
        held[giver].remove(tp)
        held[taker].add(tp)
        counts = topic_load[giver]
        counts[tp.topic] -= 1
        if not counts[tp.topic]:
            del counts[tp.topic]
        topic_load[taker][tp.topic] = topic_load[taker].get(tp.topic, 0) + 1

    # Members by (-load, rank): the heaviest first, ties in member order.  Kept
    # sorted across moves (two bisects per member moved) rather than re-sorted for
    # every chain: with racks, a first pass that fills the local members can leave
    # a third of the partitions to move one chain at a time, and re-sorting 2,000
    # members for each of them cost more than the moves.
    by_load = sorted((-len(held[m]), rank[m], m) for m in held)

    def reload(member_id: str, before: int) -> None:
        del by_load[bisect.bisect_left(by_load, (-before, rank[member_id], member_id))]
        bisect.insort(by_load, (-len(held[member_id]), rank[member_id], member_id))

    def find_chain() -> list[str] | None:
        heaviest = -by_load[0][0]
        end = len(by_load)
        while end:  # levels from the lightest up; each level's members in rank order
            level = -by_load[end - 1][0]
            need = level + 2
            if need > heaviest:
                return None
            start = bisect.bisect_left(by_load, (-level,))
            # Breadth first backwards from every member at this load at once: who
            # could hand one of them something, directly or through others?  Every
            # giver is heavier than the level, so ``came_from`` (giver -> the member
            # it would hand to) never holds a member of the level itself: a chain
            # ends at the first member not in it.  The level is walked lazily, as
            # the first of its members usually finds a giver at once.
            came_from: dict[str, str] = {}
            frontier: Iterable[str] = (by_load[i][2] for i in range(start, end))
            end = start
            while True:
                following: list[str] = []
                for taker in frontier:
                    for negative_load, _, giver in by_load:
                        if -negative_load <= level:
                            break  # the rest are no heavier than the level
                        if giver in came_from or not can_give(giver, taker):
                            continue
                        came_from[giver] = taker
                        if -negative_load >= need:
                            chain = [giver]
                            while chain[-1] in came_from:
                                chain.append(came_from[chain[-1]])
                            return chain
                        following.append(giver)
                if not following:
                    break
                frontier = following
        return None

    while (chain := find_chain()) is not None:
        # Move from the receiving end first, so each member in between passes on a
        # partition it already had rather than the one it is about to receive.
        for giver, taker in reversed(list(pairwise(chain))):
            move(pick(giver, taker), giver, taker)
        # Only the ends change load; the members between gave one and took one.
        reload(chain[0], len(held[chain[0]]) + 1)
        reload(chain[-1], len(held[chain[-1]]) - 1)


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

    def __init__(self, prefer_rack_aware: bool = False) -> None:
        # Kafka's test hook (preferRackAwareLogic): take the rack-matching path even
        # when every partition is on every rack, where it must give the same result.
        self.prefer_rack_aware = prefer_rack_aware
        self._last: tuple[TopicPartition, ...] | None = None
        self._generation_id = NO_GENERATION

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        if self._last is None:
            return None
        return encode_sticky_user_data(self._last, self._generation_id)

    def on_assignment(self, assignment: ConsumerAssignment, generation_id: int) -> None:
        self._last = assignment.partitions
        self._generation_id = generation_id

    def claims(self, members: Mapping[str, MemberSubscription]) -> dict[str, OwnershipClaim]:
        """What each member owned: eager members arrive with nothing owned, so
        user_data (where this assignor's members remember it) wins when present."""
        claims = claims_from_subscriptions(members)
        for member_id, m in members.items():
            from_user_data = decode_sticky_user_data(m.subscription.user_data)
            if from_user_data is not None:
                claims[member_id] = from_user_data
        return claims

    def target(
        self, cluster: ClusterView, members: Mapping[str, MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        """The balanced, sticky goal (Kafka's assignPartitions before any hold-back)."""
        with collector_paused():
            claims = self.claims(members)
            return sticky_assignment(cluster, members, claims, self.prefer_rack_aware)

    def assign(
        self, cluster: ClusterView, members: Mapping[str, MemberSubscription]
    ) -> dict[str, ConsumerAssignment]:
        goal = self.target(cluster, members)
        with collector_paused():
            return build_assignments(members, goal)
