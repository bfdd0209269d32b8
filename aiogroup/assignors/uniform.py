"""Sticky assignment when every member subscribes to the same topics.

With equal subscriptions balance has a closed form: with P partitions and C members
every member gets ``min_quota = P // C`` or ``max_quota = ceil(P / C)``, and exactly
``P % C`` members get the larger number.  Kafka's sticky assignor has a separate
"constrained" builder for this case (its performance test assigns a million
partitions to 2,000 consumers), and this module follows the same steps, so the
result matches a Java leader's partition for partition:

1. Each member keeps what it validly owned, up to its quota.  Members are visited in
   Java HashMap order (see :mod:`aiogroup.assignors.java_order`); a member owning
   ``max_quota`` or more keeps ``max_quota`` while fewer than ``P % C`` members have
   done so, otherwise ``min_quota``.  What a member keeps is chosen by (partition,
   topic), not (topic, partition): KAFKA-16277 found that shedding in topic order
   made whole topics move together, so after 1 -> 2 -> 4 -> 2 members one member
   could hold all of topic1 and another all of topic2, which is balanced by count
   but not per topic.  Ordering by partition number first sheds evenly across topics.
2. The rest go round robin, in (topic, partition) order, first to the members below
   ``min_quota`` (sorted by member id), then one each to members at ``min_quota``
   until ``P % C`` members hold ``max_quota``.

Every step is linear in the number of partitions (plus a sort), which is what takes
a fresh 100,000-partition, 2,000-member assignment from tens of seconds (the general
balancing loop) to well under one.

Rack awareness (KIP-881), when ``racks`` is given: in step 1 a member keeps only the
owned partitions with a replica on its rack (the others are freed, so they may move
to a local member); before step 2, each unassigned partition goes round robin to a
member below quota on one of its replicas' racks, partitions with the fewest such
members first; only what cannot be placed locally within the quotas goes through
the plain round robin.  Balance is never traded for locality.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aiogroup.assignors.java_order import hashmap_order
from aiogroup.structs import TopicPartition

__all__ = ["RackInfo", "uniform_assignment"]


@dataclass(frozen=True, slots=True)
class RackInfo:
    """Members' racks and partitions' replica racks, for rack-aware assignment."""

    member_racks: Mapping[str, str]
    replica_racks: Mapping[TopicPartition, frozenset[str]]

    def mismatch(self, member: str, tp: TopicPartition) -> bool:
        rack = self.member_racks.get(member)
        return rack is not None and rack not in self.replica_racks.get(tp, frozenset())

    def local_members(self) -> dict[TopicPartition, int]:
        """How many members sit on a rack holding a replica of each partition."""
        per_rack: dict[str, int] = {}
        for rack in self.member_racks.values():
            per_rack[rack] = per_rack.get(rack, 0) + 1
        return {
            tp: sum(per_rack.get(r, 0) for r in racks) for tp, racks in self.replica_racks.items()
        }

    def next_local(self, tp: TopicPartition, members: Sequence[str], first: int) -> int:
        """Index of the first member (from ``first``, wrapping) local to ``tp``, or -1."""
        racks = self.replica_racks.get(tp)
        if not racks:
            return -1
        for i in range(len(members)):
            index = (first + i) % len(members)
            if self.member_racks.get(members[index]) in racks:
                return index
        return -1


def _shed_order(tp: TopicPartition) -> tuple[int, str]:
    return (tp.partition, tp.topic)


def uniform_assignment(
    all_partitions: Sequence[TopicPartition],
    owned: Mapping[str, Sequence[TopicPartition]],
    racks: RackInfo | None = None,
) -> dict[str, list[TopicPartition]]:
    """Balanced, sticky assignment of ``all_partitions`` (sorted by topic, partition).

    ``owned`` has an entry for every member: the partitions it validly owns, already
    checked against subscriptions and conflicting claims (see ``resolve_owners``).
    """
    members = list(owned)
    if not members:
        return {}
    total = len(all_partitions)
    min_quota, over = divmod(total, len(members))
    max_quota = min_quota + (1 if over else 0)
    at_max = 0

    assignment: dict[str, list[TopicPartition]] = {m: [] for m in members}
    under_min: list[str] = []
    at_min: list[str] = []
    kept: set[TopicPartition] = set()

    for member in hashmap_order(members):
        mine = sorted(owned[member], key=_shed_order)
        if racks is not None:
            mine = [tp for tp in mine if not racks.mismatch(member, tp)]
        if len(mine) < min_quota:
            assignment[member].extend(mine)
            kept.update(mine)
            under_min.append(member)
        elif len(mine) >= max_quota and at_max < over:
            at_max += 1
            if at_max == over:
                at_min.clear()
            assignment[member].extend(mine[:max_quota])
            kept.update(mine[:max_quota])
        else:
            assignment[member].extend(mine[:min_quota])
            kept.update(mine[:min_quota])
            if at_max < over:
                at_min.append(member)

    unassigned = [tp for tp in all_partitions if tp not in kept] if kept else list(all_partitions)
    under_min.sort()
    at_min.sort()
    if racks is not None:
        local = racks.local_members()
        unassigned.sort(key=lambda tp: local.get(tp, 0))
        at_max, unassigned = _rack_round_robin(
            unassigned, assignment, under_min, at_min, racks, min_quota, max_quota, over, at_max
        )
    waiting = deque(at_min)
    turn = 0
    for tp in unassigned:
        if turn < len(under_min):
            member = under_min[turn]
        elif under_min:
            turn = 0
            member = under_min[0]
        elif waiting:
            member = waiting.popleft()
            turn = -1  # not from the round robin: nothing to advance or remove
        else:  # the quotas add up to exactly the partition count, so this cannot happen
            raise AssertionError(f"uniform assignment ran out of members with room for {tp}")
        mine = assignment[member]
        mine.append(tp)
        if turn < 0:
            turn = 0
            continue
        if len(mine) == min_quota:
            # Reached the minimum: leaves the round robin, may still take one more.
            del under_min[turn]
            waiting.append(member)
        else:
            turn += 1
    return assignment


def _rack_round_robin(
    unassigned: list[TopicPartition],
    assignment: dict[str, list[TopicPartition]],
    under_min: list[str],
    at_min: list[str],
    racks: RackInfo,
    min_quota: int,
    max_quota: int,
    over: int,
    at_max: int,
) -> tuple[int, list[TopicPartition]]:
    """Place what can be placed on a rack-local member within quota; return the rest.

    ``under_min`` and ``at_min`` are updated in place as members fill up, exactly as
    the plain round robin that follows expects them.
    """
    left: list[TopicPartition] = []
    turn = 0
    for tp in unassigned:
        member = None
        index = racks.next_local(tp, under_min, turn)
        if index >= 0:
            member = under_min[index]
            count = len(assignment[member]) + 1
            if count >= min_quota:
                del under_min[index]
                if count < max_quota and at_max < over:
                    at_min.append(member)
            else:
                index += 1
            turn = index % len(under_min) if under_min else 0
        elif at_min:
            first = racks.next_local(tp, at_min, 0)
            if first >= 0:
                member = at_min[first]
                if len(assignment[member]) + 1 == max_quota:
                    del at_min[first]
                    at_max += 1
                    if at_max == over:
                        at_min.clear()
        if member is None:
            left.append(tp)
        else:
            assignment[member].append(tp)
    return at_max, left
