"""Failover on a 3-node Apache Kafka cluster (RF 3, min.insync.replicas 2).

Under steady production (acks=all) three aiogroup members consume and commit after
every batch while brokers die: the group's coordinator (SIGKILL), then a node leading
partitions of the topic (SIGKILL), and in another test every node in turn (a rolling
restart: SIGTERM, controlled shutdown, start again).  The group is judged from
outside its members - by the ownership-history checker (aiogroup.testing.history)
fed by the members' listener and delivery events and by a DescribeGroups observer -
and by the broker's committed offsets: no record acknowledged to the producer is
lost, no partition is held by two members at once, commits never go backwards, and
commits resume after every fault until they reach the log end.

Needs Java 17+ and ``make install``'s Kafka jars; ``make test`` runs it in the
Apache Kafka tier (the marker ``kafka_cluster``), whatever AIOGROUP_BROKER says.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.client import AIOKafkaClient, CoordinationType

from aiogroup import AsyncConsumerRebalanceListener, GroupConsumer, TopicPartition
from aiogroup.testing.broker import unique_name
from aiogroup.testing.history import HistoryRecorder, MemberRecorder, check_history
from aiogroup.testing.kafka import KafkaCluster
from aiogroup.testing.observer import GroupObserver, describe_group
from aiogroup.testing.recording import RecordingListener

pytestmark = [pytest.mark.integration, pytest.mark.kafka_cluster]

PARTITIONS = 6
MEMBERS = 3
#: Upper bound for one recovery: the controller fences a dead broker after
#: broker.session.timeout.ms (9 s), then leaders and the coordinator move.
RECOVERY = 90.0


class _DeadNodeNoise(logging.Filter):
    """Drops aiokafka's "Unable connect to node" errors while a node is down on purpose.

    There are hundreds of them per kill; in a failed run they filled the captured log
    that CI shows, and the assertion's own message was lost among them.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Unable connect to node")


@pytest.fixture(autouse=True)
def _quiet_dead_nodes() -> Iterator[None]:
    noise = _DeadNodeNoise()
    logger = logging.getLogger("aiokafka.client")  # filters do not reach child loggers
    logger.addFilter(noise)
    try:
        yield
    finally:
        logger.removeFilter(noise)


@pytest.fixture
def cluster() -> Iterator[KafkaCluster]:
    """A fresh three-node cluster per test (tests kill nodes).  Started on the main
    thread: a node's parent-death signal follows the thread that started it."""
    c = KafkaCluster(size=3)
    asyncio.run(c.start())
    try:
        yield c
    finally:
        asyncio.run(c.stop())


class CommitOnRevoke(AsyncConsumerRebalanceListener):
    """What a careful application does: commit what it processed before letting go."""

    def __init__(self, member: FailoverMember) -> None:
        self.member = member

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        offsets = {tp: o for tp, o in self.member.processed.items() if tp in revoked}
        if offsets:
            try:
                await self.member.consumer.commit(offsets)
            except Exception as exc:
                self.member.errors.append(exc)
            else:
                self.member.rec.committed(offsets)


class FailoverMember:
    """A member that commits what it processed after every batch and records it all."""

    def __init__(self, name: str, bootstrap: str, group: str, topic: str, rec: MemberRecorder):
        self.name, self.topic, self.rec = name, topic, rec
        self.consumer = GroupConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=name,  # the observer names members by client id
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            # Shorter than a coordinator failover (about broker.session.timeout.ms,
            # 9 s): the members' sessions lapse on the way, the case issue 13 is about.
            session_timeout_ms=6_000,
            heartbeat_interval_ms=1_000,
            partition_assignment_strategy=("cooperative-sticky",),
        )
        self.errors: list[BaseException] = []
        #: partition -> next offset to read, for what the application has processed.
        self.processed: dict[TopicPartition, int] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()
        self.consumer.subscribe(
            [self.topic], listener=RecordingListener(self.rec, CommitOnRevoke(self))
        )
        self._task = asyncio.create_task(self._run(), name=f"failover-{self.name}")

    async def _run(self) -> None:
        while True:
            try:
                batches = await self.consumer.getmany(timeout_ms=200)
                offsets = {}
                for tp, records in batches.items():
                    if records:
                        self.rec.delivered(tp.topic, tp.partition, [r.offset for r in records])
                        offsets[tp] = records[-1].offset + 1
                self.processed.update(offsets)
                if offsets:
                    await self.consumer.commit(offsets)
                    self.rec.committed(offsets)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a fault's visible trace; the member goes on
                self.errors.append(exc)
                await asyncio.sleep(0.1)  # back off before polling again

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.rec.leaving()
        await self.consumer.stop()


