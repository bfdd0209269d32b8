"""Rebalance listeners: the application's hooks into partition movement.

The contract is the Java client's ``ConsumerRebalanceListener`` (and KIP-429 for
cooperative rebalancing), done the asyncio way: the coordination routine *awaits*
the async methods while the heartbeat task keeps the membership alive, so a slow
listener does not get its member evicted.

``on_partitions_assigned`` may return ``{TopicPartition: offset}``: the consumer
then starts those partitions at those offsets instead of their committed ones
(pykafka's post-rebalance hook).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from aiogroup.structs import TopicPartition

__all__ = [
    "AsyncConsumerRebalanceListener",
    "ConsumerRebalanceListener",
    "StartOffsets",
    "as_async_listener",
]

StartOffsets = Mapping[TopicPartition, int] | None


class AsyncConsumerRebalanceListener:
    """Subclass and override the ``async def`` hooks you need; the defaults do nothing.

    ``on_partitions_lost`` defaults to ``on_partitions_revoked``, as in Java: code that
    only cleans up in ``revoked`` still cleans up when membership is lost, but must
    not commit there (the commit would be rejected - the partitions may already be
    someone else's).
    """

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Partitions are leaving this member; commit or flush their work here."""

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> StartOffsets:
        """Partitions arrived (empty set when none did). Return offsets to start from."""
        return None

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """Membership was lost; these partitions already belong to someone else."""
        await self.on_partitions_revoked(lost)


class ConsumerRebalanceListener:
    """The same hooks as plain methods, for code shared with aiokafka/kafka-python.

    aiokafka's ``ConsumerRebalanceListener`` subclasses (whose methods may be plain
    or ``async def``) are accepted as they are, through :func:`as_async_listener`.
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Partitions are leaving this member."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> StartOffsets:
        """Partitions arrived (empty set when none did)."""
        return None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """Membership was lost; by default treated as a revocation."""
        self.on_partitions_revoked(lost)


async def _maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


class _Adapter(AsyncConsumerRebalanceListener):
    """Calls a listener whose methods may be sync or async, and may lack ``lost``."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await _maybe_await(self.inner.on_partitions_revoked(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> StartOffsets:
        result: StartOffsets = await _maybe_await(self.inner.on_partitions_assigned(assigned))
        return result

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        hook = getattr(self.inner, "on_partitions_lost", None)
        if hook is None:
            await self.on_partitions_revoked(lost)
        else:
            await _maybe_await(hook(lost))


def as_async_listener(listener: object | None) -> AsyncConsumerRebalanceListener:
    """Normalise any supported listener object to the async interface.

    Raises TypeError naming the missing method when the object is not a listener.
    """
    if listener is None:
        return AsyncConsumerRebalanceListener()
    if isinstance(listener, AsyncConsumerRebalanceListener):
        return listener
    for name in ("on_partitions_revoked", "on_partitions_assigned"):
        if not callable(getattr(listener, name, None)):
            raise TypeError(
                f"listener {listener!r} must define {name}(); subclass "
                "aiogroup.AsyncConsumerRebalanceListener or ConsumerRebalanceListener"
            )
    return _Adapter(listener)
