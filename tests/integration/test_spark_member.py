"""The source's group member leaves the group when its process gets SIGTERM.

The member in the subprocess has a 30 s session: if it did not send LeaveGroup on
SIGTERM, the group would not start rebalancing - and the other member would not see
its partitions revoked - before that session expired, which is longer than this test
waits for the revocation.  (The rebalance itself may then take a while: the test
broker holds JoinGroup for about half the longest session in the group.)
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap

import pyspark  # noqa: F401  (the spark extra: a missing install fails here)
import pytest

from aiogroup.consumer import GroupConsumer
from aiogroup.listeners import AsyncConsumerRebalanceListener
from aiogroup.structs import TopicPartition
from aiogroup.testing.plugin import TopicFactory

pytestmark = [pytest.mark.integration, pytest.mark.spark]

MEMBER_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from aiogroup.spark.member import SourceMember
    from aiogroup.spark.options import parse_options

    options = parse_options({
        "kafka.bootstrap.servers": sys.argv[1], "kafka.group.id": sys.argv[2],
        "subscribe": sys.argv[3], "kafka.session.timeout.ms": "30000",
        "kafka.heartbeat.interval.ms": "1000",
        # Eager, as the test's own member: a revocation of everything is the sign
        # that the group started rebalancing (the source's default is cooperative).
        "kafka.partition.assignment.strategy": "range",
    })
    member = SourceMember(options)
    member.start()
    member.call(member.wait_assigned(), 60, "assignment")
    print("assigned", sorted(tp.partition for tp in member.owned()), flush=True)
    while True:
        time.sleep(1)
    """
)


class Recorder(AsyncConsumerRebalanceListener):
    def __init__(self) -> None:
        self.owned: set[TopicPartition] = set()
        self.changed = asyncio.Event()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.owned |= assigned
        self.changed.set()

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.owned -= revoked
        self.changed.set()


async def wait_owned(
    recorder: Recorder, consumer: GroupConsumer, want: int, timeout: float
) -> None:
    async def loop() -> None:
        while len(recorder.owned) != want:
            recorder.changed.clear()
            # Polling keeps the member alive and lets the coordinator run listeners.
            poll = asyncio.ensure_future(consumer.getmany(timeout_ms=500))
            await asyncio.wait([poll, asyncio.ensure_future(recorder.changed.wait())])
            await poll

    await asyncio.wait_for(loop(), timeout)


async def test_sigterm_makes_the_member_leave_the_group(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    topic = await kafka_topic(partitions=4)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        MEMBER_SCRIPT,
        bootstrap_servers,
        group_id,
        topic,
        stdout=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line.startswith(b"assigned [0, 1, 2, 3]"), line

        recorder = Recorder()
        consumer = GroupConsumer(
            topic,
            bootstrap_servers=bootstrap_servers,
            group_id=group_id,
            listener=recorder,
            session_timeout_ms=6000,
            heartbeat_interval_ms=1000,
            enable_auto_commit=False,
        )
        await consumer.start()
        try:
            await wait_owned(recorder, consumer, 2, 60)
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), 20) == -signal.SIGTERM
            # The eager rebalance LeaveGroup started revokes everything first ...
            await wait_owned(recorder, consumer, 0, 20)
            # ... then hands all four partitions to the remaining member.
            await wait_owned(recorder, consumer, 4, 90)
        finally:
            await consumer.stop()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
