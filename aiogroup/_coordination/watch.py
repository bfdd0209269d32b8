"""The subscription watcher every shell runs for its lifetime, and the plain view of a
subscription the pure diffs compare."""

from __future__ import annotations

from collections.abc import Callable

from aiogroup._coordination.tracking import SubscriptionView
from aiogroup._state.subscription import Subscription, SubscriptionState

__all__ = ["subscription_view", "watch_subscription"]


async def watch_subscription(sub: SubscriptionState, poke: Callable[[], None]) -> None:
    """Turn every subscription change into ``poke()`` (an inbox item for the routine)."""
    while not sub.closed:
        await sub.wait_subscription_changed()
        sub.clear_subscription_changed()
        poke()


def subscription_view(sub: Subscription) -> SubscriptionView:
    """What of ``sub`` the group cares about, as plain values."""
    return SubscriptionView(sub.type.name, sub.topics, sub.effective_topics, sub.pattern)
