"""Which broker to fetch a partition from: the leader or its preferred read replica (KIP-392).

A consumer that sends its rack (``client_rack``) on Fetch lets a leader whose broker
runs a ``replica.selector.class`` (Kafka's ``RackAwareReplicaSelector``) answer with
``preferred_read_replica``: a follower in the consumer's rack.  That answer carries no
records; the consumer fetches the partition from the follower afterwards, saving
cross-rack traffic.  The facts this module follows (KIP-392; Apache Kafka's
``AbstractFetch.selectReadReplica``, ``FetchCollector`` and
``SubscriptionState.preferredReadReplica``):

- A preference expires after the metadata max age, so the leader is asked again now
  and then (it may choose another replica, or the leader itself).
- The preferred replica is used only while current metadata lists it as a replica
  of the partition.  This module is stricter than Java in one way: the replica must
  also be in the ISR, because a follower out of the ISR lags and would serve old data.
- Any error from the replica, and a connection failure to it, drops the preference:
  the partition goes back to the leader.  ``OFFSET_OUT_OF_RANGE`` from a follower
  means it is behind the leader, not that the position is wrong: the partition goes
  back to the leader instead of resetting its position.

One departure from Java, for liveness: after a replica failed, the leader would keep
naming the same replica (a SIGKILLed broker stays "alive" to the controller until its
session times out, ``broker.session.timeout.ms``, and in the ISR until
``replica.lag.time.max.ms``), and a leader that names a replica sends no records - so
a Java consumer makes no progress until the broker is fenced.  Here a partition whose
replica failed is *held at the leader* for :data:`LEADER_HOLD` seconds: fetched from
the leader without ``rack_id``, which makes the rack-aware selector answer with the
leader itself (it needs a rack to choose a follower), so records keep flowing.

Pure: no clock, no I/O; the fetcher passes ``now`` and a view of the metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from aiogroup.structs import TopicPartition

__all__ = ["LEADER_HOLD", "NO_REPLICA", "ReadReplicas", "ReplicaView"]

#: ``preferred_read_replica`` when the broker names none.
NO_REPLICA = -1

#: Seconds a partition is fetched from the leader, without ``rack_id``, after its
#: preferred replica failed: long enough for Kafka to fence a dead broker (9 s
#: ``broker.session.timeout.ms``) and drop it from the ISR (30 s
#: ``replica.lag.time.max.ms``), after which the leader stops naming it.
LEADER_HOLD = 30.0


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """What metadata says about one partition: its replicas and in-sync replicas."""

    replicas: Collection[int]
    isr: Collection[int]


#: (partition) -> its replicas and ISR, or None when metadata does not know it.
MetadataLookup = Callable[[TopicPartition], ReplicaView | None]
#: (node id) -> whether metadata knows the broker.
BrokerLookup = Callable[[int], bool]


class ReadReplicas:
    """Each partition's preferred read replica, its expiry, and partitions held at the leader."""

    __slots__ = ("_held", "_hold", "_max_age", "_preferred", "enabled")

    def __init__(self, *, enabled: bool, max_age: float, hold: float = LEADER_HOLD) -> None:
        #: False without ``client_rack``: the leader is always chosen, rack_id not sent.
        self.enabled = enabled
        self._max_age = max_age
        self._hold = min(hold, max_age)
        #: partition -> (replica node id, expires at)
        self._preferred: dict[TopicPartition, tuple[int, float]] = {}
        #: partition -> fetch from the leader without rack_id until
        self._held: dict[TopicPartition, float] = {}

    def preferred(self, tp: TopicPartition, now: float) -> int | None:
        """The unexpired preferred replica of ``tp``, if any (expired ones are dropped)."""
        entry = self._preferred.get(tp)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._preferred[tp]
            return None
        return entry[0]

    def held(self, tp: TopicPartition, now: float) -> bool:
        """True while ``tp`` is fetched from the leader without rack_id after a failure."""
        until = self._held.get(tp)
        if until is None:
            return False
        if until <= now:
            del self._held[tp]
            return False
        return True

    def select(
        self,
        tp: TopicPartition,
        leader: int,
        now: float,
        partition: MetadataLookup,
        broker_known: BrokerLookup,
    ) -> tuple[int, bool]:
        """(node to fetch ``tp`` from, whether metadata needs a refresh).

        The preferred replica when it is unexpired, a known broker and a replica in
        the partition's ISR; otherwise the leader (a stale preference is dropped and
        metadata refreshed, as Java does, since the mismatch may be stale metadata).
        """
        replica = self.preferred(tp, now)
        if replica is None or replica == leader:
            return leader, False
        view = partition(tp)
        if view is not None and replica in view.isr and broker_known(replica):
            return replica, False
        self.failed(tp, now)
        return leader, True

    def send_rack(self, partitions: Iterable[TopicPartition], now: float) -> bool:
        """Whether a Fetch of ``partitions`` (to one node) carries rack_id.

        Not when rack awareness is off, nor when any of them is held at the leader:
        rack_id is per request, and a held partition must not be redirected again.
        """
        return self.enabled and not any(self.held(tp, now) for tp in partitions)

    def update(self, tp: TopicPartition, replica: int, source: int, now: float) -> None:
        """Record a ``preferred_read_replica`` answer for ``tp`` from node ``source``.

        ``NO_REPLICA`` changes nothing (followers never name one; a leader names
        none when it prefers itself); naming the node that answered drops the
        preference.
        """
        if not self.enabled or replica == NO_REPLICA:
            return
        if replica == source:
            self._preferred.pop(tp, None)
            return
        self._preferred[tp] = (replica, now + self._max_age)

    def failed(self, tp: TopicPartition, now: float) -> bool:
        """Drop ``tp``'s preference after an error from the replica; hold it at the leader.

        True when there was a preference (the error came from a follower: an
        out-of-range offset then means the follower is behind, not a reset).
        """
        had = self._preferred.pop(tp, None) is not None
        if had:
            self._held[tp] = now + self._hold
        return had

    def node_failed(self, node: int, partitions: Iterable[TopicPartition], now: float) -> None:
        """A request to ``node`` failed: partitions whose replica it is go to the leader."""
        for tp in partitions:
            entry = self._preferred.get(tp)
            if entry is not None and entry[0] == node:
                self.failed(tp, now)

    def forget(self, keep: Collection[TopicPartition]) -> None:
        """Drop state of partitions no longer assigned."""
        if not self._preferred and not self._held:
            return
        for table in (self._preferred, self._held):
            for tp in [tp for tp in table if tp not in keep]:
                del table[tp]
