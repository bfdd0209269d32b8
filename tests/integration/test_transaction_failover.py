"""Exactly-once across a transaction-coordinator failover (3-node Apache Kafka, RF 3).

One member runs ``TransformLoop`` (or the transactional ``Processor``) over a
replicated input; while one of its transactions is open (outputs sent, offsets not),
the node that coordinates its transactional id is killed with SIGKILL.  The
transaction state log is replicated (``transaction.state.log.replication.factor`` 3,
min ISR 2), so another node takes the coordination over; the open transaction either
commits there or is aborted and its input read again.  Judged by the ownership-history
checker's output rules on the read_committed output: every input's output exactly
once, nothing of an aborted transaction.

Needs Java 17+ and ``make install``'s Kafka jars; the ``kafka_cluster`` tier.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.client import AIOKafkaClient, CoordinationType

from aiogroup import GroupConsumer, TopicPartition
from aiogroup.processing import Output, Processor
from aiogroup.testing.broker import unique_name
from aiogroup.testing.history import HistoryRecorder, HistoryReport, check_history
from aiogroup.testing.kafka import KafkaCluster
from aiogroup.testing.outputs import group_committed, output_headers, read_committed, record_outputs
from aiogroup.transactions import TransformLoop

pytestmark = [pytest.mark.integration, pytest.mark.kafka_cluster]

PARTITIONS = 2
#: Bound on one recovery: the controller fences a dead broker after
#: broker.session.timeout.ms (9 s), then leaders and coordinators move.
RECOVERY = 90.0


class _DeadNodeNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Unable connect to node")


@pytest.fixture
def cluster() -> Iterator[KafkaCluster]:
    """A fresh three-node cluster (the test kills a node), started on the main thread."""
    noise = _DeadNodeNoise()
    logging.getLogger("aiokafka.client").addFilter(noise)
    c = KafkaCluster(size=3)
    asyncio.run(c.start())
    try:
        yield c
    finally:
        asyncio.run(c.stop())
        logging.getLogger("aiokafka.client").removeFilter(noise)


async def coordinator_of(bootstrap: str, kind: CoordinationType, key: str) -> int:
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        return int(await client.coordinator_lookup(kind, key))
    finally:
        await client.close()


async def txn_coordinator(bootstrap: str, transactional_id: str) -> int:
    return await coordinator_of(bootstrap, CoordinationType.TRANSACTION, transactional_id)


async def feed(bootstrap: str, topic: str, total: int) -> None:
    """``total`` inputs over the topic's partitions in turn, 20 keys, acks from all replicas."""
    feeder = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await feeder.start()
    try:
        sent = [
            await feeder.send(
                topic, f"in-{i}".encode(), key=b"k%d" % (i % 20), partition=i % PARTITIONS
            )
            for i in range(total)
        ]
        await asyncio.gather(*sent)
    finally:
        await feeder.stop()


def transactional(bootstrap: str, transactional_id: str) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=transactional_id,
        request_timeout_ms=10_000,
        acks="all",
    )


def member(bootstrap: str, source: str, group: str) -> GroupConsumer:
    """The group member that reads the input: manual commits, read_committed."""
    return GroupConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )


async def until_all_committed(
    bootstrap: str, group: str, tps: list[TopicPartition], total: int, run: asyncio.Future[Any]
) -> None:
    """Until the group's committed offsets (read from outside) cover every input, or
    raise what ended ``run`` first: a bounded poll of broker state (no event exists)."""
    while not run.done():
        got = await group_committed(bootstrap, group, tps, timeout=RECOVERY)
        if sum(got.values()) >= total:
            return
        await asyncio.sleep(0.5)
    run.result()


async def judge(
    bootstrap: str, output: str, group: str, tps: list[TopicPartition], history: HistoryRecorder
) -> HistoryReport:
    """The checker's output rules over the read_committed output and the group's offsets."""
    records = await read_committed(bootstrap, output, partitions=1, timeout=RECOVERY)
    record_outputs(history, records)
    history.broker_committed(await group_committed(bootstrap, group, tps, timeout=RECOVERY))
    report = check_history(history.events(), outputs=True)
    print(f"checker: {report.summary()}")
    return report