class SteadyLoad:
    """acks=all production to every partition; remembers every acknowledged offset."""

    def __init__(self, bootstrap: str, topic: str, history: HistoryRecorder) -> None:
        self.bootstrap, self.topic, self.history = bootstrap, topic, history
        self.end: dict[int, int] = dict.fromkeys(range(PARTITIONS), 0)
        self.failed_sends = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=5
        )

    async def __aenter__(self) -> SteadyLoad:
        await self._producer.start()
        self._task = asyncio.create_task(self._run(), name="failover-load")
        return self

    async def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            sends = []
            for p in range(PARTITIONS):
                sends.append(await self._producer.send(self.topic, b"v%d" % i, partition=p))
                i += 1
            for result in await asyncio.gather(*sends, return_exceptions=True):
                if isinstance(result, BaseException):
                    self.failed_sends += 1
                    continue
                self.history.produced(self.topic, result.partition, result.offset, result.offset)
                self.end[result.partition] = max(self.end[result.partition], result.offset + 1)
            await asyncio.sleep(0.05)  # the pace of the load, not synchronisation

    def acknowledged(self) -> dict[int, int]:
        """Per partition, the offset after the last record acknowledged so far."""
        return dict(self.end)

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
        await self._producer.stop()


class Scenario:
    """A topic, the history, an observer, the load and three members on one cluster."""

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap_servers
        self.topic = unique_name("failover")
        self.group = unique_name("failover-group")
        self.history = HistoryRecorder()
        self.members: list[FailoverMember] = []

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[SteadyLoad]:
        await create_replicated_topic(self.bootstrap, self.topic)
        observer = GroupObserver(self.bootstrap, self.group, self.history, interval=0.2)
        await observer.start()
        try:
            async with SteadyLoad(self.bootstrap, self.topic, self.history) as load:
                for n in range(MEMBERS):
                    name = f"m{n}"
                    m = FailoverMember(
                        name, self.bootstrap, self.group, self.topic, self.history.member(name)
                    )
                    self.members.append(m)
                    await m.start()
                await self.progress_beyond(load.acknowledged(), "the group to form and commit")
                await self.formed()
                yield load
            # Production stopped: drain to the final ends, then leave cleanly.
            await self.committed_up_to(load.end, "every acknowledged record to be committed")
            for m in self.members:
                await m.stop()
        finally:
            for m in self.members:
                with contextlib.suppress(Exception):
                    await m.consumer.abort()
            await observer.stop()
        self.judge(load)

    async def formed(self) -> None:
        """Until the broker shows the group Stable with every member holding partitions.

        The scenarios kill nodes under a formed group: one whose generation the
        coordinator has written to its log.  Progress alone is not that - two members
        can read and commit every partition while the third one's first JoinGroup is
        still pending - and a JoinGroup pending when the coordinator dies is in no log:
        the new coordinator does not know that member id, and the member rejoins under a
        new one (seen twice on this cluster: the observer reported it as an eviction).
        """
        client = AIOKafkaClient(bootstrap_servers=self.bootstrap)
        await client.bootstrap()
        try:
            deadline = time.monotonic() + RECOVERY
            while True:
                sample = await describe_group(client, self.group)
                held = [parts for _, parts in sample.members.values()]
                if sample.state == "Stable" and len(held) == MEMBERS and all(held):
                    return
                if time.monotonic() > deadline:
                    raise AssertionError(f"the group never formed: {sample}; {self.describe()}")
                await asyncio.sleep(0.2)  # the broker's view is polled, no event exists
        finally:
            await client.close()

    async def progress_beyond(self, ends: dict[int, int], what: str) -> None:
        """Until, for every partition, a record at or past ``ends`` was delivered and
        a commit past it accepted.

        Judged by offsets, not by the clock: with ``ends`` taken once the fault is in
        place (the node reaped), those records were produced after it, so delivering
        them needs a live leader and committing them a live coordinator.  (Measured by
        time, records read ahead before a kill and delivered just after it, or a commit
        answered in the instant before the process died, passed for recovery.)
        """

        def missing() -> list[int]:
            delivered: dict[int, int] = {}
            committed: dict[int, int] = {}
            for e in self.history.events():
                if e.kind == "delivered":
                    for _, p, _, last in e.spans:
                        delivered[p] = max(delivered.get(p, -1), last)
                elif e.kind == "committed":
                    for _, p, offset in e.offsets:
                        committed[p] = max(committed.get(p, -1), offset)
            return [
                p
                for p in range(PARTITIONS)
                if delivered.get(p, -1) < ends.get(p, 0) or committed.get(p, -1) <= ends.get(p, 0)
            ]

        def describe() -> str:
            return f"partitions without progress {missing()} past {ends}; {self.describe()}"

        await poll_until(lambda: not missing(), RECOVERY, what, describe)

    async def committed_up_to(self, ends: dict[int, int], what: str) -> None:
        async def reached() -> bool:
            got = await broker_committed(self.bootstrap, self.group, self.topic)
            return all((got.get(p) or 0) >= end for p, end in ends.items())

        deadline = time.monotonic() + RECOVERY
        while not await reached():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}: {self.describe()}")
            await asyncio.sleep(0.5)  # the broker's view is polled, no event exists

    def describe(self) -> str:
        return "; ".join(
            f"{m.name}: owns {sorted(tp.partition for tp in m.consumer.assignment())}, "
            f"errors {[type(e).__name__ for e in m.errors][-5:]}"
            for m in self.members
        )

    def judge(self, load: SteadyLoad) -> None:
        produced = {TopicPartition(self.topic, p): end for p, end in load.end.items()}
        assert all(end > 0 for end in load.end.values()), load.end
        report = check_history(self.history.events(), produced=produced)
        print(f"failover history: {report.summary()}; failed sends {load.failed_sends}")
        report.assert_clean()  # nothing lost, no overlap, commits never backwards, no zombie
        assert report.records_checked == sum(load.end.values()), report.counts()
        # Every member found the new coordinator and stayed a member: none was evicted.
        # A failover takes about broker.session.timeout.ms (9 s), longer than the
        # members' 6 s session: as in Java, a member whose session lapses looks the
        # coordinator up again and keeps its member id (aiogroup also gives up its
        # partitions as lost and rejoins under that id), and the new coordinator,
        # which restarts every member's session when it loads the group, keeps it.
        if report.evictions:  # the whole story on stdout: pytest cuts long messages
            print("membership timeline:", self.membership_timeline())
        assert not report.evictions, report.evictions

    def membership_timeline(self) -> str:
        """The observer's and the listeners' view of membership, for a failure message."""
        kinds = {"joined", "gone", "group_state", "leaving", "revoke_started", "assigned", "lost"}
        events = [e for e in self.history.events() if e.kind in kinds]
        t0 = events[0].t if events else 0.0
        lines = [
            f"{e.t - t0:8.3f} {e.member:>6} {e.kind:<12} {e.detail} "
            f"{[p for _, p in e.partitions] if e.partitions else ''}"
            + (f" since={e.since - t0:.3f}" if e.since is not None else "")
            for e in events
        ]
        return "\n" + "\n".join(lines)

    async def coordinator(self) -> int:
        client = AIOKafkaClient(bootstrap_servers=self.bootstrap)
        await client.bootstrap()
        try:
            node = await client.coordinator_lookup(CoordinationType.GROUP, self.group)
            sample = await describe_group(client, self.group)
            assert len(sample.members) == MEMBERS, sample
            return int(node)
        finally:
            await client.close()


