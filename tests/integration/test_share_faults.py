"""Share consumers that die, freeze, join or leave while holding records, judged by the
share checker.

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
from aiokafka import AIOKafkaProducer

from aiogroup import ShareConsumer
from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.plugin import TopicFactory
from aiogroup.testing.process import sigstop
from aiogroup.testing.share_checker import ShareRecorder, check_share_history, load_share_history
from aiogroup.testing.share_observer import ShareGroupObserver
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
    bootstrap: str, topic: str, group: str, history: Path, name: str, *extra: str
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("share_member.py")),
        bootstrap,
        topic,
        group,
        str(history),
        name,
        *extra,
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
        await sigstop(proc.pid)  # stamped once stopped: its last acquisitions precede it
        recorder.add("frozen", "frozen")
        async with consumer(bootstrap, group, topic, recorder=recorder, recorder_name="other") as c:
            again = await collect(c, 5)
            assert sorted((r.offset, r.delivery_count) for r in again) == [(o, 2) for o in range(5)]
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


async def group_session_is(bootstrap: str, group: str, ms: int) -> None:
    """Until the brokers report the group's share session as ``ms`` (a group config
    takes a moment to reach them; measured: up to about 3 s on Kafka 4.4)."""
    from aiokafka.client import AIOKafkaClient

    from aiogroup._protocol.group_configs import (
        parse_share_session_timeout,
        share_session_timeout_request,
    )

    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while True:
            node = client.get_random_node()
            resp = await client.send(node, share_session_timeout_request(group, node))
            if parse_share_session_timeout(resp) == ms:
                return
            assert loop.time() < deadline, "the group's session config never arrived"
            await asyncio.sleep(0.2)
    finally:
        await client.close()


async def test_a_member_frozen_past_its_session_hands_out_nothing_it_held_when_it_wakes(
    share_broker: KafkaBroker, kafka_topic: TopicFactory, tmp_path: Path
) -> None:
    """SIGSTOP past the session (3 s), woken before the lock (6 s) ends: the broker has
    dropped the member from the group, while its buffer still holds records whose locks,
    as far as it knows, run on.  Awake, it hands none of those deliveries out: the
    delivery gate (last heartbeat answered + session) is closed until a heartbeat
    answers, and that answer (fenced) drops them.  They come back after the lock, with
    delivery count 2.  Measured on Kafka 4.4: a fenced member whose connections stay
    keeps its records locked until the lock ends (they are not handed on at the fence)."""
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(
        bootstrap, group, lock_ms=6_000, session_ms=3_000, heartbeat_ms=1_000
    )
    await group_session_is(bootstrap, group, 3_000)
    history = tmp_path / "history.jsonl"
    recorder = ShareRecorder(history)
    await produce(bootstrap, topic, 5, recorder)
    observer = await ShareGroupObserver(bootstrap, group, recorder).start()
    proc = await start_member(bootstrap, topic, group, history, "sleeper", "0.3", "5")
    assert proc.stdout is not None
    try:
        first = await proc.stdout.readline()  # one handed out; four wait in its buffer
        assert first.split()[2] == b"1", first
        await sigstop(proc.pid)
        recorder.add("sleeper", "frozen")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while not any(e.kind == "gone" and e.consumer == "sleeper" for e in recorder.events()):
            assert loop.time() < deadline, "the broker never dropped the frozen member"
            await asyncio.sleep(0.1)  # the observer samples ShareGroupDescribe
        os.kill(proc.pid, signal.SIGCONT)
        recorder.add("sleeper", "woke")
        # Everything it hands out from now on is a new delivery (count 2, after the lock).
        again: set[int] = set()
        while len(again) < 5:
            line = await asyncio.wait_for(proc.stdout.readline(), WAIT)
            _, offset, count = line.split()
            assert count != b"1", f"a delivery it held while fenced was handed out: {line!r}"
            again.add(int(offset))
    finally:
        proc.kill()  # kill -9; another consumer settles the records
        await proc.wait()
        await observer.stop()
    recorder.add("sleeper", "crashed")
    async with consumer(bootstrap, group, topic, recorder=recorder, recorder_name="closer") as c:
        assert sorted(r.offset for r in await collect(c, 5)) == list(range(5))
        await c.commit()
    await record_broker_view(recorder, bootstrap, group)
    recorder.close()
    report = check_share_history(load_share_history(history), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()


async def test_a_consumer_joining_and_leaving_under_load(
    share_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """Two consumers read while records are produced; a third joins half-way and stops
    (releasing what it holds) a little later.  Every record is accepted once, no record
    is held by two consumers at once."""
    bootstrap = share_broker.bootstrap_servers
    topic = await kafka_topic(1)
    group = unique_name("share")
    await configure_share_group(bootstrap, group)
    recorder = ShareRecorder()
    total = 300
    accepted: list[int] = []
    by: dict[str, int] = {}
    leave = asyncio.Event()
    all_handled = asyncio.Event()

    async def work(c: ShareConsumer, name: str, stop: asyncio.Event) -> None:
        while not stop.is_set():
            for records in (await c.getmany(timeout_ms=100, max_records=5)).values():
                for r in records:
                    await asyncio.sleep(0.005)  # a 5 ms handler
                    accepted.append(r.offset)  # accepted at the next poll (implicit)
                    by[name] = by.get(name, 0) + 1
                    if len(set(accepted)) >= total:
                        all_handled.set()
        await c.commit()

    async with (
        consumer(
            bootstrap, group, topic, recorder=recorder, recorder_name="a", max_poll_records=5
        ) as a,
        consumer(
            bootstrap, group, topic, recorder=recorder, recorder_name="b", max_poll_records=5
        ) as b,
    ):
        done = asyncio.Event()
        steady = [asyncio.create_task(work(a, "a", done)), asyncio.create_task(work(b, "b", done))]
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
        await producer.start()
        try:
            offsets: list[int] = []
            for i in range(total):
                meta = await producer.send_and_wait(topic, f"v{i}".encode(), partition=0)
                offsets.append(meta.offset)
                if i == total // 3:
                    joiner = ShareConsumer(
                        topic,
                        group_id=group,
                        bootstrap_servers=bootstrap,
                        recorder=recorder,
                        recorder_name="joiner",
                        max_poll_records=5,
                    )
                    await joiner.start()
                    joining = asyncio.create_task(work(joiner, "joiner", leave))
                    # Go on once the broker has given it the partition (a few heartbeats).
                    deadline = asyncio.get_running_loop().time() + WAIT
                    while not joiner.assignment():
                        assert asyncio.get_running_loop().time() < deadline, "never assigned"
                        await asyncio.sleep(0.05)
                if i >= 2 * total // 3 and by.get("joiner") and not leave.is_set():
                    leave.set()  # it took part: now it leaves, under load
                    await joining
                    await joiner.stop()  # releases what it still holds, leaves
        finally:
            await producer.stop()
        joined_in = bool(by.get("joiner"))
        if not leave.is_set():  # it never took part: stop it all the same
            leave.set()
            await joining
            await joiner.stop()
        assert joined_in, f"the joiner handled nothing while records were produced: {by}"
        recorder.produced(topic, 0, offsets[0], offsets[-1])
        await asyncio.wait_for(all_handled.wait(), WAIT)
        done.set()
        await asyncio.gather(*steady)
    await record_broker_view(recorder, bootstrap, group)
    report = check_share_history(recorder.events(), delivery_limit=DELIVERY_LIMIT)
    report.assert_clean()
    assert {e.consumer for e in recorder.events() if e.kind == "acquired"} == {"a", "b", "joiner"}