class HeldTransform:
    """One labelled output per input; the batch after ``hold_after`` inputs waits (its
    outputs sent, its offsets not) until ``release`` - the window the node is killed in."""

    def __init__(self, output: str, hold_after: int) -> None:
        self.output, self.hold_after = output, hold_after
        self.held, self.release = asyncio.Event(), asyncio.Event()
        self.seen = 0
        self.labels: list[str] = []
        #: Labels of transactions the loop aborted (its counters, read between batches:
        #: the loop runs one transaction at a time).
        self.aborted: list[str] = []
        #: Aborted transactions that ended before their transform ran (no label, no
        #: output): begun, then cancelled by a rebalance while joining the group.
        self.unlabelled_aborts = 0
        self.loop: TransformLoop | None = None
        self._commits_seen = self._aborts_seen = 0
        self._last_settled = True

    def settle(self) -> None:
        """Attribute what the loop counted since the last call.  The last label's
        transaction is the first to end after its transform ran: committed if a commit
        was counted since (a commit needs a transform call), else aborted; any further
        abort was a transaction that ended before its transform ran."""
        assert self.loop is not None
        committed = self.loop.transactions_committed - self._commits_seen
        aborts = self.loop.transactions_aborted - self._aborts_seen
        self._commits_seen = self.loop.transactions_committed
        self._aborts_seen = self.loop.transactions_aborted
        if not self._last_settled and (committed or aborts):
            self._last_settled = True
            if not committed:
                self.aborted.append(self.labels[-1])
                aborts -= 1
        self.unlabelled_aborts += aborts

    async def __call__(self, producer: AIOKafkaProducer, batch: dict) -> None:  # type: ignore[type-arg]
        if self.labels:
            self.settle()
        txn = f"{producer._txn_manager.transactional_id}#{len(self.labels) + 1}"
        self.labels.append(txn)
        self._last_settled = False
        sent = []
        for tp, records in batch.items():
            for r in records:
                headers = output_headers(tp.topic, tp.partition, r.offset, txn)
                sent.append(await producer.send(self.output, r.value, partition=0, headers=headers))
        await asyncio.gather(*sent)
        if self.seen >= self.hold_after and not self.held.is_set():
            self.held.set()
            await self.release.wait()
        self.seen += sum(len(r) for r in batch.values())


async def test_a_transaction_coordinator_killed_mid_transaction_keeps_each_input_once(
    cluster: KafkaCluster,
) -> None:
    bootstrap = cluster.bootstrap_servers
    source = await cluster.create_topic(unique_name("eos-in"), PARTITIONS)
    output = await cluster.create_topic(unique_name("eos-out"), 1)
    group, transactional_id = unique_name("eos-group"), unique_name("eos-txn")
    total = 600
    await feed(bootstrap, source, total)
    producer = transactional(bootstrap, transactional_id)
    await asyncio.wait_for(producer.start(), RECOVERY)
    transform = HeldTransform(output, hold_after=200)
    history = HistoryRecorder()
    consumer = member(bootstrap, source, group)
    await asyncio.wait_for(consumer.start(), RECOVERY)
    loop = TransformLoop(consumer, producer, transform, max_records=50, timeout=RECOVERY)
    transform.loop = loop
    run = asyncio.ensure_future(loop.run())
    tps = [TopicPartition(source, p) for p in range(PARTITIONS)]
    try:
        await asyncio.wait_for(transform.held.wait(), RECOVERY)
        victim = await txn_coordinator(bootstrap, transactional_id)
        group_coordinator = await coordinator_of(bootstrap, CoordinationType.GROUP, group)
        await cluster.kill_node(victim)  # SIGKILL, returns once the process is reaped
        killed_at = asyncio.get_running_loop().time()
        transform.release.set()

        await asyncio.wait_for(until_all_committed(bootstrap, group, tps, total, run), 2 * RECOVERY)
        recovered_after = asyncio.get_running_loop().time() - killed_at
        new_coordinator = await txn_coordinator(bootstrap, transactional_id)
        await loop.stop()
        await asyncio.wait_for(run, RECOVERY)
    finally:
        transform.release.set()
        if not run.done():
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run
        await consumer.stop()
        await producer.stop()
    print(
        f"transaction coordinator {victim} killed (group coordinator: {group_coordinator}); "
        f"{new_coordinator} took over; all input "
        f"committed {recovered_after:.1f}s later; {loop.transactions_committed} committed, "
        f"{loop.transactions_aborted} aborted (last: {loop.last_abort!r}); aborts "
        f"attributed: {transform.aborted}, before their transform: {transform.unlabelled_aborts}"
    )
    assert new_coordinator != victim
    transform.settle()
    assert len(transform.aborted) + transform.unlabelled_aborts == loop.transactions_aborted
    for label in transform.aborted:  # none of their outputs may be visible
        history.member("loop").txn_aborted(label)
    report = await judge(bootstrap, output, group, tps, history)
    report.assert_clean()
    assert report.outputs_checked == total


