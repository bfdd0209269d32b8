"""The read-ahead bound against the bytes actually held, on a real broker (issue 29).

The fetcher's own count (``peak_bytes``) is what it *thinks* it holds; these tests
measure what the process really allocates, with ``tracemalloc``: every Python
allocation - the socket's chunks, the frame joined from them, the record sets aiokafka
copies out, the buffered chunks, decoded leftovers, and every object around them - is
traced, so a copy the budget forgets shows up as a peak above the bound.  What
tracemalloc does not see is memory the C allocator keeps after a free (RSS;
``aiogroup._support.allocator``), which is not the fetcher's to count.

The consumer's own fixed footprint (connections, metadata, tasks, the parse of
metadata answers) is not read-ahead: it is measured the same way on an empty topic,
as the memory scenario does with RSS, and allowed on top of the bound.
"""

from __future__ import annotations

import asyncio
import os
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from aiogroup import GroupConsumer, TopicPartition
from aiogroup._fetch import planning
from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration

PARTITIONS = 4
RECORDS = 12_000  # 12 MB of 1 KiB values: three times the bound below
VALUE = 1024
BOUND = 4 * 1024 * 1024
OPTIONS: dict[str, Any] = {
    "max_buffered_bytes": BOUND,
    "max_partition_fetch_bytes": 256 * 1024,
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
}


async def _produce(bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        sends = [
            await producer.send(topic, os.urandom(VALUE), partition=i % PARTITIONS)
            for i in range(RECORDS)
        ]
        await asyncio.gather(*sends)
    finally:
        await producer.stop()


@contextmanager
def _traced() -> Iterator[None]:
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()


async def _stalled_peak(bootstrap: str, topic: str, *, wait_full: bool) -> tuple[int, int]:
    """Traced peak (bytes) from assign until the read-ahead stopped; and ``peak_bytes``.

    The application takes 10 records, then stalls: the fetcher fills its read-ahead and
    must stop at the bound.  ``wait_full=False``: an empty topic, one empty poll.
    """
    consumer = GroupConsumer(bootstrap_servers=bootstrap, **OPTIONS)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = await consumer.getmany(timeout_ms=10_000 if wait_full else 500, max_records=10)
        assert sum(map(len, got.values())) == (10 if wait_full else 0)
        del got
        budget = consumer._fetcher._budget
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        # No event marks "stopped at the bound"; poll the budget (bounded in time).
        while wait_full and (budget.can_request() or budget.reserved):
            assert loop.time() < deadline, "the read-ahead never stopped"
            await asyncio.sleep(0.02)
        peak = tracemalloc.get_traced_memory()[1] - base
        return peak, consumer._fetcher.peak_bytes
    finally:
        await consumer.stop()


async def test_bytes_held_stay_within_the_bound(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    topic = await kafka_topic(partitions=PARTITIONS)
    empty = await kafka_topic(partitions=PARTITIONS)
    await _produce(bootstrap_servers, topic)
    with _traced():
        fixed, _ = await _stalled_peak(bootstrap_servers, empty, wait_full=False)
        peak, counted = await _stalled_peak(bootstrap_servers, topic, wait_full=True)
    assert counted > BOUND // 2, "the read-ahead never filled: nothing was measured"
    assert counted <= BOUND
    # What was really allocated, beyond the consumer's own footprint.
    assert peak - fixed <= BOUND, (peak, fixed, counted)


async def test_a_forgotten_copy_shows_above_the_bound(
    bootstrap_servers: str, kafka_topic: TopicFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The measurement above can fail: a budget that reserves one copy of each response
    (forgetting the frame and the record sets copied out of it) is caught."""
    topic = await kafka_topic(partitions=PARTITIONS)
    empty = await kafka_topic(partitions=PARTITIONS)
    await _produce(bootstrap_servers, topic)
    monkeypatch.setattr(planning.MemoryBudget, "learn", lambda self, *_: None)
    real_init = planning.MemoryBudget.__init__

    def one_copy(self: planning.MemoryBudget, *args: Any, **kwargs: Any) -> None:
        real_init(self, *args, **kwargs)
        self.copies = 1

    monkeypatch.setattr(planning.MemoryBudget, "__init__", one_copy)
    with _traced():
        fixed, _ = await _stalled_peak(bootstrap_servers, empty, wait_full=False)
        peak, counted = await _stalled_peak(bootstrap_servers, topic, wait_full=True)
    assert peak - fixed > BOUND, (peak, fixed, counted)
