"""Racks end to end on a 3-node Apache Kafka cluster (issue 16).

Every node is its own rack (``broker.rack = rack-<node id>``) and runs Kafka's
``RackAwareReplicaSelector``, as :mod:`aiogroup.testing.kafka` configures the cluster.

- Fetch from the closest replica (KIP-392): a consumer whose ``client_rack`` is a
  follower's rack is redirected by the leader and then reads from that follower.
  Evidence from outside the fetcher's decisions: the broker each Fetch was actually
  sent to (the fetcher's ``on_fetch_sent`` hook, called as the request goes out),
  together with the records delivered, compared with what the producer had
  acknowledged.  A leader that redirects returns no records, so when every Fetch
  after the redirect went to the follower, the follower served every record.
- When that follower is SIGKILLed under acks=all production, every acknowledged
  record is still delivered, in order, and Fetches go to the leader.
- Rack-aware assignment (KIP-881): members with ``client_rack`` get the partitions
  whose replica is in their rack, read from the broker's DescribeGroups answer.

Needs Java 17+ and ``make install``'s Kafka jars; runs in the Apache Kafka cluster
tier (the marker ``kafka_cluster``), like tests/integration/test_failover.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.metadata import MetadataRequest
from aiokafka.structs import PartitionMetadata

from aiogroup import GroupConsumer, TopicPartition
from aiogroup.structs import ConsumerRecord
from aiogroup.testing.broker import unique_name
from aiogroup.testing.kafka import KafkaCluster, broker_rack
from aiogroup.testing.observer import describe_group

pytestmark = [pytest.mark.integration, pytest.mark.kafka_cluster]

#: Upper bound for one recovery: the controller fences a dead broker after
#: broker.session.timeout.ms (9 s), then the ISR shrinks and acks=all proceeds.
RECOVERY = 90.0


def _start_cluster() -> KafkaCluster:
    c = KafkaCluster(size=3)
    asyncio.run(c.start())
    return c


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    """One cluster for the tests that kill nothing (started on the main thread: a
    node's parent-death signal follows the thread that started it)."""
    c = _start_cluster()
    try:
        yield c
    finally:
        asyncio.run(c.stop())


@pytest.fixture
def fresh_cluster() -> Iterator[KafkaCluster]:
    """A cluster of its own for a test that kills a node."""
    c = _start_cluster()
    try:
        yield c
    finally:
        asyncio.run(c.stop())


async def partition_metadata(bootstrap: str, topic: str) -> dict[int, PartitionMetadata]:
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        client.add_topic(topic)
        await client.force_metadata_update()
        # aiokafka keeps replicas and ISR only in ClusterMetadata's private table.
        return dict(client.cluster._partitions.get(topic, {}))
    finally:
        await client.close()


async def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int,
    replicas: int,
    placement: dict[int, list[int]] | None = None,
) -> None:
    """Create ``topic`` (its replicas on ``placement``'s nodes if given); wait for full ISR."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        if placement is None:
            new = NewTopic(topic, partitions, replicas)
        else:
            new = NewTopic(topic, -1, -1, replica_assignments=placement)
        await admin.create_topics([new])
    finally:
        await admin.close()
    # Every broker's metadata, not just one's: KRaft brokers learn of a topic each on
    # their own, and a member bootstrapping from a broker that has not yet would
    # start without the topic (see the report of issue 16: a leader that assigned
    # without it waits for the next metadata refresh).
    deadline = time.monotonic() + RECOVERY
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        for node in sorted(b.nodeId for b in client.cluster.brokers()):
            while True:
                seen = await topic_seen_by(client, node, topic)
                if len(seen) == partitions and all(
                    leader >= 0 and len(isr) == replicas for leader, isr in seen
                ):
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"node {node}: {topic} not ready after {RECOVERY}s")
                await asyncio.sleep(0.5)  # metadata is polled, no event exists
    finally:
        await client.close()


async def topic_seen_by(client: AIOKafkaClient, node: int, topic: str) -> list[tuple[int, list]]:
    """(leader, isr) of each partition of ``topic`` in node ``node``'s own metadata."""
    response: Any = await client.send(node, MetadataRequest([topic], False))
    for entry in response.topics:
        error_code, name = entry[0], entry[1]
        if name == topic and error_code == 0:
            return [(p[2], list(p[4])) for p in entry[-1]]
    return []


