"""The examples run for real: the worker as a process, the FastAPI service under uvicorn."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from aiogroup import GroupConsumer, TopicPartition
from aiogroup.testing.plugin import TopicFactory

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WAIT = 60


async def produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        for i in range(count):
            await producer.send(topic, f"r{i}".encode(), partition=i % partitions)
        await producer.flush()
    finally:
        await producer.stop()


async def committed(bootstrap: str, group: str, tps: list[TopicPartition]) -> dict[int, int | None]:
    async with GroupConsumer(bootstrap_servers=bootstrap, group_id=group) as check:
        check.assign(tps)
        return {tp.partition: await check.committed(tp) for tp in tps}


async def members(bootstrap: str, group: str) -> list[object]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (resp,) = await admin.describe_consumer_groups([group])
        (g,) = resp.to_object()["groups"]
        return list(g["members"])
    finally:
        await admin.close()


def env(bootstrap: str, topic: str, group: str) -> dict[str, str]:
    return {
        **os.environ,
        "KAFKA_BOOTSTRAP": bootstrap,
        "TOPIC": topic,
        "GROUP_ID": group,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")]),
    }


async def read_until(stream: asyncio.StreamReader, predicate: object, seen: list[str]) -> None:
    assert callable(predicate)
    while not predicate(seen):
        line = await stream.readline()
        if not line:
            raise AssertionError(f"process output ended; saw {seen[-5:]}")
        seen.append(line.decode().strip())


async def test_worker_processes_commits_and_stops_on_sigterm(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    topic = await kafka_topic(partitions=2)
    await produce(bootstrap_servers, topic, 40, 2)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLES / "worker.py"),
        env=env(bootstrap_servers, topic, group_id),
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        done = lambda seen: sum(s.startswith("processed") for s in seen) >= 40  # noqa: E731
        await asyncio.wait_for(read_until(proc.stdout, done, lines), WAIT)
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(read_until(proc.stdout, lambda s: "stopped" in s, lines), WAIT)
        assert await asyncio.wait_for(proc.wait(), WAIT) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    offsets = sorted(tuple(map(int, s.split()[2:])) for s in lines if s.startswith("processed"))
    assert offsets == sorted((p, o) for p in range(2) for o in range(20))
    tps = [TopicPartition(topic, p) for p in range(2)]
    assert await committed(bootstrap_servers, group_id, tps) == {0: 20, 1: 20}
    assert await members(bootstrap_servers, group_id) == []  # it left; no session wait


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_fastapi_service_under_uvicorn(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    import httpx
    import uvicorn  # noqa: F401

    topic = await kafka_topic(partitions=2)
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "uvicorn",
        "fastapi_service:app",
        "--app-dir",
        str(EXAMPLES),
        "--port",
        str(port),
        env=env(bootstrap_servers, topic, group_id),
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stderr is not None
    log: list[str] = []
    try:
        # uvicorn says so when the lifespan startup (consumer joined) has finished.
        await asyncio.wait_for(
            read_until(proc.stderr, lambda s: any("startup complete" in x for x in s), log),
            WAIT,
        )
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            health = await http.get("/health")
            assert health.status_code == 200, health.text
            assert health.json()["joined"] is True
            assert (await http.get("/live")).status_code == 200
            await produce(bootstrap_servers, topic, 30, 2)

            async def processed_all() -> None:
                while True:  # polling an HTTP endpoint: there is no event to await
                    if (await http.get("/processed")).json()["count"] >= 30:
                        return
                    await asyncio.sleep(0.2)

            await asyncio.wait_for(processed_all(), WAIT)
            text = (await http.get("/metrics")).text
            labels = f'client_id="aiogroup",group_id="{group_id}"'
            assert f"aiogroup_consumer_records_total{{{labels}}} 30.0" in text
        proc.send_signal(signal.SIGTERM)
        shutdown = lambda s: any("Application shutdown complete" in x for x in s)  # noqa: E731
        await asyncio.wait_for(read_until(proc.stderr, shutdown, log), WAIT)
        # uvicorn re-raises the signal after its graceful shutdown.
        assert await asyncio.wait_for(proc.wait(), WAIT) in (0, -signal.SIGTERM)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert not [line for line in log if "Traceback" in line or "ERROR" in line], log
    tps = [TopicPartition(topic, p) for p in range(2)]
    assert await committed(bootstrap_servers, group_id, tps) == {0: 15, 1: 15}
    assert await members(bootstrap_servers, group_id) == []
