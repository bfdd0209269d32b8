"""Subscription and metadata tracking as pure diffs: (what was seen, what is now) -> events.

The routine snapshots the application's subscription and the cluster's partition
counts; what changed between two snapshots - and whether it is the group's
business - is decided here, from plain values, and fed to the machine as events.
The shell only reads the snapshots and performs (metadata topics, pattern matches).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aiogroup._membership import events as E

__all__ = [
    "SubscriptionView",
    "classic_subscription_diff",
    "consumer_subscription_diff",
    "partition_count_change",
    "snapshot_counts",
]


@dataclass(frozen=True, slots=True)
class SubscriptionView:
    """The parts of a subscription the group cares about (``SubscriptionState.subscription``)."""

    #: SubscriptionType's name: AUTO_TOPICS, AUTO_PATTERN, USER_ASSIGNED or NONE.
    type: str
    #: The topics asked for by name (empty for a pattern).
    topics: frozenset[str]
    #: What the member subscribes with: the named topics, or a pattern's matches.
    effective_topics: frozenset[str]
    #: The compiled pattern (compared as ``re`` compares patterns), if any.
    pattern: object = None

    @property
    def group_managed(self) -> bool:
        return self.type in ("AUTO_TOPICS", "AUTO_PATTERN")


@dataclass(frozen=True, slots=True)
class Diff:
    #: What to remember for the next comparison (None: not in a group subscription).
    key: object
    #: What to feed the machine, if anything changed.
    event: object = None


def classic_subscription_diff(old_key: object, sub: SubscriptionView) -> Diff:
    """Classic protocol: a group subscription's topics (a pattern's matches) or type changed,
    or the application left group management (unsubscribe, assign())."""
    if sub.group_managed:
        key: object = (sub.type, sub.effective_topics, sub.pattern)
        if key == old_key:
            return Diff(old_key)
        topics = sorted(sub.effective_topics) or "no topics yet"
        return Diff(key, E.SubscriptionChanged(True, f"subscribed to {topics}"))
    if old_key is None:
        return Diff(None)
    reason = "unsubscribed" if sub.type == "NONE" else "switched to assign()"
    return Diff(None, E.SubscriptionChanged(False, reason))


def consumer_subscription_diff(old_key: object, sub: SubscriptionView) -> Diff:
    """KIP-848: the broker matches a pattern itself, so the pattern text (not its
    matches) is what the member subscribes with."""
    if sub.group_managed:
        pattern = getattr(sub.pattern, "pattern", None)
        key: object = (sub.type, sub.topics, pattern)
        if key == old_key:
            return Diff(old_key)
        if sub.type == "AUTO_PATTERN":
            assert isinstance(pattern, str)
            return Diff(key, E.Subscribed(regex=pattern))
        return Diff(key, E.Subscribed(sub.topics))
    if old_key is None:
        return Diff(None)
    return Diff(None, E.UnsubscribeRequested())


def snapshot_counts(
    topics: Iterable[str],
    current: Mapping[str, int | None],
    assignor_counts: Mapping[str, int | None],
) -> dict[str, int | None]:
    """Each topic's partition count now (None: unknown).

    A metadata answer for an older topic list can drop a topic for a moment; what the
    assignor saw (when this member led) is then what the assignment was made on.
    """
    return {t: current.get(t) or assignor_counts.get(t) for t in topics}


@dataclass(frozen=True, slots=True)
class CountChange:
    #: Take a new snapshot (a count changed, or this member's own metadata caught up).
    resnapshot: bool = False
    #: Fed to the machine: the group must rebalance.
    event: E.MetadataChanged | None = None


def partition_count_change(
    before: Mapping[str, int | None], now: Mapping[str, int | None], *, leader: bool
) -> CountChange:
    """Did a partition count the assignment was made on change?

    A topic this member did not know when the assignment came (``before`` None) that
    appears now is only the group's business for the leader: a follower's metadata
    merely lagged the leader's, and only the leader can tell whether the assignment
    missed the topic (it rejoins if so); a follower rejoining is a spurious rebalance.
    """
    caught_up = False
    for topic, was in before.items():
        count = now.get(topic)
        if count is None or count == was:
            continue
        if was is None and not leader:
            caught_up = True
            continue
        reason = f"partition count of {topic!r} changed ({was} -> {count})"
        return CountChange(True, E.MetadataChanged(reason))
    return CountChange(caught_up)