async def test_a_transactional_processor_survives_its_transaction_coordinator_killed(
    cluster: KafkaCluster,
) -> None:
    """The processing layer inside transactions (``Processor(transactional_producer=...)``,
    one transaction per committed prefix, handlers running concurrently) while the node
    coordinating its transactional id is SIGKILLed with transactions open: the processor
    goes on (the open transaction commits on the new coordinator or is aborted and its
    inputs processed again), and the read_committed output holds every input once."""
    bootstrap = cluster.bootstrap_servers
    source = await cluster.create_topic(unique_name("proc-in"), PARTITIONS)
    output = await cluster.create_topic(unique_name("proc-out"), 1)
    group, transactional_id = unique_name("proc-group"), unique_name("proc-txn")
    total = 2000
    await feed(bootstrap, source, total)
    producer = transactional(bootstrap, transactional_id)
    await asyncio.wait_for(producer.start(), RECOVERY)
    halfway = asyncio.Event()
    finished = 0

    async def handle(record: Any) -> Output:
        nonlocal finished
        await asyncio.sleep(0.01)  # a little I/O: the run outlasts the kill
        finished += 1
        if finished >= total // 4:
            halfway.set()
        return Output(
            output,
            record.value.upper(),
            key=record.key,
            headers=output_headers(record.topic, record.partition, record.offset, "proc"),
            partition=0,
        )

    consumer = member(bootstrap, source, group)
    await asyncio.wait_for(consumer.start(), RECOVERY)
    processor = Processor(
        consumer,
        handle,
        concurrency=8,
        commit_interval_ms=200,
        transactional_producer=producer,
    )
    run = asyncio.get_running_loop().create_task(processor.run())
    tps = [TopicPartition(source, p) for p in range(PARTITIONS)]
    try:
        await asyncio.wait_for(halfway.wait(), RECOVERY)
        victim = await txn_coordinator(bootstrap, transactional_id)
        await cluster.kill_node(victim)  # SIGKILL, returns once the process is reaped
        killed_at = asyncio.get_running_loop().time()
        committed_at_kill = sum(
            (await group_committed(bootstrap, group, tps, timeout=RECOVERY)).values()
        )

        await asyncio.wait_for(until_all_committed(bootstrap, group, tps, total, run), 2 * RECOVERY)
        recovered_after = asyncio.get_running_loop().time() - killed_at
        new_coordinator = await txn_coordinator(bootstrap, transactional_id)
        stats = processor.metrics()["transactions"]
        await asyncio.wait_for(processor.stop(), RECOVERY)
        await asyncio.wait_for(run, RECOVERY)
    finally:
        if not run.done():
            run.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await run
        await consumer.stop()
        await producer.stop()
    print(
        f"transaction coordinator {victim} killed with {committed_at_kill} of {total} inputs "
        f"committed; {new_coordinator} took over; all input committed "
        f"{recovered_after:.1f}s later; {stats}"
    )
    assert new_coordinator != victim
    assert committed_at_kill < total, "the processor had finished before the kill"
    history = HistoryRecorder()
    report = await judge(bootstrap, output, group, tps, history)
    report.assert_clean()
    assert report.outputs_checked == total
