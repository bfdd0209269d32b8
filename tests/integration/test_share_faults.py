"""A share consumer that dies or freezes holding records, judged by the share checker.

The member runs in its own process (``share_member.py``) so the test can kill -9 or
SIGSTOP it; its acquisitions go to a history file, the test adds ``crashed`` / ``frozen``
/ ``woke`` and the surviving consumer's events, and the broker's start offset and lag
after the run.  Apache Kafka only (``AIOGROUP_BROKER=kafka``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.plugin import TopicFactory
from aiogroup.testing.share_checker import ShareRecorder, check_share_history, load_share_history
from aiogroup.testing.share_peers import configure_share_group, record_broker_view
from tests.integration.test_share_consumer import DELIVERY_LIMIT, collect, consumer, produce

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WAIT = 30.0


@pytest.fixture
def share_broker(kafka_broker: KafkaBroker) -> KafkaBroker:
    if not kafka_broker.caps.supports_share_groups:
        pytest.skip(
            "not applicable: this broker serves no share groups (caps.supports_share_groups)"
        )
    return kafka_broker


async def start_member(
    bootstrap: str, topic: str, group: str, history: Path, name: str
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("share_member.py")),
        bootstrap,
        topic,
        group,
        str(history),
        name,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


async def held(proc: asyncio.subprocess.Process, count: int) -> list[int]:
    """The offsets the member printed, once it holds ``count`` records."""
    assert proc.stdout is not None
    offsets: list[int] = []
    while len(offsets) < count:
        line = await asyncio.wait_for(proc.stdout.readline(), WAIT)
        assert line, "the member exited"
        if line.startswith(b"acquired "):
            offsets.append(int(line.split()[1]))
    return offsets


async def test_a_killed_consumers_records_are_delivered_again(
    share_broker: KafkaBroker, kafka_topic: TopicFactory, tmp_path: Path
) -> None:
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group, lock_ms=5_000)
    history = tmp_path / "history.jsonl"
    recorder = ShareRecorder(history)
    await produce(bootstrap, topic, 10, recorder)
    proc = await start_member(bootstrap, topic, group, history, "victim")
    try:
        taken = await held(proc, 10)
    finally:
        proc.kill()  # kill -9: no release, no session close, no leave
        await proc.wait()
    recorder.add("victim", "crashed")
    assert sorted(taken) == list(range(10))
    loop = asyncio.get_running_loop()
    killed_at = loop.time()
    async with consumer(bootstrap, group, topic, recorder=recorder, recorder_name="survivor") as c:
        again = await collect(c, 10)
        # Its connections dropped: Kafka >= 4.1 ends its share session and gives the
        # records back (the lock, 5 s, is the bound).
        assert loop.time() - killed_at < WAIT
        assert sorted((r.offset, r.delivery_count) for r in again) == [(o, 2) for o in range(10)]
        await c.getmany(timeout_ms=0)
        await c.commit()
    await record_broker_view(recorder, bootstrap, group)
    recorder.close()
    report = check_share_history(load_share_history(history), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()
    assert report.crashes == 1


async def test_a_frozen_consumers_records_go_to_another_after_the_lock(
    share_broker: KafkaBroker, kafka_topic: TopicFactory, tmp_path: Path
) -> None:
    """SIGSTOP past the lock: the frozen member keeps its connections (and, for now, its
    membership), so only the lock ends its hold; the records go to another consumer."""
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group, lock_ms=2_000)
    history = tmp_path / "history.jsonl"
    recorder = ShareRecorder(history)
    await produce(bootstrap, topic, 5, recorder)
    proc = await start_member(bootstrap, topic, group, history, "frozen")
    try:
        await held(proc, 5)
        os.kill(proc.pid, signal.SIGSTOP)
        recorder.add("frozen", "frozen")
        async with consumer(bootstrap, group, topic, recorder=recorder, recorder_name="other") as c:
            again = await collect(c, 5)
            assert sorted((r.offset, r.delivery_count) for r in again) == [(o, 2) for o in range(5)]
            await c.getmany(timeout_ms=0)
            await c.commit()
        os.kill(proc.pid, signal.SIGCONT)
        recorder.add("frozen", "woke")
    finally:
        proc.kill()
        await proc.wait()
    recorder.add("frozen", "crashed")
    await record_broker_view(recorder, bootstrap, group)
    recorder.close()
    report = check_share_history(load_share_history(history), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()
    assert report.lock_expiries >= 5
