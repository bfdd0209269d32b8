"""A newcomer's first run (issue 31): the README's broker line, then its quickstart.

``python -m aiogroup.testing --port P`` listens on P and prints the ``export
AIOGROUP_BOOTSTRAP=...`` line the quickstart reads; ``examples/quickstart.py`` (the
README's code) consumes and commits, and Ctrl-C or SIGTERM ends it with exit code 0,
no traceback, the offsets committed and the group left.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from aiogroup import GroupConsumer, TopicPartition
from aiogroup.testing.broker import unique_name
from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        for i in range(count):
            await producer.send(topic, f"r{i}".encode(), partition=i % partitions)
        await producer.flush()
    finally:
        await producer.stop()


async def lines_until(stream: asyncio.StreamReader, want: str, seen: list[str]) -> str:
    while True:
        raw = await asyncio.wait_for(stream.readline(), WAIT)
        if not raw:
            raise AssertionError(f"output ended before {want!r}; saw {seen[-8:]}")
        line = raw.decode().strip()
        seen.append(line)
        if want in line:
            return line


def child_env(**extra: str) -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("AIOGROUP_BROKER", "AIOGROUP_BOOTSTRAP")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env.update(extra)
    return env


async def test_test_broker_on_a_chosen_port_prints_the_export_line() -> None:
    """The embedded broker (whatever tier runs the tests: this starts its own)."""
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiogroup.testing",
        "--port",
        str(port),
        "--topic",
        "orders",
        "--partitions",
        "2",
        env=child_env(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    seen: list[str] = []
    try:
        line = await lines_until(proc.stdout, "export AIOGROUP_BOOTSTRAP=", seen)
        assert line == f"export AIOGROUP_BOOTSTRAP=127.0.0.1:{port}", seen
        bootstrap = line.split("=", 1)[1]
        await produce(bootstrap, "orders", 4, 2)  # the topic it created, on that port
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), WAIT) == 0
        assert b"Traceback" not in await proc.stderr.read()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_port_is_refused_where_the_broker_picks_its_own() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiogroup.testing",
        "--port",
        "9092",
        env=child_env(AIOGROUP_BROKER="kafka"),
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), WAIT)
    assert proc.returncode == 2
    assert b"--port works with the embedded broker only" in err


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
async def test_quickstart_consumes_commits_and_stops_cleanly(
    bootstrap_servers: str, kafka_topic: TopicFactory, sig: signal.Signals
) -> None:
    topic = await kafka_topic(partitions=2)
    group = unique_name("quickstart")
    await produce(bootstrap_servers, topic, 10, 2)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "examples" / "quickstart.py"),
        env=child_env(AIOGROUP_BOOTSTRAP=bootstrap_servers, TOPIC=topic, GROUP_ID=group),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    seen: list[str] = []
    try:
        while sum(line.startswith(topic) for line in seen) < 10:
            await lines_until(proc.stdout, topic, seen)
        proc.send_signal(sig)
        await lines_until(proc.stdout, "stopped", seen)
        assert await asyncio.wait_for(proc.wait(), WAIT) == 0
        err = (await proc.stderr.read()).decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert "Traceback" not in err, err
    async with GroupConsumer(bootstrap_servers=bootstrap_servers, group_id=group) as check:
        committed = {p: await check.committed(TopicPartition(topic, p)) for p in range(2)}
    assert committed == {0: 5, 1: 5}
