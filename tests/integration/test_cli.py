"""The ``aiogroup`` admin CLI against a real broker: in-process and as a subprocess."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from aiogroup import GroupConsumer, TopicPartition
from aiogroup.cli import run
from aiogroup.testing.broker import KafkaBroker
from aiogroup.testing.plugin import TopicFactory

GROUP_TIMEOUTS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


async def cli(bootstrap: str, *argv: str) -> tuple[int, Any]:
    out = io.StringIO()
    code = await run(["-b", bootstrap, "--json", *argv], out=out)
    text = out.getvalue()
    return code, json.loads(text) if text.strip() else None


async def produce(bootstrap: str, topic: str, per_partition: int, partitions: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        for p in range(partitions):
            for i in range(per_partition):
                await producer.send(topic, f"{p}-{i}".encode(), partition=p)
        await producer.flush()
    finally:
        await producer.stop()


async def consume_and_commit(bootstrap: str, topic: str, group: str, count: int) -> None:
    async with GroupConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **GROUP_TIMEOUTS,
    ) as consumer:
        got = 0
        while got < count:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000, max_records=1), 30)
            got += sum(len(v) for v in batch.values())
        await consumer.commit()


async def test_groups_describe_lag_and_reset(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    topic = await kafka_topic(partitions=2)
    await produce(bootstrap_servers, topic, 10, 2)
    await consume_and_commit(bootstrap_servers, topic, group_id, 1)

    code, groups = await cli(bootstrap_servers, "groups")
    assert code == 0 and group_id in {g["group"] for g in groups}

    code, lag = await cli(bootstrap_servers, "lag", group_id)
    assert code == 0
    by_part = {row["partition"]: row for row in lag}
    assert {row["high_watermark"] for row in lag} == {10}  # the producer wrote 10 each
    for row in lag:
        assert row["lag"] == 10 - row["committed"] >= 0

    # A live member: describe shows it, reset refuses.
    async with GroupConsumer(
        topic, bootstrap_servers=bootstrap_servers, group_id=group_id, **GROUP_TIMEOUTS
    ) as member:
        code, desc = await cli(bootstrap_servers, "describe", group_id)
        assert code == 0 and desc["state"] == "Stable" and desc["protocol_type"] == "consumer"
        assert [m["member_id"] for m in desc["members"]] == [member.member_id]
        code, result = await cli(bootstrap_servers, "reset", group_id, "--to-earliest")
        assert code == 1 and result is None

    before = {p: r["committed"] for p, r in by_part.items()}
    code, dry = await cli(bootstrap_servers, "reset", group_id, "--topic", topic, "--to-latest")
    assert code == 0 and dry["executed"] is False
    assert {r["partition"]: r["new"] for r in dry["partitions"]} == {0: 10, 1: 10}
    code, lag = await cli(bootstrap_servers, "lag", group_id)
    assert {r["partition"]: r["committed"] for r in lag} == before, "a dry run changes nothing"

    code, done = await cli(
        bootstrap_servers, "reset", group_id, "--topic", topic, "--to-earliest", "--execute"
    )
    assert code == 0 and done["executed"] is True
    code, lag = await cli(bootstrap_servers, "lag", group_id)
    assert {r["partition"]: r["committed"] for r in lag} == {0: 0, 1: 0}

    code, _ = await cli(bootstrap_servers, "reset", group_id, "--shift-by", "3", "--execute")
    code, lag = await cli(bootstrap_servers, "lag", group_id)
    assert {r["partition"]: (r["committed"], r["lag"]) for r in lag} == {0: (3, 7), 1: (3, 7)}

    code, _ = await cli(bootstrap_servers, "reset", group_id, "--shift-by", "100", "--execute")
    code, lag = await cli(bootstrap_servers, "lag", group_id)
    assert {r["committed"] for r in lag} == {10}, "shift is clamped to the high watermark"

    future = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    code, dry = await cli(bootstrap_servers, "reset", group_id, "--to-datetime", future)
    assert code == 0 and {r["new"] for r in dry["partitions"]} == {10}
    code, dry = await cli(
        bootstrap_servers, "reset", group_id, "--to-datetime", "2000-01-01T00:00:00Z"
    )
    assert code == 0 and {r["new"] for r in dry["partitions"]} == {0}

    # The group's own consumer then resumes from what the reset committed.
    async with GroupConsumer(
        topic, bootstrap_servers=bootstrap_servers, group_id=group_id, **GROUP_TIMEOUTS
    ) as member:
        tp = TopicPartition(topic, 0)
        assert await asyncio.wait_for(member.position(tp), 30) == 10


async def test_describe_shows_protocol_and_assignment(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """What describe can show is what DescribeGroups answers: on Tansu the protocol name,
    client id and assignment come back empty (caps.describe_groups_reports_assignment)."""
    bootstrap_servers = kafka_broker.bootstrap_servers
    topic = await kafka_topic(partitions=2)
    async with GroupConsumer(
        topic, bootstrap_servers=bootstrap_servers, group_id=group_id, **GROUP_TIMEOUTS
    ):
        code, desc = await cli(bootstrap_servers, "describe", group_id)
        assert code == 0
        reported = desc["protocol"] == "range" and sorted(desc["members"][0]["assignment"]) == [
            f"{topic}-0",
            f"{topic}-1",
        ]
        assert reported == kafka_broker.caps.describe_groups_reports_assignment, desc


async def test_lag_watch_redraws_and_bad_input_fails_cleanly(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    bootstrap_servers = kafka_broker.bootstrap_servers
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 4, 1)
    await consume_and_commit(bootstrap_servers, topic, group_id, 1)
    out = io.StringIO()
    code = await run(
        ["-b", bootstrap_servers, "lag", group_id, "--watch", "0.1", "--iterations", "2"], out=out
    )
    assert code == 0
    text = out.getvalue()
    assert text.count(f"group {group_id} at") == 2
    assert "HIGH_WATERMARK" in text
    assert (
        await run(["-b", bootstrap_servers, "reset", group_id, "--to-datetime", "yesterday"]) == 1
    )
    assert await run(["-b", bootstrap_servers, "reset", group_id]) == 2  # no --to-*
    # A group no protocol knows is an error, not "state Dead, 0 member(s)"; Tansu
    # answers it as an existing empty group (caps.describe_groups_reports_unknown_groups).
    unknown = await run(["-b", bootstrap_servers, "describe", "no-such-group-at-all"])
    assert unknown == (1 if kafka_broker.caps.describe_groups_reports_unknown_groups else 0)


async def test_console_script_and_python_m(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str
) -> None:
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 2, 1)
    await consume_and_commit(bootstrap_servers, topic, group_id, 1)
    env = {**os.environ, "AIOGROUP_BOOTSTRAP": bootstrap_servers}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiogroup",
        "--json",
        "lag",
        group_id,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, stderr.decode()
    rows = json.loads(stdout)
    assert rows == [
        {
            "topic": topic,
            "partition": 0,
            "committed": 1,
            "high_watermark": 2,
            "lag": 1,
            "finished_ahead": 0,  # a plain commit lists nothing finished ahead
            "unprocessed": 1,
        }
    ]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiogroup",
        "describe",
        group_id,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    stdout, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0
    assert f"group {group_id}: state Empty" in stdout.decode()


async def test_commit_beyond_the_high_watermark_warns_and_lag_is_never_negative(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str, caplog: Any
) -> None:
    """A commit of 10**12 on a 5-record partition is accepted by the broker; the
    consumer warns at the commit, and ``aiogroup lag`` shows 0, not -999,999,999,995."""
    topic = await kafka_topic(partitions=1)
    await produce(bootstrap_servers, topic, 5, 1)
    tp = TopicPartition(topic, 0)
    async with GroupConsumer(
        bootstrap_servers=bootstrap_servers, group_id=group_id, auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([tp])
        got = 0
        while got < 5:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
            got += sum(len(v) for v in batch.values())
        assert consumer.highwater(tp) is not None
        with caplog.at_level("WARNING", logger="aiogroup.consumer"):
            await consumer.commit({tp: 10**12})
        assert await consumer.committed(tp) == 10**12
    warned = [r.getMessage() for r in caplog.records if "beyond its high watermark" in r.message]
    assert warned and str(10**12) in warned[0] and topic in warned[0], caplog.text
    code, rows = await cli(bootstrap_servers, "lag", group_id)
    assert code == 0
    assert [(r["partition"], r["committed"], r["lag"]) for r in rows] == [(0, 10**12, 0)]


async def test_describe_and_lag_of_a_consumer_protocol_group(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """DescribeGroups answers a KIP-848 group with state Dead: describe asks
    ConsumerGroupDescribe then, and shows the member, its epoch and its partitions."""
    if not kafka_broker.caps.supports_consumer_protocol:
        pytest.skip("the consumer protocol needs a broker that speaks KIP-848")
    bootstrap = kafka_broker.bootstrap_servers
    topic = await kafka_topic(partitions=2)
    await produce(bootstrap, topic, 3, 2)
    async with GroupConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group_id,
        group_protocol="consumer",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        client_id="cli-kip848",
    ) as consumer:
        got = 0
        while got < 6:
            got += sum(len(v) for v in (await consumer.getmany(timeout_ms=1000)).values())
        await consumer.commit()
        code, desc = await cli(bootstrap, "describe", group_id)
        assert code == 0, desc
        assert (desc["state"], desc["protocol_type"]) == ("Stable", "consumer")
        (member,) = desc["members"]
        assert member["client_id"] == "cli-kip848"
        assert member["member_epoch"] >= 1
        assert sorted(member["assignment"]) == [f"{topic}-0", f"{topic}-1"]
        code, lag = await cli(bootstrap, "lag", group_id)
        assert code == 0
        assert {(r["partition"], r["committed"], r["lag"]) for r in lag} == {(0, 3, 0), (1, 3, 0)}
