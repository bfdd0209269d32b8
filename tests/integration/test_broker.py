"""The broker fixture itself: it answers, makes topics, round-trips records, and cleans up."""

from __future__ import annotations

import asyncio
import contextlib
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
from aiogroup.testing.broker import broker_mode, unique_name
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


# -- the capability flags are true statements about the broker under test --------------
#
# Each test below observes one BrokerCaps flag from outside, with a bare protocol
# client, and asserts the flag's value: on Apache Kafka the real semantics, on Tansu
# the gap the flag names.

REBALANCE_IN_PROGRESS = 27
COORDINATOR_NOT_AVAILABLE = 15
#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
COORDINATOR_MOVED = (14, 15, 16)
UNKNOWN_MEMBER_ID_CODE = 25
MEMBER_ID_REQUIRED_CODE = 79
RAW_SESSION_MS = 6000


class RawMember:
    """A classic-protocol group member driven by hand, on its own connection (Kafka
    answers one request per connection at a time, so a parked JoinGroup would block
    the heartbeats of a member sharing it)."""

    def __init__(self, bootstrap: str, group: str, topic: str, rebalance_ms: int) -> None:
        from aiokafka.client import AIOKafkaClient

        self.client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=60_000)
        self.group, self.topic, self.rebalance_ms = group, topic, rebalance_ms
        self.member_id = ""
        self.generation = -1
        self.node = -1

    async def __aenter__(self) -> RawMember:
        await self.client.bootstrap()
        await self.find()
        return self

    async def find(self) -> None:
        from aiogroup._protocol.group import FindCoordinatorRequest, parse_find_coordinator

        for _ in range(100):  # Kafka creates __consumer_offsets on the first lookup
            found = parse_find_coordinator(
                await self.client.send(
                    self.client.get_random_node(), FindCoordinatorRequest(self.group)
                )
            )
            if found.error_code != COORDINATOR_NOT_AVAILABLE:
                break
            await asyncio.sleep(0.2)  # the client's retry backoff
        assert found.error_code == 0, found
        self.node = found.node_id

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()

    async def join(self) -> tuple[int, list[str]]:
        """JoinGroup (again after MEMBER_ID_REQUIRED); returns (error, member ids)."""
        from aiokafka.protocol.group import ProtocolMetadata

        from aiogroup._protocol.group import JoinGroupRequest, parse_join_group

        metadata = ProtocolMetadata(0, [self.topic], b"").encode()
        for _ in range(100):
            request = JoinGroupRequest(
                group_id=self.group,
                session_timeout_ms=RAW_SESSION_MS,
                rebalance_timeout_ms=self.rebalance_ms,
                member_id=self.member_id,
                group_instance_id=None,
                protocol_type="consumer",
                protocols=[("range", metadata)],
                reason="aiogroup broker-caps test",
            )
            joined = parse_join_group(await self.client.send(self.node, request))
            if joined.error_code == MEMBER_ID_REQUIRED_CODE:
                self.member_id = joined.member_id
                continue
            if joined.error_code in COORDINATOR_MOVED:  # still settling after creation
                await asyncio.sleep(0.2)
                await self.find()
                continue
            if joined.error_code == 0:
                self.member_id, self.generation = joined.member_id, joined.generation_id
            return joined.error_code, sorted(m.member_id for m in joined.members)
        raise AssertionError(f"{self.group}: no coordinator settled")

    async def sync(self) -> int:
        """SyncGroup; the leader (every test's first member) assigns itself everything."""
        from aiokafka.protocol.group import MemberAssignment

        from aiogroup._protocol.group import SyncGroupRequest, parse_sync_group

        mine = MemberAssignment(0, [(self.topic, [0, 1])], b"").encode()

        request = SyncGroupRequest(
            group_id=self.group,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=None,
            protocol_type="consumer",
            protocol_name="range",
            assignments=[(self.member_id, mine)],
        )
        return parse_sync_group(await self.client.send(self.node, request)).error_code

    async def heartbeat(self) -> int:
        from aiogroup._protocol.group import HeartbeatRequest, parse_heartbeat

        request = HeartbeatRequest(self.group, self.generation, self.member_id, None)
        return parse_heartbeat(await self.client.send(self.node, request)).error_code


