"""Both record paths against the real broker: the native module's and the pure one's.

The same topic - records of every codec, with and without keys, values and headers,
and (where the broker has transactions) a committed, an aborted and another
committed transaction - read by a consumer with the native module and by one with
``AIOGROUP_NATIVE=0``, in whole fetches, with ``max_records`` cutting batches and
with ``async for``: the records must be equal, field for field, and be exactly what
was produced, and the metrics must count exactly their key + value bytes.
"""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from aiogroup import GroupConsumer
from aiogroup._fetch.native import native_records
from aiogroup._support.frame_reader import FrameReader
from aiogroup.structs import ConsumerRecord, TopicPartition
from aiogroup.testing import KafkaBroker
from aiogroup.testing.broker import unique_name
from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


async def produce_mixed(bootstrap: str, topic: str, transactions: bool) -> list[tuple[Any, ...]]:
    """Every codec's batch, then the transactions; returns what a read_committed reader sees."""
    expected: list[tuple[Any, ...]] = []
    for codec in CODECS:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type=codec)
        await producer.start()
        try:
            batch = producer.create_batch()
            for i in range(30):
                key = None if i % 3 == 0 else f"k{i}".encode()
                value = None if i % 7 == 6 else f"{codec}-{i}".encode() * (i % 4)
                headers = [("h", b"x"), ("n", None)] if i % 5 == 0 else []
                ts = 1_700_000_000_000 + i
                batch.append(key=key, value=value, timestamp=ts, headers=headers)
                expected.append((key, value, tuple(headers)))
            await (await producer.send_batch(batch, topic, partition=0))
        finally:
            await producer.stop()
    if transactions:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique_name("tx"))
        await producer.start()
        try:
            for prefix, commit in ((b"c", True), (b"a", False), (b"d", True)):
                await producer.begin_transaction()
                for i in range(5):
                    await producer.send(topic, prefix + b"%d" % i, partition=0)
                if commit:
                    await producer.commit_transaction()
                    expected += [(None, prefix + b"%d" % i, ()) for i in range(5)]
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()
    return expected


async def read_all(
    bootstrap: str, tp: TopicPartition, count: int, max_records: int | str | None
) -> list[ConsumerRecord[Any, Any]]:
    """Read ``count`` records with getmany(max_records), or ``async for`` ("async-for").

    The metrics' delivered count must be exactly what was read: the records, and their
    key + value bytes (counted as the records were built, not read back from them).
    """
    consumer = GroupConsumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        max_poll_records=11,  # async for's refills cut batches too
    )
    await consumer.start()
    got: list[ConsumerRecord[Any, Any]] = []
    try:
        consumer.assign([tp])
        async with asyncio.timeout(60):
            if max_records == "async-for":
                async for record in consumer:
                    got.append(record)
                    if len(got) >= count:
                        break
            else:
                assert not isinstance(max_records, str)
                while len(got) < count:
                    batches = await consumer.getmany(timeout_ms=1000, max_records=max_records)
                    got += batches.get(tp, [])
        snap = consumer.metrics()
        assert snap.records_consumed == len(got)
        assert snap.bytes_consumed == sum(len(r.key or b"") + len(r.value or b"") for r in got)
        assert await consumer.getmany(timeout_ms=200) == {}  # nothing more to read
    finally:
        await consumer.stop()
    return got


async def test_both_record_paths_read_the_same_records(
    bootstrap_servers: str,
    kafka_topic: TopicFactory,
    kafka_broker: KafkaBroker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if shutil.which("cargo") is not None:  # make install built the module: it is used
        assert native_records() is not None
    topic = await kafka_topic(partitions=1)
    tp = TopicPartition(topic, 0)
    expected = await produce_mixed(
        bootstrap_servers, topic, kafka_broker.caps.supports_transactions
    )
    reads: dict[tuple[str, int | str | None], list[ConsumerRecord[Any, Any]]] = {}
    for native in ("1", "0"):
        monkeypatch.setenv("AIOGROUP_NATIVE", native)
        for max_records in (None, 7, "async-for"):
            reads[native, max_records] = await read_all(
                bootstrap_servers, tp, len(expected), max_records
            )
    reference = reads["0", None]
    assert [(r.key, r.value, tuple(r.headers)) for r in reference] == expected
    assert [r.offset for r in reference] == sorted({r.offset for r in reference})
    for got in reads.values():
        assert got == reference
        assert all(type(r) is ConsumerRecord and type(r.headers) is tuple for r in got)


async def test_large_responses_are_read_through_the_frame_reader(
    bootstrap_servers: str, kafka_topic: TopicFactory
) -> None:
    """Fetch responses of hundreds of KiB, gathered by ``FrameReader``: every byte intact."""
    topic = await kafka_topic(partitions=2)
    values = {p: [bytes([p * 50 + i % 50]) * 1024 + b"%d" % i for i in range(400)] for p in (0, 1)}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=50)
    await producer.start()
    try:
        for p, vals in values.items():
            for v in vals:
                await producer.send(topic, v, partition=p)
        await producer.flush()
    finally:
        await producer.stop()
    consumer = GroupConsumer(bootstrap_servers=bootstrap_servers, auto_offset_reset="earliest")
    await consumer.start()
    got: dict[int, list[bytes]] = {0: [], 1: []}
    try:
        consumer.assign([TopicPartition(topic, p) for p in (0, 1)])
        async with asyncio.timeout(60):
            while sum(map(len, got.values())) < 800:
                for tp, records in (await consumer.getmany(timeout_ms=1000)).items():
                    got[tp.partition] += [r.value for r in records]
        conns = consumer._client._conns  # type: ignore[union-attr]
        readers = {type(c._reader) for c in conns.values() if c.connected()}
    finally:
        await consumer.stop()
    assert got == values
    assert FrameReader in readers  # the fetch connection reads large frames in one copy
