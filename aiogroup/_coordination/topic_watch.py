"""What a classic member watches of the cluster for its group.

The topics its metadata must cover (the subscription's, and the group's when it led
the assignment), a pattern's matches, and the partition counts the current
assignment was made on.  Whether a change matters is decided by the pure diffs of
:mod:`aiogroup._coordination.tracking` and then by the machine; this class only
reads the client's metadata, asks for more, and hands on the event.  (The KIP-848
broker matches patterns and counts partitions itself.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aiokafka.client import AIOKafkaClient

from aiogroup._coordination.tracking import partition_count_change, snapshot_counts
from aiogroup._membership import events as E
from aiogroup._state.subscription import SubscriptionState, SubscriptionType

__all__ = ["TopicWatch"]


class TopicWatch:
    """Metadata topics, pattern matches and partition counts for one classic member."""

    def __init__(
        self,
        client: AIOKafkaClient,
        subscription: SubscriptionState,
        *,
        exclude_internal_topics: bool,
        group_topics: Callable[[], frozenset[str]],
        assignor_counts: Callable[[], dict[str, int | None]],
    ) -> None:
        self._client = client
        self._subscription = subscription
        self._exclude_internal = exclude_internal_topics
        self._group_topics = group_topics
        self._assignor_counts = assignor_counts
        self._all_topics = False
        #: Partition counts the current assignment was made on (None: topic unknown).
        self.counts: dict[str, int | None] = {}

    def follow_subscription(self) -> None:
        """Point the client's metadata at what a group subscription needs."""
        sub = self._subscription.subscription
        if sub.type is SubscriptionType.AUTO_PATTERN:
            if not self._all_topics:
                self._all_topics = True
                self._client.set_topics([])  # a pattern needs every topic's metadata
            self.match_pattern()
        else:
            self._client.set_topics(sorted(sub.topics | self._group_topics()))

    def match_pattern(self) -> None:
        sub = self._subscription.subscription
        if sub.pattern is None:
            return
        topics = self._client.cluster.topics(self._exclude_internal)
        self._subscription.set_matched_topics(t for t in topics if sub.pattern.match(t))

    def _current(self, topics: Iterable[str]) -> dict[str, int | None]:
        cluster = self._client.cluster
        return {t: len(cluster.partitions_for_topic(t) or ()) or None for t in topics}

    def metadata_changed(self, *, leader: bool) -> E.MetadataChanged | None:
        """Metadata was refreshed: the event for the machine if the group must rebalance."""
        if self._subscription.subscription.type is SubscriptionType.AUTO_PATTERN:
            self.match_pattern()
        if not self.counts:
            return None
        change = partition_count_change(self.counts, self._current(self.counts), leader=leader)
        if change.resnapshot:
            self.snapshot()
        return change.event

    def snapshot(self) -> frozenset[str]:
        """A new assignment: remember the counts it was made on; the subscribed topics
        the metadata does not show (the machine asks for them again: SubscribedTopicsMissing)."""
        topics = self._group_topics() | self._subscription.subscription.effective_topics
        self.counts = snapshot_counts(topics, self._current(topics), self._assignor_counts())
        return frozenset(t for t, n in self.counts.items() if n is None)

    async def still_missing(self, topics: frozenset[str]) -> frozenset[str]:
        """Ask for metadata again: which of ``topics`` it still does not show."""
        await self._client.force_metadata_update()
        cluster = self._client.cluster
        return frozenset(t for t in topics if not cluster.partitions_for_topic(t))
