"""lz4 and zstd batches as librdkafka writes them, read by both record paths.

librdkafka's frames are the shapes the native fast paths exist for (lz4: independent
64 KiB blocks and no checksums; zstd: frames from a streaming compressor, without a
content size), and aiokafka's producer (``test_record_paths``) writes neither.  So a
confluent-kafka producer fills a partition with batches of thousands of records -
frames of several blocks - and a consumer with the native module and one with
``AIOGROUP_NATIVE=0`` must read exactly what was produced, field for field.
"""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

import pytest
from confluent_kafka import Producer

from aiogroup._fetch.native import native_records
from aiogroup.structs import ConsumerRecord, TopicPartition
from aiogroup.testing.plugin import TopicFactory
from tests.integration.test_record_paths import read_all

pytestmark = pytest.mark.integration

RECORDS = 3_000


def produce(bootstrap: str, topic: str, codec: str) -> list[tuple[Any, ...]]:
    """``RECORDS`` text-like 100 B values in ``codec`` batches; what was sent, in order."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": 100,
            "batch.num.messages": 100_000,
            "enable.idempotence": False,
        }
    )
    errors: list[str] = []
    expected: list[tuple[Any, ...]] = []
    for i in range(RECORDS):
        key = None if i % 3 == 0 else b"user-%05d" % (i % 977)
        value = (b'{"seq":%d,"event":"click","page":"/p/%d"}' % (i, i % 50)).ljust(100, b" ")
        headers = [("trace", b"t%d" % i)] if i % 10 == 0 else []
        producer.produce(
            topic,
            value,
            key=key,
            partition=0,
            headers=headers or None,
            on_delivery=lambda err, _msg: errors.append(str(err)) if err else None,
        )
        expected.append((key, value, tuple(headers)))
    assert producer.flush(60) == 0
    assert errors == []
    return expected


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
async def test_librdkafka_batches_read_the_same_on_both_paths(
    codec: str,
    bootstrap_servers: str,
    kafka_topic: TopicFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if shutil.which("cargo") is not None:  # make install built the module: it is used
        assert native_records() is not None
    topic = await kafka_topic(partitions=1)
    tp = TopicPartition(topic, 0)
    expected = await asyncio.to_thread(produce, bootstrap_servers, topic, codec)
    reads: dict[str, list[ConsumerRecord[Any, Any]]] = {}
    for native in ("1", "0"):
        monkeypatch.setenv("AIOGROUP_NATIVE", native)
        reads[native] = await read_all(bootstrap_servers, tp, RECORDS, None)
    assert [(r.key, r.value, tuple(r.headers)) for r in reads["0"]] == expected
    assert [r.offset for r in reads["0"]] == list(range(RECORDS))
    assert reads["1"] == reads["0"]
