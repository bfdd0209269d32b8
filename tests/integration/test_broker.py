"""The broker fixture itself: it answers, makes topics, round-trips records, and cleans up."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import fields
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from aiogroup.testing import BrokerStartError, KafkaBroker
from aiogroup.testing.broker import broker_mode
from aiogroup.testing.caps import KAFKA_CAPS, TANSU_CAPS, BrokerCaps
from aiogroup.testing.kafka import KAFKA_VERSION
from aiogroup.testing.plugin import TopicFactory


async def test_roundtrip_10000_records(bootstrap_servers: str, kafka_topic: TopicFactory) -> None:
    topic = await kafka_topic(partitions=1)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap_servers, linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, f"value-{i}".encode(), partition=0) for i in range(10_000)
        ]
        for fut in futures:
            await fut
    finally:
        await producer.stop()

    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        seen: list[tuple[int, bytes]] = []
        while len(seen) < 10_000:
            batch = await consumer.getmany(tp, timeout_ms=2000)
            got = [(r.offset, r.value) for r in batch.get(tp, [])]
            assert got or seen, "no records arrived"
            seen.extend(got)  # type: ignore[arg-type]
    finally:
        await consumer.stop()
    assert [o for o, _ in seen] == list(range(10_000))
    assert [v for _, v in seen] == [f"value-{i}".encode() for i in range(10_000)]


async def test_broker_process_is_gone_after_stop() -> None:
    broker = KafkaBroker()
    await broker.start()
    pid = broker.pid
    if broker.mode in ("embedded", "kafka", "kafka-cluster"):
        assert pid is not None
        os.kill(pid, 0)  # alive while running
    topic = await broker.create_topic(partitions=3)
    assert topic.startswith("topic-")
    await broker.stop()
    if pid is not None:
        # The process is reaped by stop(); signalling it must fail.
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            pass
        else:
            raise AssertionError(f"broker pid {pid} still alive after stop()")


async def test_start_failure_names_the_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    mp = monkeypatch
    mp.setenv("AIOGROUP_TANSU", "/nonexistent/tansu")
    mp.delenv("AIOGROUP_BOOTSTRAP", raising=False)
    mp.delenv("AIOGROUP_BROKER", raising=False)
    with pytest.raises(BrokerStartError, match="embedded mode: Tansu binary missing"):
        await KafkaBroker().start()


# -- Apache Kafka mode: what a failed start names --------------------------------------


async def test_kafka_mode_without_jars_says_run_make_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AIOGROUP_BOOTSTRAP", raising=False)
    monkeypatch.setenv("AIOGROUP_BROKER", "kafka")
    monkeypatch.setenv("AIOGROUP_KAFKA_LIBS", "/nonexistent/libs")
    with pytest.raises(BrokerStartError, match=r"jars not fetched .*run `make install`"):
        await KafkaBroker().start()


async def test_kafka_mode_without_java_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIOGROUP_BOOTSTRAP", raising=False)
    monkeypatch.setenv("AIOGROUP_BROKER", "kafka")
    monkeypatch.setenv("JAVA_HOME", "/nonexistent/jdk")
    with pytest.raises(BrokerStartError, match="no Java on this machine"):
        await KafkaBroker().start()


def test_unknown_broker_mode_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIOGROUP_BOOTSTRAP", raising=False)
    monkeypatch.setenv("AIOGROUP_BROKER", "kafak")
    with pytest.raises(BrokerStartError, match="'kafak' is not a broker mode"):
        broker_mode()


def test_pinned_kafka_version_is_the_one_maven_fetches() -> None:
    pom = (Path(__file__).parents[2] / "maven" / "pom.xml").read_text()
    found = re.search(r"<kafka.version>(.+)</kafka.version>", pom)
    assert found is not None and found.group(1) == KAFKA_VERSION


def test_caps_name_every_tansu_gap() -> None:
    """Tansu departs from Kafka on every flag (each was met by a test); Kafka is the default."""
    assert KAFKA_CAPS == BrokerCaps()
    for flag in fields(BrokerCaps):
        assert getattr(TANSU_CAPS, flag.name) != getattr(KAFKA_CAPS, flag.name), flag.name


# -- hygiene: the broker dies with the process that started it ----------------------------


def _start_manual_broker() -> tuple[subprocess.Popen[str], int]:
    """``python -m aiogroup.testing`` in the current mode; returns it and the broker pid."""
    proc = subprocess.Popen(
        [sys.executable, "-W", "error::RuntimeWarning", "-m", "aiogroup.testing"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the broker answers (or the module fails)
    found = re.search(r"\(pid (\d+),", line)
    if found is None:
        proc.kill()
        raise AssertionError(f"no broker line: {line!r} {proc.communicate()[1]!r}")
    return proc, int(found.group(1))


def _gone_within(pid: int, seconds: float) -> bool:
    """Whether ``pid`` disappears (or is a zombie) within ``seconds``: no event exists
    for another process's death, so poll /proc at a bounded interval."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except FileNotFoundError:
            return True
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return True
        time.sleep(0.1)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_broker_dies_with_its_parent(signum: int, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.environ.get("AIOGROUP_BOOTSTRAP"):
        monkeypatch.delenv("AIOGROUP_BOOTSTRAP")
    if broker_mode() == "docker":
        pytest.skip("docker mode: the container is the engine's, not our child")
    proc, broker_pid = _start_manual_broker()
    try:
        os.kill(broker_pid, 0)
        proc.send_signal(signum)
        proc.wait(timeout=30)
        assert _gone_within(broker_pid, 15), f"broker {broker_pid} outlived its parent"
        if signum == signal.SIGTERM:
            assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            assert "RuntimeWarning" not in proc.stderr.read()