async def create_replicated_topic(bootstrap: str, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, PARTITIONS, 3)])
    finally:
        await admin.close()
    await wait_full_isr(bootstrap, [topic])


async def partition_state(bootstrap: str, topics: list[str]) -> dict[tuple[str, int], tuple]:
    """(topic, partition) -> (leader, isr) from a fresh metadata answer."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        cluster = await client.fetch_all_metadata()
        out: dict[tuple[str, int], tuple] = {}
        for topic in topics:
            for p, md in (cluster._partitions.get(topic) or {}).items():
                out[(topic, p)] = (md.leader, tuple(sorted(md.isr)))
        return out
    finally:
        await client.close()


async def wait_full_isr(bootstrap: str, topics: list[str]) -> None:
    """Until every partition of ``topics`` has a leader and all three replicas in sync."""

    async def full() -> bool:
        with contextlib.suppress(Exception):
            state = await partition_state(bootstrap, topics)
            return bool(state) and all(
                leader is not None and leader >= 0 and len(isr) == 3
                for leader, isr in state.values()
            )
        return False

    deadline = time.monotonic() + RECOVERY
    while not await full():
        if time.monotonic() > deadline:
            raise AssertionError(f"ISR of {topics} not full after {RECOVERY}s")
        await asyncio.sleep(0.5)  # metadata is polled, no event exists


async def broker_committed(bootstrap: str, group: str, topic: str) -> dict[int, int | None]:
    checker = GroupConsumer(bootstrap_servers=bootstrap, group_id=group)
    await checker.start()
    try:
        return {p: await checker.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        await checker.stop()


async def poll_until(condition, timeout: float, what: str, describe) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}: {describe()}")
        await asyncio.sleep(0.2)  # the history is in-process; members do not signal it


# -- the scenarios ------------------------------------------------------------------------


async def test_coordinator_then_partition_leaders_killed(cluster: KafkaCluster) -> None:
    s = Scenario(cluster)
    internal = "__consumer_offsets"
    async with s.running() as load:
        # 1. SIGKILL the group's coordinator: members find the new one, commits resume.
        coordinator = await s.coordinator()
        await cluster.kill_node(coordinator)  # returns once the process is reaped
        await s.progress_beyond(
            load.acknowledged(), f"progress after killing coordinator {coordinator}"
        )
        assert await s.coordinator() != coordinator
        await cluster.start_node(coordinator)
        await wait_full_isr(s.bootstrap, [s.topic, internal])

        # 2. SIGKILL a node leading partitions of the topic (not the coordinator now).
        state = await partition_state(s.bootstrap, [s.topic])
        now_coordinator = await s.coordinator()
        leaders = {leader for leader, _ in state.values()}
        victim = min(leaders - {now_coordinator} or leaders)
        moved = sorted(p for (_, p), (leader, _) in state.items() if leader == victim)
        await cluster.kill_node(victim)
        await s.progress_beyond(
            load.acknowledged(), f"progress after killing leader {victim} of {moved}"
        )
        after = await partition_state(s.bootstrap, [s.topic])
        assert all(after[(s.topic, p)][0] not in (victim, -1, None) for p in moved), after
        await cluster.start_node(victim)
        await wait_full_isr(s.bootstrap, [s.topic, internal])
        await s.progress_beyond(load.acknowledged(), "progress with every node back")


async def test_rolling_restart_of_all_three_brokers(cluster: KafkaCluster) -> None:
    s = Scenario(cluster)
    async with s.running() as load:
        for node in cluster.nodes:
            await wait_full_isr(s.bootstrap, [s.topic, "__consumer_offsets"])
            await cluster.stop_node(node.node_id)  # SIGTERM: controlled shutdown
            await s.progress_beyond(
                load.acknowledged(), f"progress while node {node.node_id} is down"
            )
            await cluster.start_node(node.node_id)
        await wait_full_isr(s.bootstrap, [s.topic, "__consumer_offsets"])
        await s.progress_beyond(load.acknowledged(), "progress after the rolling restart")
