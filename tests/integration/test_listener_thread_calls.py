"""A plain (sync) listener calling the consumer's plain methods (issue 31).

Sync listener methods run in the consumer's listener thread.  aiokafka programs call
``consumer.seek()`` / ``pause()`` / ``assignment()`` from their listeners; here that
used to touch the loop's unlocked state from the wrong thread.  Those calls are now
run on the event loop and their result comes back to the thread: judged by where
the partition state was really changed (the loop's thread) and by what the group
then delivers.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from aiogroup import ConsumerRebalanceListener, GroupConsumer, TopicPartition
from aiogroup._state.subscription import PartitionState
from aiogroup.testing.broker import unique_name
from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration


async def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        for i in range(count):
            await producer.send(topic, f"r{i}".encode(), partition=0)
        await producer.flush()
    finally:
        await producer.stop()


async def test_sync_listener_calls_run_on_the_loop(
    bootstrap_servers: str, kafka_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = await kafka_topic(partitions=1)
    tp = TopicPartition(topic, 0)
    await produce(bootstrap_servers, topic, 6)
    loop_thread = threading.get_ident()
    seek_threads: list[int] = []
    original_seek = PartitionState.seek

    def spying_seek(self: PartitionState, offset: int) -> Any:
        seek_threads.append(threading.get_ident())
        return original_seek(self, offset)

    monkeypatch.setattr(PartitionState, "seek", spying_seek)
    consumer = GroupConsumer(
        bootstrap_servers=bootstrap_servers,
        group_id=unique_name("listener-thread"),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    seen: dict[str, Any] = {}

    class Seeking(ConsumerRebalanceListener):
        def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            seen["thread"] = threading.get_ident()
            seen["assignment"] = consumer.assignment()
            consumer.seek(tp, 3)
            consumer.pause(tp)
            seen["paused"] = consumer.paused()
            consumer.resume(tp)
            with pytest.raises(ValueError, match="offset must be an int"):
                consumer.seek(tp, -1)  # the loop's exception comes back to the thread

    await consumer.start()
    try:
        consumer.subscribe([topic], listener=Seeking())
        record = await asyncio.wait_for(consumer.getone(), 30)
    finally:
        await consumer.stop()
    assert seen["thread"] != loop_thread  # the callback did run in the listener thread
    assert seen["assignment"] == {tp} and seen["paused"] == {tp}
    assert seek_threads and set(seek_threads) == {loop_thread}, (seek_threads, loop_thread)
    assert (record.offset, record.value) == (3, b"r3")
