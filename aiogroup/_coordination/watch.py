"""The children every shell runs for its lifetime (the subscription watcher and the
committed-offset refresh), and the plain view of a subscription the pure diffs compare."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiogroup._coordination.commit_client import Committed, refresh_committed
from aiogroup._coordination.supervision import TaskScope
from aiogroup._coordination.tracking import SubscriptionView
from aiogroup.structs import TopicPartition
from aiogroup.subscription import Subscription, SubscriptionState

__all__ = ["spawn_lifetime_children", "subscription_view", "watch_subscription"]


def spawn_lifetime_children(
    scope: TaskScope,
    sub: SubscriptionState,
    poke: Callable[[], None],
    fetch: Callable[[list[TopicPartition]], Awaitable[Committed]],
    retry_backoff: float,
    group_id: str,
) -> None:
    """Start the subscription watcher (``poke()`` per change) and the committed-offset
    refresh (``fetch`` the committed offsets of partitions awaiting them)."""
    scope.spawn(watch_subscription(sub, poke), "subscription-watcher")
    scope.spawn(refresh_committed(sub, fetch, retry_backoff, group_id), "commit-refresh")


async def watch_subscription(sub: SubscriptionState, poke: Callable[[], None]) -> None:
    """Turn every subscription change into ``poke()`` (an inbox item for the routine)."""
    while not sub.closed:
        await sub.wait_subscription_changed()
        sub.clear_subscription_changed()
        poke()


def subscription_view(sub: Subscription) -> SubscriptionView:
    """What of ``sub`` the group cares about, as plain values."""
    return SubscriptionView(sub.type.name, sub.topics, sub.effective_topics, sub.pattern)