async def _formed(member: RawMember) -> None:
    """Join and sync alone; rejoin when the sync says a rebalance started (as clients do)."""
    for _ in range(5):
        error, members = await member.join()
        assert (error, members) == (0, [member.member_id])
        synced = await member.sync()
        if synced != REBALANCE_IN_PROGRESS:
            assert synced == 0
            return
    raise AssertionError("the group never settled on one member")


async def test_caps_rebalance_timeout_keeps_a_member_that_rejoins_late_but_within_it(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """``honours_rebalance_timeout``: X heartbeats through a rebalance for 1.5 session
    timeouts, then rejoins - still within its 20 s rebalance timeout.  Kafka keeps it."""
    topic = await kafka_topic(partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    async with (
        RawMember(bootstrap, group_id, topic, 20_000) as x,
        RawMember(bootstrap, group_id, topic, 20_000) as y,
    ):
        await _formed(x)
        y_join = asyncio.ensure_future(y.join())
        try:
            beats: list[int] = []
            for _ in range(int(1.5 * RAW_SESSION_MS / 1000)):
                beats.append(await x.heartbeat())
                await asyncio.sleep(1)  # the member's heartbeat interval, not a wait
            x_error, x_members = await x.join()
            y_error, _ = await asyncio.wait_for(y_join, 60)
        finally:
            y_join.cancel()
    assert REBALANCE_IN_PROGRESS in beats, beats
    # x led the group before, so it leads again and its answer lists the members.
    kept = x_error == 0 and x_members == sorted([x.member_id, y.member_id])
    assert kept == kafka_broker.caps.honours_rebalance_timeout, (beats, x_error, x_members)
    assert y_error == 0


async def test_caps_rebalance_timeout_removes_a_member_that_never_rejoins(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """``honours_rebalance_timeout``: X keeps heartbeating but never rejoins.  Kafka
    completes the rebalance without it at its 8 s rebalance timeout (its session never
    expired) and its next heartbeat is UNKNOWN_MEMBER_ID."""
    topic = await kafka_topic(partitions=2)
    bootstrap = kafka_broker.bootstrap_servers
    async with (
        RawMember(bootstrap, group_id, topic, 8_000) as x,
        RawMember(bootstrap, group_id, topic, 8_000) as y,
    ):
        await _formed(x)
        y_join = asyncio.ensure_future(y.join())
        try:
            beats: list[int] = []
            while not y_join.done() and len(beats) < 60:
                beats.append(await x.heartbeat())
                await asyncio.wait({y_join}, timeout=1)  # heartbeat interval, or y's answer
            y_error, y_members = await asyncio.wait_for(y_join, 5)
        finally:
            y_join.cancel()
        after = await x.heartbeat()
    assert y_error == 0, beats
    if kafka_broker.caps.honours_rebalance_timeout:
        # Removed by the rebalance timeout: its heartbeats were answered all along, and
        # y leads a group of one.
        assert set(beats) <= {0, REBALANCE_IN_PROGRESS}, beats
        assert y_members == [y.member_id], beats
        assert after == UNKNOWN_MEMBER_ID_CODE, beats
    # Tansu completes y's join after about half a session with x still in the group
    # (x leads it, so y sees no member list), whatever the rebalance timeout says.


async def test_caps_list_offsets_latest(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """``list_offsets_latest_is_log_end``: one batch of three records, latest is 3."""
    topic = await kafka_topic(partitions=1)
    tp = TopicPartition(topic, 0)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers, linger_ms=500)
    await producer.start()
    try:
        sent = [await producer.send(topic, b"r%d" % i, partition=0) for i in range(3)]
        offsets = [(await fut).offset for fut in sent]
    finally:
        await producer.stop()
    assert offsets == [0, 1, 2]
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_broker.bootstrap_servers)
    await consumer.start()
    try:
        latest = (await consumer.end_offsets([tp]))[tp]
    finally:
        await consumer.stop()
    # Tansu answers short of the log end (here 1: the last batch's base offset + 1).
    assert (latest == 3) == kafka_broker.caps.list_offsets_latest_is_log_end, latest


async def test_caps_transactions(kafka_broker: KafkaBroker, kafka_topic: TopicFactory) -> None:
    """``supports_transactions``: a transactional producer commits one transaction."""
    topic = await kafka_topic(partitions=1)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        transactional_id=unique_name("tx"),
        request_timeout_ms=10_000,
    )
    try:
        await asyncio.wait_for(producer.start(), 30)
        async with producer.transaction():
            await producer.send_and_wait(topic, b"in a transaction", partition=0)
        committed = True
    except Exception:  # Tansu refuses InitProducerId for a transactional id
        committed = False
    finally:
        with contextlib.suppress(Exception):
            await producer.stop()
    assert committed == kafka_broker.caps.supports_transactions


async def _two_partitions_fetched(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, max_bytes: int, partition_max_bytes: int
) -> list[int]:
    """Two partitions of ~200 kB in batches of at most 16 kB, fetched once from offset 0
    with these limits: the bytes each partition's answer holds."""
    from aiokafka.client import AIOKafkaClient
    from aiokafka.protocol.fetch import FetchRequest

    topic = await kafka_topic(partitions=2)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_broker.bootstrap_servers, linger_ms=20, max_batch_size=16384
    )
    await producer.start()
    try:
        sent = [await producer.send(topic, b"x" * 1000, partition=i % 2) for i in range(400)]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()
    client = AIOKafkaClient(bootstrap_servers=kafka_broker.bootstrap_servers)
    await client.bootstrap()
    try:
        await client.force_metadata_update()
        leader = client.cluster.leader_for_partition(TopicPartition(topic, 0))
        assert leader == client.cluster.leader_for_partition(TopicPartition(topic, 1))
        request = FetchRequest(
            max_wait_time=500,
            min_bytes=1,
            max_bytes=max_bytes,
            isolation_level=0,
            topics=[(topic, [(0, 0, partition_max_bytes), (1, 0, partition_max_bytes)])],
        )
        response = await client.send(leader, request)
    finally:
        await client.close()
    return [len(p[-1] or b"") for _, parts in response.topics for p in parts]


