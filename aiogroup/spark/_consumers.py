"""The one place the Spark integration constructs consumers.

Both the group member (streaming-source process) and the executors' range readers
are aiogroup ``GroupConsumer`` objects; keeping construction here means options are
translated and checked the same way for both.
"""

from __future__ import annotations

from typing import Any

from aiogroup.consumer import GroupConsumer
from aiogroup.listeners import AsyncConsumerRebalanceListener

__all__ = ["new_consumer", "subscribe"]


def new_consumer(**kwargs: Any) -> GroupConsumer:
    """A not-yet-started GroupConsumer built from keyword options."""
    return GroupConsumer(**kwargs)


def subscribe(
    consumer: GroupConsumer,
    topics: tuple[str, ...],
    pattern: str | None,
    listener: AsyncConsumerRebalanceListener,
) -> None:
    if pattern is not None:
        consumer.subscribe(pattern=pattern, listener=listener)
    else:
        consumer.subscribe(topics=list(topics), listener=listener)
