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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from aiogroup.assignors.java_order import hashmap_order
from aiogroup.structs import TopicPartition

__all__ = ["uniform_assignment"]


def _shed_order(tp: TopicPartition) -> tuple[int, str]:
    return (tp.partition, tp.topic)


def uniform_assignment(
    all_partitions: Sequence[TopicPartition],
    owned: Mapping[str, Sequence[TopicPartition]],
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

    unassigned = [tp for tp in all_partitions if tp not in kept] if kept else all_partitions
    under_min.sort()
    waiting = deque(sorted(at_min))
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