async def test_caps_partition_max_bytes(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory
) -> None:
    """``honours_partition_max_bytes``: fetched with a 64 kB limit per partition (50 MB in
    all); Kafka answers at most 64 kB of each."""
    limit = 64 * 1024
    sizes = await _two_partitions_fetched(kafka_broker, kafka_topic, 50 << 20, limit)
    assert len(sizes) == 2 and all(sizes), sizes
    assert (max(sizes) <= limit) == kafka_broker.caps.honours_partition_max_bytes, sizes


async def test_caps_fetch_max_bytes(kafka_broker: KafkaBroker, kafka_topic: TopicFactory) -> None:
    """``honours_fetch_max_bytes``: fetched with 1 MB per partition but 64 kB for the
    whole response; Kafka answers at most 64 kB in all."""
    limit = 64 * 1024
    total = sum(await _two_partitions_fetched(kafka_broker, kafka_topic, limit, 1 << 20))
    assert total > 0
    assert (total <= limit) == kafka_broker.caps.honours_fetch_max_bytes, total


async def test_caps_evicted_member_id(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """``readmits_evicted_member_id``: a member whose session expired rejoins with its
    old id.  Kafka answers UNKNOWN_MEMBER_ID (it must join as a new member)."""
    from aiokafka.client import AIOKafkaClient

    from aiogroup.testing.observer import describe_group

    topic = await kafka_topic(partitions=2)
    async with RawMember(kafka_broker.bootstrap_servers, group_id, topic, RAW_SESSION_MS) as x:
        await _formed(x)
        old = x.member_id
        # No heartbeats from here: wait for the broker's view to drop x (bounded).
        observer = AIOKafkaClient(bootstrap_servers=kafka_broker.bootstrap_servers)
        await observer.bootstrap()
        try:
            deadline = time.monotonic() + 3 * RAW_SESSION_MS / 1000
            while time.monotonic() < deadline:
                if old not in {
                    m for m, _ in (await describe_group(observer, group_id)).members.values()
                }:
                    break
                await asyncio.sleep(0.5)  # DescribeGroups is polled: no event exists
        finally:
            await observer.close()
        error, _ = await x.join()
    readmitted = error == 0 and x.member_id == old
    assert readmitted == kafka_broker.caps.readmits_evicted_member_id, error
    if not readmitted:
        assert error == UNKNOWN_MEMBER_ID_CODE
