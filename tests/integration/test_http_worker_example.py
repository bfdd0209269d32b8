"""examples/http_worker.py for real: its service under uvicorn, the worker as a process.

Judged from outside: the service says which records it stored and in what order per
key, the broker says what the group committed.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys

import httpx
from aiokafka import AIOKafkaProducer
from test_examples import (
    EXAMPLES,
    WAIT,
    committed,
    env,
    free_port,
    members,
    read_until,
)

from aiogroup import TopicPartition
from aiogroup.testing.plugin import TopicFactory

RECORDS = 300
PARTITIONS = 3
KEYS = 20


async def produce_keyed(bootstrap: str, topic: str) -> dict[int, int]:
    """RECORDS records over KEYS keys (the default partitioner keeps a key on one
    partition); returns each partition's end offset."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        sent = [
            await producer.send(topic, f"v{i}".encode(), key=f"k{i % KEYS}".encode())
            for i in range(RECORDS)
        ]
        metas = await asyncio.gather(*sent)
    finally:
        await producer.stop()
    ends: dict[int, int] = {}
    for m in metas:
        ends[m.partition] = max(ends.get(m.partition, 0), m.offset + 1)
    return ends


async def test_http_worker_calls_the_service_once_per_record_in_key_order(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    topic = await kafka_topic(partitions=PARTITIONS)
    ends = await produce_keyed(bootstrap_servers, topic)
    port = free_port()
    service_env = {**env(bootstrap_servers, topic, group_id), "SERVICE_FAIL_FIRST": "5"}
    service = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "uvicorn",
        "http_worker:service",
        "--app-dir",
        str(EXAMPLES),
        "--port",
        str(port),
        env=service_env,
        stderr=asyncio.subprocess.PIPE,
    )
    worker_env = {
        **env(bootstrap_servers, topic, group_id),
        "SERVICE_URL": f"http://127.0.0.1:{port}",
        "CONCURRENCY": "50",
    }
    worker: asyncio.subprocess.Process | None = None
    assert service.stderr is not None
    log: list[str] = []
    lines: list[str] = []
    try:
        started = lambda s: any("startup complete" in x for x in s)  # noqa: E731
        await asyncio.wait_for(read_until(service.stderr, started, log), WAIT)
        worker = await asyncio.create_subprocess_exec(
            sys.executable,
            str(EXAMPLES / "http_worker.py"),
            env=worker_env,
            stdout=asyncio.subprocess.PIPE,
        )
        assert worker.stdout is not None
        await asyncio.wait_for(read_until(worker.stdout, lambda s: "ready" in s, lines), WAIT)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:

            async def seen() -> dict[str, object]:
                doc: dict[str, object] = (await http.get("/seen")).json()
                return doc

            async def all_stored() -> dict[str, object]:
                while True:  # polling the service: it has no event to await
                    doc = await seen()
                    if len(doc["records"]) >= RECORDS:  # type: ignore[arg-type]
                        return doc
                    await asyncio.sleep(0.2)

            await asyncio.wait_for(all_stored(), WAIT)
            worker.send_signal(signal.SIGTERM)
            await asyncio.wait_for(read_until(worker.stdout, lambda s: "stopped" in s, lines), WAIT)
            assert await asyncio.wait_for(worker.wait(), WAIT) == 0
            doc = await seen()
    finally:
        for proc in (worker, service):
            if proc is not None and proc.returncode is None:
                proc.kill()
                await proc.wait()
    # Every record stored exactly once: one worker, no crash, no rebalance.
    records = doc["records"]
    assert isinstance(records, list)
    expected = sorted([topic, p, o] for p, end in ends.items() for o in range(end))
    assert sorted(r[:3] for r in records) == expected
    assert {r[3] for r in records} == {1}
    # The first 5 calls were answered 503 and retried: more calls than records.
    assert doc["calls"] == RECORDS + 5
    # Records of one key reached the service in offset order (key ordering).
    by_key = doc["by_key"]
    assert isinstance(by_key, dict) and len(by_key) == KEYS
    for key, offsets in by_key.items():
        assert offsets == sorted(offsets), key
    # The worker committed every partition's end on stop, and left the group.
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    assert await committed(bootstrap_servers, group_id, tps) == {
        p: ends.get(p) for p in range(PARTITIONS)
    }
    assert await members(bootstrap_servers, group_id) == []
    metrics = json.loads(next(line for line in lines if line.startswith("metrics "))[8:])
    assert (metrics["finished"], metrics["in_flight"]) == (RECORDS, 0), metrics