class FetchLog:
    """The node of every Fetch the consumer sent that included ``tp``, in order."""

    def __init__(self, consumer: GroupConsumer, tp: TopicPartition) -> None:
        self.nodes: list[int] = []
        fetcher = consumer._fetcher
        assert fetcher is not None, "start the consumer first"

        def sent(node: int, tps: frozenset[TopicPartition]) -> None:
            if tp in tps:
                self.nodes.append(node)

        fetcher.on_fetch_sent = sent


async def read_until(
    consumer: GroupConsumer, records: list[ConsumerRecord], count: int, what: str
) -> None:
    deadline = time.monotonic() + RECOVERY
    while len(records) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: {len(records)} of {count} records after {RECOVERY}s")
        for recs in (await consumer.getmany(timeout_ms=500)).values():
            records.extend(recs)


def rack_consumer(bootstrap: str, rack: str) -> GroupConsumer:
    return GroupConsumer(
        bootstrap_servers=bootstrap,
        client_rack=rack,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        fetch_max_wait_ms=200,
    )


async def test_reads_go_to_the_same_rack_follower(cluster: KafkaCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = unique_name("racks-read")
    tp = TopicPartition(topic, 0)
    await create_topic(bootstrap, topic, 1, 3)
    meta = (await partition_metadata(bootstrap, topic))[0]
    leader = meta.leader
    follower = min(n for n in meta.replicas if n != leader)

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    consumer = rack_consumer(bootstrap, broker_rack(follower))
    records: list[ConsumerRecord] = []
    try:
        values = [b"a%d" % i for i in range(50)]
        for v in values:
            await producer.send_and_wait(topic, v, partition=0)
        await consumer.start()
        log = FetchLog(consumer, tp)
        consumer.assign([tp])
        await read_until(consumer, records, 50, "before the second batch")
        more = [b"b%d" % i for i in range(50)]
        for v in more:
            await producer.send_and_wait(topic, v, partition=0)
        await read_until(consumer, records, 100, "after the second batch")
    finally:
        await consumer.stop()
        await producer.stop()

    assert [r.value for r in records] == values + more
    assert [r.offset for r in records] == list(range(100))
    sent = log.nodes
    assert follower in sent, f"no Fetch went to follower {follower} (leader {leader}): {sent}"
    redirect = sent.index(follower)
    # The leader is asked first, names the follower (no records), and from then on
    # every Fetch goes to the follower: it served every record.
    assert sent[:redirect] and set(sent[:redirect]) == {leader}, sent
    assert set(sent[redirect:]) == {follower}, sent


async def test_nothing_lost_or_stalled_when_the_follower_dies(
    fresh_cluster: KafkaCluster,
) -> None:
    cluster = fresh_cluster
    bootstrap = cluster.bootstrap_servers
    topic = unique_name("racks-kill")
    tp = TopicPartition(topic, 0)
    await create_topic(bootstrap, topic, 1, 3)
    meta = (await partition_metadata(bootstrap, topic))[0]
    leader = meta.leader
    follower = min(n for n in meta.replicas if n != leader)

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    acked: dict[int, bytes] = {}
    failed_sends = 0
    stop_producing = asyncio.Event()

    async def produce() -> None:
        nonlocal failed_sends
        i = 0
        while not stop_producing.is_set():
            value = b"v%d" % i
            i += 1
            try:
                md = await producer.send_and_wait(topic, value, partition=0)
            except Exception:
                failed_sends += 1
                continue
            acked[md.offset] = value
            await asyncio.sleep(0.02)  # the pace of the load, not synchronisation

    consumer = rack_consumer(bootstrap, broker_rack(follower))
    records: list[ConsumerRecord] = []
    load = asyncio.create_task(produce())
    try:
        await consumer.start()
        log = FetchLog(consumer, tp)
        consumer.assign([tp])
        await read_until(consumer, records, 30, "before the kill")
        assert follower in log.nodes, f"not reading from follower {follower}: {log.nodes}"
        killed_at = len(log.nodes)
        acked_at_kill = len(acked)
        await cluster.kill_node(follower)
        # Production goes on once the controller drops the dead follower from the ISR.
        deadline = time.monotonic() + RECOVERY
        while len(acked) < acked_at_kill + 50:
            if time.monotonic() > deadline:
                raise AssertionError(f"production did not resume: {len(acked)} acknowledged")
            await asyncio.sleep(0.2)  # the producer's progress is polled
        stop_producing.set()
        await load
        end = max(acked) + 1
        deadline = time.monotonic() + RECOVERY
        while not records or records[-1].offset + 1 < end:
            if time.monotonic() > deadline:
                got = records[-1].offset + 1 if records else 0
                raise AssertionError(
                    f"stalled at offset {got} of {end}; Fetches since the kill went to "
                    f"{log.nodes[killed_at:][-20:]}"
                )
            for recs in (await consumer.getmany(timeout_ms=500)).values():
                records.extend(recs)
    finally:
        stop_producing.set()
        with contextlib.suppress(Exception):
            await load
        await consumer.stop()
        await producer.stop()

    delivered = {r.offset: r.value for r in records}
    assert [r.offset for r in records] == sorted(delivered), "out of order or duplicated"
    missing = {o for o in acked if delivered.get(o) != acked[o]}
    assert not missing, f"acknowledged records not delivered: {sorted(missing)[:20]}"
    after = log.nodes[killed_at:]
    assert leader in after, f"never fell back to leader {leader}: {after[-20:]}"
    assert after[-1] == leader, f"not reading from the leader at the end: {after[-20:]}"


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
async def test_rack_aware_assignment(cluster: KafkaCluster, strategy: str) -> None:
    """Partitions whose only replica is in a member's rack go to that member."""
    bootstrap = cluster.bootstrap_servers
    topic = unique_name("racks-assign")
    group = unique_name("racks-group")
    # One replica per partition, two partitions per rack, placed so that the racks'
    # partitions interleave (range without racks would hand out 0-1, 2-3, 4-5): a
    # balanced assignment matching every rack exists and only rack awareness finds it.
    placement = {p: [p % 3 + 1] for p in range(6)}
    await create_topic(bootstrap, topic, 6, 1, placement)
    meta = await partition_metadata(bootstrap, topic)
    rack_of = {p: broker_rack(m.replicas[0]) for p, m in meta.items()}
    assert rack_of == {p: broker_rack(p % 3 + 1) for p in range(6)}, rack_of

    members = [
        GroupConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=f"m{node.node_id}",
            client_rack=broker_rack(node.node_id),
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy=(strategy,),
        )
        for node in cluster.nodes
    ]

    async def poll(c: GroupConsumer) -> None:
        while True:
            await c.getmany(timeout_ms=200)

    tasks = []
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        for c in members:
            await c.start()
            c.subscribe([topic])
            tasks.append(asyncio.create_task(poll(c)))
        deadline = time.monotonic() + RECOVERY
        while True:
            try:
                sample = await describe_group(client, group)
            except RuntimeError:  # NOT_COORDINATOR while the group is being created
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.3)
                continue
            owned = {name: parts for name, (_mid, parts) in sample.members.items()}
            if (
                sample.state == "Stable"
                and len(owned) == 3
                and sum(len(p) for p in owned.values()) == 6
            ):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"group not stable with all 6 partitions: {sample}")
            await asyncio.sleep(0.3)  # the broker's view is polled, no event exists
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        for c in members:
            await c.stop()
        await client.close()

    for name, parts in owned.items():
        rack = broker_rack(int(name[1:]))
        assert parts, f"{name} owns nothing: {owned}"
        wrong = [p for (_t, p) in parts if rack_of[p] != rack]
        assert not wrong, f"{name} ({rack}) owns partitions of other racks {wrong}: {owned}"
