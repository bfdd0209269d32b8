"""Listener wrappers that write a member's rebalance callbacks into a history.

Wrap the listener you already pass to ``subscribe()``; the wrapper records the
instant each callback starts (``assigned``, ``revoke_started``, ``lost``) and the
instant a revoke returns (``revoke_ended``), then calls yours.  The sync wrapper
stays sync, so aiogroup runs it exactly as it would run yours::

    history = HistoryRecorder("history.jsonl")
    me = history.member("worker-1")          # also the consumer's client_id
    consumer.subscribe([topic], listener=RecordingListener(me, MyListener()))
    ...
    batches = await consumer.getmany()
    for tp, records in batches.items():
        me.delivered(tp.topic, tp.partition, [r.offset for r in records])
"""

from __future__ import annotations

from aiogroup.listeners import (
    AsyncConsumerRebalanceListener,
    ConsumerRebalanceListener,
    StartOffsets,
)
from aiogroup.structs import TopicPartition
from aiogroup.testing.history import MemberRecorder

__all__ = ["RecordingListener", "RecordingSyncListener"]


class RecordingListener(AsyncConsumerRebalanceListener):
    """An ``async`` listener that records around ``inner`` (default: one that does nothing)."""

    def __init__(
        self, member: MemberRecorder, inner: AsyncConsumerRebalanceListener | None = None
    ) -> None:
        self.member = member
        self.inner = inner or AsyncConsumerRebalanceListener()

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.member.revoke_started(revoked)
        try:
            await self.inner.on_partitions_revoked(revoked)
        finally:
            self.member.revoke_ended(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> StartOffsets:
        self.member.assigned(assigned)
        return await self.inner.on_partitions_assigned(assigned)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.member.lost(lost)
        await self.inner.on_partitions_lost(lost)


class RecordingSyncListener(ConsumerRebalanceListener):
    """The same for a plain (sync) listener."""

    def __init__(
        self, member: MemberRecorder, inner: ConsumerRebalanceListener | None = None
    ) -> None:
        self.member = member
        self.inner = inner or ConsumerRebalanceListener()

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.member.revoke_started(revoked)
        try:
            self.inner.on_partitions_revoked(revoked)
        finally:
            self.member.revoke_ended(revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> StartOffsets:
        self.member.assigned(assigned)
        return self.inner.on_partitions_assigned(assigned)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.member.lost(lost)
        self.inner.on_partitions_lost(lost)
