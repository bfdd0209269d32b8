"""Exactly-once consume-transform-produce on a real broker (issue 27, KIP-447).

(a) The loop: each batch's outputs and its input offsets in one transaction of
aiokafka's producer; a read_committed reader of the output sees each input's output
exactly once, and the group's committed offsets are the input's end.
(b) The zombie: member A reads a batch, opens a transaction, produces its outputs
and is frozen (its event loop blocked, as SIGSTOP would) past its session.  The
group gives the partition to B, which processes it and commits.  A wakes and sends
its offsets with the group metadata it read the batch under: the coordinator
refuses (KIP-447), the transaction is aborted, ``TransactionFencedError`` surfaces,
and the output holds every input exactly once.
(c) The same zombie with aiokafka's own ``send_offsets_to_transaction(offsets,
group_id)`` (TxnOffsetCommit v0, group id only): what KIP-447 prevents, measured.

Every scenario is judged by the ownership-history checker's output rules
(``aiogroup.testing.history``): the output topic read with read_committed, each
input's output exactly once below the group's committed offset, nothing of a
transaction a member aborted (each output names its input and transaction in headers,
``aiogroup.testing.outputs``).

Transactions need ``caps.supports_transactions`` (Tansu refuses InitProducerId for a
transactional id); the consumer-protocol run needs ``caps.supports_consumer_protocol``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import itertools
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaProducer
from fault_proxy import FaultProxy
from frozen_loop import FrozenLoop

from aiogroup import CommitFailedError, GroupConsumer, IllegalStateError, TopicPartition
from aiogroup._transactions.committer import ProducerTxnView
from aiogroup.errors import NotGroupMemberError, TransactionFencedError
from aiogroup.group_metadata import ConsumerGroupMetadata
from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.history import HistoryRecorder, HistoryReport, check_history
from aiogroup.testing.outputs import (
    group_committed,
    output_headers,
    read_committed,
    record_outputs,
)
from aiogroup.testing.plugin import TopicFactory
from aiogroup.transactions import TransformLoop, send_offsets_to_transaction, transaction

T = TypeVar("T")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: Bound on any single wait in these tests.
WAIT_S = 60.0
#: The classic member's session: the zombie is frozen past it (the broker's minimum
#: in the test fixture is 3 s).
SESSION_MS = 3000


@pytest.fixture
def transactions(kafka_broker: KafkaBroker) -> None:
    """The broker, when it has transactions; otherwise the scenario does not apply."""
    if not kafka_broker.caps.supports_transactions:
        pytest.skip(
            "not applicable: this broker refuses transactional producers "
            "(caps.supports_transactions; test_broker.py::test_caps_transactions asserts it)"
        )


async def produce_inputs(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        sent = [
            await producer.send(topic, f"in-{i}".encode(), partition=i % partitions)
            for i in range(count)
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


def transactional_producer(bootstrap: str, name: str) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=unique_name(name),
        request_timeout_ms=10_000,
    )


def consumer(bootstrap: str, topic: str, group: str, **options: Any) -> GroupConsumer:
    return GroupConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        **options,
    )


#: Numbers transactions, so that each output's transaction label is unique in a run.
_TXN_SEQ = itertools.count(1)


def txn_label(producer: AIOKafkaProducer) -> str:
    """A label for the transaction ``producer`` is about to write (its outputs carry it)."""
    return f"{ProducerTxnView(producer).transactional_id}#{next(_TXN_SEQ)}"


async def process_batch(
    producer: AIOKafkaProducer, output: str, batch: dict[Any, Any], txn: str = ""
) -> dict[TopicPartition, int]:
    """Produce one output per input record (keyed by the input's partition:offset, its
    input and transaction ``txn`` in headers) in the producer's open transaction; the
    next offsets to commit."""
    sent = []
    for tp, records in batch.items():
        for record in records:
            key = f"{tp.partition}:{record.offset}".encode()
            headers = output_headers(tp.topic, tp.partition, record.offset, txn)
            sent.append(
                await producer.send(
                    output, record.value.upper(), key=key, partition=0, headers=headers
                )
            )
    await asyncio.gather(*sent)
    return {tp: records[-1].offset + 1 for tp, records in batch.items() if records}


async def read_output(bootstrap: str, output: str, *, values: bool = False) -> list[str]:
    """Every committed output record's key (or value), read with read_committed (once no
    transaction is open on the output)."""
    records = await read_committed(bootstrap, output, partitions=1, timeout=WAIT_S)
    return [(r.value if values else r.key).decode() for r in records]


async def judge_output(
    bootstrap: str,
    output: str,
    group: str,
    source: str,
    partitions: int,
    history: HistoryRecorder | None = None,
) -> HistoryReport:
    """The checker's output rules on the read_committed output and the group's offsets
    (read from outside, require_stable); ``history`` holds what members recorded (the
    transactions they aborted)."""
    history = history or HistoryRecorder()
    records = await read_committed(bootstrap, output, partitions=1, timeout=WAIT_S)
    record_outputs(history, records)
    tps = [TopicPartition(source, p) for p in range(partitions)]
    history.broker_committed(await group_committed(bootstrap, group, tps, timeout=WAIT_S))
    report = check_history(history.events(), outputs=True)
    print(f"checker: {report.summary()}")
    return report


def duplicates(keys: list[str]) -> dict[str, int]:
    return {k: n for k, n in collections.Counter(keys).items() if n > 1}


async def takes_over(
    member: GroupConsumer, producer: AIOKafkaProducer, output: str, total: int
) -> float:
    """The loop until ``total`` inputs are committed, a transaction per batch, labelled;
    when its first batch came (loop time)."""
    done, first = 0, None

    async def loop() -> None:
        nonlocal done, first
        while done < total:
            batch = await member.getmany(timeout_ms=500)
            if batch:
                first = first or asyncio.get_running_loop().time()
                async with transaction(producer):
                    txn = txn_label(producer)
                    offsets = await process_batch(producer, output, batch, txn)
                    await send_offsets_to_transaction(producer, offsets, member)
                done += sum(len(r) for r in batch.values())

    await asyncio.wait_for(loop(), WAIT_S)
    assert first is not None
    return first


def member_env(bootstrap: str, source: str, output: str, group: str, **more: str) -> dict[str, str]:
    """The environment of a member run as a process (this checkout's aiogroup first)."""
    return {
        **os.environ,
        "BOOTSTRAP": bootstrap,
        "INPUT_TOPIC": source,
        "OUTPUT_TOPIC": output,
        "GROUP_ID": group,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")]),
        **more,
    }


async def wake_and_commit(proc: asyncio.subprocess.Process) -> str:
    """SIGCONT a stopped member, tell it to commit, and return what it says happened."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.send_signal(signal.SIGCONT)
    proc.stdin.write(b"go\n")
    await proc.stdin.drain()
    answer = (await asyncio.wait_for(proc.stdout.readline(), WAIT_S)).decode().strip()
    await asyncio.wait_for(proc.wait(), WAIT_S)
    return answer


# --- group metadata: every broker ------------------------------------------------------


async def test_group_metadata_names_the_member_from_its_first_assignment(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str
) -> None:
    """Needs no transactions, so it runs on every broker (Tansu too)."""
    bootstrap = kafka_broker.bootstrap_servers
    source = await kafka_topic(partitions=1)
    member = consumer(bootstrap, source, group_id, group_instance_id=unique_name("static"))
    with pytest.raises(NotGroupMemberError, match="not started"):
        member.group_metadata()
    await asyncio.wait_for(member.start(), WAIT_S)  # returns after the first assignment
    try:
        meta = member.group_metadata()
        assert meta == ConsumerGroupMetadata(
            group_id, member.generation, member.member_id, member.config.group_instance_id
        )
        assert meta.generation_id >= 0 and meta.member_id  # Tansu numbers from 0, Kafka from 1
    finally:
        await member.stop()
    with pytest.raises(NotGroupMemberError):
        member.group_metadata()


# --- (a) the loop -----------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_the_loop_produces_each_inputs_output_exactly_once(
    kafka_broker: KafkaBroker,
    kafka_topic: TopicFactory,
    group_id: str,
    transactions: None,
    protocol: str,
) -> None:
    if protocol == "consumer" and not kafka_broker.caps.supports_consumer_protocol:
        pytest.skip("caps.supports_consumer_protocol: the broker has only the classic protocol")
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=2), await kafka_topic(partitions=1)
    total = 300
    await produce_inputs(bootstrap, source, total, partitions=2)
    producer = transactional_producer(bootstrap, "loop")
    await asyncio.wait_for(producer.start(), WAIT_S)
    done = 0
    metas: list[ConsumerGroupMetadata] = []
    try:
        async with consumer(bootstrap, source, group_id, group_protocol=protocol) as member:

            async def loop() -> None:
                nonlocal done
                while done < total:
                    batch = await member.getmany(timeout_ms=500, max_records=50)
                    if not batch:
                        continue
                    await producer.begin_transaction()
                    offsets = await process_batch(producer, output, batch, txn_label(producer))
                    metas.append(member.group_metadata())
                    await send_offsets_to_transaction(producer, offsets, member)
                    await producer.commit_transaction()
                    done += sum(len(r) for r in batch.values())

            await asyncio.wait_for(loop(), WAIT_S)
            committed = {p: await member.committed(TopicPartition(source, p)) for p in range(2)}
    finally:
        await producer.stop()

    assert committed == {0: total // 2, 1: total // 2}
    report = await judge_output(bootstrap, output, group_id, source, 2)
    report.assert_clean()
    assert report.outputs_checked == total
    # The metadata the commits carried: this member's identity, the epoch in the
    # generation's place under the consumer protocol.
    assert {m.group_id for m in metas} == {group_id}
    assert all(m.generation_id >= 1 and m.member_id for m in metas)


# --- (b), (c): the zombie ---------------------------------------------------------------


@dataclass
class Zombie:
    """Member A's side: its consumer, producer and the batch it read before freezing."""

    member: GroupConsumer
    producer: AIOKafkaProducer
    metadata: ConsumerGroupMetadata
    offsets: dict[TopicPartition, int]
    #: The label of its open transaction (its outputs carry it).
    txn: str


@asynccontextmanager
async def zombie_scenario(
    bootstrap: str, source: str, output: str, group: str, total: int, protocol: str = "classic"
) -> AsyncIterator[tuple[FrozenLoop, Zombie]]:
    """A reads the whole input, opens a transaction holding every output, and is frozen
    past its session; B takes the partition over and commits all of it.  Yields with A
    still frozen, then thawed by the caller; A's transaction is left open for the
    caller to finish."""
    frozen = FrozenLoop()
    zombie: Zombie | None = None

    async def a_reads() -> Zombie:
        member = consumer(bootstrap, source, group, **session_options(protocol, SESSION_MS))
        await member.start()
        producer = transactional_producer(bootstrap, "zombie")
        await producer.start()
        got: dict[Any, Any] = {}
        while sum(len(r) for r in got.values()) < total:
            for tp, records in (await member.getmany(timeout_ms=500)).items():
                got.setdefault(tp, []).extend(records)
        metadata = member.group_metadata()  # the identity it read the batch under
        await producer.begin_transaction()
        txn = txn_label(producer)
        offsets = await process_batch(producer, output, got, txn)
        return Zombie(member, producer, metadata, offsets, txn)

    try:
        zombie = await frozen.run(a_reads())
        frozen.freeze()
        # B joins; A cannot answer the rebalance nor heartbeat: its session expires, B
        # gets the partition and - A having committed nothing - processes it all.
        b_producer = transactional_producer(bootstrap, "successor")
        await asyncio.wait_for(b_producer.start(), WAIT_S)
        try:
            b_options = session_options(protocol, 10_000)
            async with consumer(bootstrap, source, group, **b_options) as b:

                async def b_processes() -> None:
                    done = 0
                    while done < total:
                        batch = await b.getmany(timeout_ms=500)
                        if not batch:
                            continue
                        await b_producer.begin_transaction()
                        offsets = await process_batch(
                            b_producer, output, batch, txn_label(b_producer)
                        )
                        await send_offsets_to_transaction(b_producer, offsets, b)
                        await b_producer.commit_transaction()
                        done += sum(len(r) for r in batch.values())

                await asyncio.wait_for(b_processes(), WAIT_S)
                assert b.group_metadata().generation_id > zombie.metadata.generation_id
                yield frozen, zombie
        finally:
            await b_producer.stop()
    finally:
        frozen.thaw()
        if zombie is not None:
            await frozen.run(close_zombie(zombie))
        frozen.close()


def session_options(protocol: str, session_ms: int) -> dict[str, Any]:
    """A classic member sets its session; a consumer-protocol member's is the broker's
    (group.consumer.session.timeout.ms: 6 s in the test fixture)."""
    if protocol == "consumer":
        return {"group_protocol": "consumer", "max_poll_interval_ms": 20_000}
    return {
        "session_timeout_ms": session_ms,
        "heartbeat_interval_ms": 1000,
        "max_poll_interval_ms": session_ms * 2,
    }


async def close_zombie(zombie: Zombie) -> None:
    """Close A's producer and consumer on A's loop (idempotent: the test may have)."""
    with contextlib.suppress(Exception):
        await zombie.producer.stop()
    with contextlib.suppress(Exception):
        await zombie.member.abort()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_a_zombies_fenced_commit_is_refused_and_its_transaction_aborted(
    kafka_broker: KafkaBroker,
    kafka_topic: TopicFactory,
    group_id: str,
    transactions: None,
    protocol: str,
) -> None:
    if protocol == "consumer" and not kafka_broker.caps.supports_consumer_protocol:
        pytest.skip("not applicable: caps.supports_consumer_protocol is false")
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=1), await kafka_topic(partitions=1)
    total = 50
    await produce_inputs(bootstrap, source, total, partitions=1)
    scenario = zombie_scenario(bootstrap, source, output, group_id, total, protocol)
    async with scenario as (frozen, zombie):
        frozen.thaw()

        async def a_commits() -> TransactionFencedError:
            try:
                await send_offsets_to_transaction(zombie.producer, zombie.offsets, zombie.metadata)
            except TransactionFencedError as exc:
                return exc
            finally:
                await close_zombie(zombie)
            raise AssertionError("the zombie's transactional commit was accepted")

        fenced = await frozen.run(a_commits())
    assert fenced.aborted and not fenced.producer_fenced
    # ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID (classic); under the consumer protocol
    # also the epoch codes (STALE_MEMBER_EPOCH, FENCED_MEMBER_EPOCH).
    assert fenced.code in (22, 25, 110, 113), fenced
    print(f"{protocol}: the zombie's commit was refused with error code {fenced.code}")
    history = HistoryRecorder()
    history.member("a").txn_aborted(zombie.txn)
    report = await judge_output(bootstrap, output, group_id, source, 1, history)
    report.assert_clean()  # nothing of A's aborted transaction, B's outputs once each
    assert report.outputs_checked == total


async def test_a_replaced_static_members_commit_is_fenced_by_its_instance_id(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str, transactions: None
) -> None:
    """A static member (KIP-345) replaced by a new process with the same
    ``group_instance_id`` keeps the generation - only the member id changes - so the
    generation alone cannot fence the old process; its member id and instance id do.
    No freezing needed: the replacement is immediate."""
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=1), await kafka_topic(partitions=1)
    total = 30
    await produce_inputs(bootstrap, source, total, partitions=1)
    instance = unique_name("static")
    a_producer = transactional_producer(bootstrap, "replaced")
    b_producer = transactional_producer(bootstrap, "replacement")
    await asyncio.wait_for(asyncio.gather(a_producer.start(), b_producer.start()), WAIT_S)
    a = consumer(bootstrap, source, group_id, group_instance_id=instance)
    try:
        await asyncio.wait_for(a.start(), WAIT_S)
        got: dict[Any, Any] = {}

        async def a_reads() -> None:
            while sum(len(r) for r in got.values()) < total:
                for tp, records in (await a.getmany(timeout_ms=500)).items():
                    got.setdefault(tp, []).extend(records)

        await asyncio.wait_for(a_reads(), WAIT_S)
        a_metadata = a.group_metadata()
        await a_producer.begin_transaction()
        a_txn = txn_label(a_producer)
        a_offsets = await process_batch(a_producer, output, got, a_txn)

        async with consumer(bootstrap, source, group_id, group_instance_id=instance) as b:
            b_metadata = b.group_metadata()
            assert b_metadata.member_id != a_metadata.member_id
            await takes_over(b, b_producer, output, total)
            with pytest.raises(TransactionFencedError) as info:
                await send_offsets_to_transaction(a_producer, a_offsets, a_metadata)
    finally:
        await a.abort()
        await asyncio.gather(a_producer.stop(), b_producer.stop())
    assert info.value.code == 82 and info.value.aborted, info.value  # FENCED_INSTANCE_ID
    history = HistoryRecorder()
    history.member("a").txn_aborted(a_txn)
    report = await judge_output(bootstrap, output, group_id, source, 1, history)
    report.assert_clean()
    assert report.outputs_checked == total


async def test_without_kip_447_the_zombies_commit_is_accepted_and_duplicates_output(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str, transactions: None
) -> None:
    """(c) The same zombie with aiokafka's ``send_offsets_to_transaction(offsets,
    group_id)``: TxnOffsetCommit v0 names the group only, so the coordinator cannot
    tell the zombie from the member that replaced it.  Measured on Kafka 4.4: the
    commit is accepted, the zombie's transaction commits, and every input's output is
    in the read_committed output twice - what (b) prevents."""
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=1), await kafka_topic(partitions=1)
    total = 50
    await produce_inputs(bootstrap, source, total, partitions=1)
    async with zombie_scenario(bootstrap, source, output, group_id, total) as (frozen, zombie):
        frozen.thaw()

        async def a_commits_the_aiokafka_way() -> BaseException | None:
            try:
                await zombie.producer.send_offsets_to_transaction(
                    zombie.offsets, zombie.metadata.group_id
                )
                await zombie.producer.commit_transaction()
            except Exception as exc:
                return exc
            finally:
                await close_zombie(zombie)
            return None

        refusal = await frozen.run(a_commits_the_aiokafka_way())
    assert refusal is None, f"the v0 commit was refused: {refusal!r}"
    keys = await read_output(bootstrap, output)
    assert duplicates(keys) == {f"0:{o}": 2 for o in range(total)}
    # The checker sees it too: every input's output twice, nothing missing.
    report = await judge_output(bootstrap, output, group_id, source, 1)
    assert len(report.duplicate_outputs) == total and not report.missing_outputs


# --- require_stable: a reader of the group's offsets waits for a pending commit ----------


async def test_committed_offsets_wait_for_a_pending_transactional_commit(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str, transactions: None
) -> None:
    """KIP-447's require_stable: while a transaction holding the group's offsets is open,
    OffsetFetch answers UNSTABLE_OFFSET_COMMIT and aiogroup retries; the offset read is
    the transaction's once it commits - never the one before it (which a new owner
    would resume from, re-processing input whose output is being committed)."""
    bootstrap = kafka_broker.bootstrap_servers
    source = await kafka_topic(partitions=1)
    tp = TopicPartition(source, 0)
    await produce_inputs(bootstrap, source, 10, partitions=1)
    producer = transactional_producer(bootstrap, "pending")
    await asyncio.wait_for(producer.start(), WAIT_S)
    try:
        async with (
            consumer(bootstrap, source, group_id) as owner,
            GroupConsumer(
                bootstrap_servers=bootstrap, group_id=group_id, enable_auto_commit=False
            ) as reader,
        ):
            reader.assign([tp])
            await producer.begin_transaction()
            await send_offsets_to_transaction(producer, {tp: 7}, owner)
            lookup = asyncio.ensure_future(reader.committed(tp))
            # A negative check needs a window: the lookup must still be waiting a
            # second later (without require_stable it answers None at once).
            done, _ = await asyncio.wait({lookup}, timeout=1.0)
            assert not done, f"answered while the commit was pending: {lookup.result()}"
            await asyncio.wait_for(producer.commit_transaction(), WAIT_S)
            assert await asyncio.wait_for(lookup, WAIT_S) == 7
    finally:
        await producer.stop()


# --- the runnable example ----------------------------------------------------------------


async def test_the_example_loop_runs_exactly_once(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str, transactions: None
) -> None:
    """examples/exactly_once.py (the loop docs/usage.md shows) as a process: every input
    once in the read_committed output; SIGTERM ends it cleanly."""
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=2), await kafka_topic(partitions=1)
    total = 40
    await produce_inputs(bootstrap, source, total, partitions=2)
    env = {
        **os.environ,
        "AIOGROUP_BOOTSTRAP": bootstrap,
        "INPUT_TOPIC": source,
        "OUTPUT_TOPIC": output,
        "GROUP_ID": group_id,
        # This checkout's aiogroup, whatever the environment has installed.
        "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")]),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLES / "exactly_once.py"), env=env, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    stdout = proc.stdout
    try:

        async def until_all_committed() -> None:
            while True:
                line = (await stdout.readline()).decode().strip()
                assert line, "the example exited before committing everything"
                if line == f"committed {total}":
                    return

        await asyncio.wait_for(until_all_committed(), WAIT_S)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), WAIT_S) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    outputs = await read_output(bootstrap, output, values=True)
    assert duplicates(outputs) == {}
    assert set(outputs) == {f"IN-{i}" for i in range(total)}


async def test_the_transform_loop_example_runs_exactly_once(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str, transactions: None
) -> None:
    """examples/exactly_once_loop.py (TransformLoop) as a process: once the group's
    offsets reach the input's end, SIGTERM ends it cleanly; every input once in the
    read_committed output."""
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=2), await kafka_topic(partitions=1)
    total = 40
    await produce_inputs(bootstrap, source, total, partitions=2)
    env = {
        **os.environ,
        "AIOGROUP_BOOTSTRAP": bootstrap,
        "INPUT_TOPIC": source,
        "OUTPUT_TOPIC": output,
        "GROUP_ID": group_id,
        "PYTHONPATH": os.pathsep.join([str(EXAMPLES.parent), os.environ.get("PYTHONPATH", "")]),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLES / "exactly_once_loop.py"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        tps = [TopicPartition(source, p) for p in range(2)]

        async def until_all_committed() -> None:
            while True:  # the group's offsets, polled: the process tells nothing before
                assert proc.returncode is None, "the example exited early"
                got = await group_committed(bootstrap, group_id, tps, timeout=WAIT_S)
                if sum(got.values()) >= total:
                    return
                await asyncio.sleep(0.2)

        await asyncio.wait_for(until_all_committed(), WAIT_S)
        proc.send_signal(signal.SIGTERM)
        out = (await asyncio.wait_for(proc.stdout.read(), WAIT_S)).decode()
        assert await asyncio.wait_for(proc.wait(), WAIT_S) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert f"committed {total} records" in out, out
    outputs = await read_output(bootstrap, output, values=True)
    assert duplicates(outputs) == {}
    assert set(outputs) == {f"IN-{i}" for i in range(total)}


# --- a rebalance mid-transaction ---------------------------------------------------------


@dataclass
class Hold:
    """Once ``after`` inputs are committed, the next transaction stops between its outputs
    and its offsets: ``holding`` is set, and it goes on when ``release`` is."""

    after: int
    holding: asyncio.Event
    release: asyncio.Event


async def transform_loop(
    member: GroupConsumer,
    producer: AIOKafkaProducer,
    output: str,
    progress: dict[str, int],
    name: str,
    done: asyncio.Event,
    hold: Hold | None = None,
    history: HistoryRecorder | None = None,
) -> None:
    """The loop of examples/exactly_once.py, counting committed inputs in ``progress``
    (per member and in total) until ``done`` is set; each refused (so aborted)
    transaction is recorded in ``history``."""
    while not done.is_set():
        batch = await member.getmany(timeout_ms=200, max_records=10)
        if not batch:
            continue
        txn = txn_label(producer)
        try:
            async with transaction(producer):
                await asyncio.sleep(TRANSFORM_COST_S)  # the transform's work, not a wait
                offsets = await process_batch(producer, output, batch, txn)
                if hold is not None and progress.get(name, 0) >= hold.after:
                    hold.holding.set()
                    await hold.release.wait()
                    hold = None
                await send_offsets_to_transaction(producer, offsets, member)
        except (TransactionFencedError, CommitFailedError) as exc:
            if history is not None:
                history.member(name).txn_aborted(txn)
            key = f"{name}-refused-{type(exc).__name__}"
            progress[key] = progress.get(key, 0) + 1
            with contextlib.suppress(CommitFailedError, IllegalStateError):
                await member.seek_to_committed()
            continue
        count = sum(len(r) for r in batch.values())
        progress[name] = progress.get(name, 0) + count
        progress["total"] = progress.get("total", 0) + count
        if progress["total"] >= progress["goal"]:
            done.set()


#: What transforming a batch costs (so B's share is not gone before it starts).
TRANSFORM_COST_S = 0.005


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
async def test_a_rebalance_mid_transaction_keeps_each_input_once(
    kafka_broker: KafkaBroker,
    kafka_topic: TopicFactory,
    group_id: str,
    transactions: None,
    assignor: str,
) -> None:
    """A processes a 4-partition input in small transactions; B joins while A holds one
    open (outputs sent, offsets not), so partitions move under it (all revoked first:
    range, eager - A's held commit is then refused as not owned; only the moving ones:
    cooperative-sticky - it goes through if its partitions stayed).  Both run the loop
    to the end: the output holds each input once, the group's offsets are the end."""
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=4), await kafka_topic(partitions=1)
    total = 4000
    await produce_inputs(bootstrap, source, total, partitions=4)
    progress: dict[str, int] = {"goal": total}
    done = asyncio.Event()
    history = HistoryRecorder()
    hold = Hold(total // 10, asyncio.Event(), asyncio.Event())
    options = {"partition_assignment_strategy": (assignor,)}
    producers = [transactional_producer(bootstrap, n) for n in ("a", "b")]
    await asyncio.wait_for(asyncio.gather(*(p.start() for p in producers)), WAIT_S)
    try:
        async with consumer(bootstrap, source, group_id, **options) as a:
            a_loop = asyncio.ensure_future(
                transform_loop(a, producers[0], output, progress, "a", done, hold, history)
            )
            try:
                # A holds a transaction open (outputs sent, offsets not) while B joins:
                # B's start() returns once the rebalance has given it partitions.
                await asyncio.wait_for(hold.holding.wait(), WAIT_S)
                async with consumer(bootstrap, source, group_id, **options) as b:
                    hold.release.set()
                    b_loop = transform_loop(
                        b, producers[1], output, progress, "b", done, history=history
                    )
                    await asyncio.wait_for(asyncio.gather(a_loop, b_loop), WAIT_S)
                    committed = {p: await b.committed(TopicPartition(source, p)) for p in range(4)}
            finally:
                hold.release.set()
                a_loop.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await a_loop
    finally:
        await asyncio.gather(*(p.stop() for p in producers))
    print(f"{assignor}: {progress}")
    assert progress.get("b", 0) > 0, "B never committed: the partitions did not move"
    assert committed == {p: total // 4 for p in range(4)}
    report = await judge_output(bootstrap, output, group_id, source, 4, history)
    report.assert_clean()
    assert report.outputs_checked == total


# --- kill -9 mid-transaction -------------------------------------------------------------

#: Member A as a process, up to its open transaction: reads all ``TOTAL`` inputs (its
#: group metadata taken then), begins a transaction, sends one labelled output per input.
#: The scripts below say what it does next.
MEMBER_WITH_OPEN_TRANSACTION = """
import asyncio, os, sys
from aiokafka import AIOKafkaProducer
from aiogroup import GroupConsumer
from aiogroup.errors import TransactionFencedError
from aiogroup.testing.outputs import output_headers
from aiogroup.transactions import send_offsets_to_transaction

async def open_transaction():
    env = os.environ
    consumer = GroupConsumer(env["INPUT_TOPIC"], bootstrap_servers=env["BOOTSTRAP"],
                             group_id=env["GROUP_ID"], enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed",
                             session_timeout_ms=3000, heartbeat_interval_ms=1000)
    producer = AIOKafkaProducer(bootstrap_servers=env["BOOTSTRAP"],
                                transactional_id=env["TRANSACTIONAL_ID"],
                                transaction_timeout_ms=int(env.get("TXN_TIMEOUT_MS", "60000")))
    await producer.start()
    await consumer.start()
    got, total = {}, int(env["TOTAL"])
    while sum(map(len, got.values())) < total:
        for tp, records in (await consumer.getmany(timeout_ms=500)).items():
            got.setdefault(tp, []).extend(records)
    metadata = consumer.group_metadata()
    await producer.begin_transaction()
    sent = [await producer.send(env["OUTPUT_TOPIC"], r.value.upper(), partition=0,
                                key=f"{tp.partition}:{r.offset}".encode(),
                                headers=output_headers(tp.topic, tp.partition, r.offset,
                                                       env["TRANSACTIONAL_ID"]))
            for tp, records in got.items() for r in records]
    await asyncio.gather(*sent)
    offsets = {tp: rs[-1].offset + 1 for tp, rs in got.items()}
    return consumer, producer, metadata, offsets
"""

#: Sends the offsets in the open transaction, says "open", and waits to be killed.
KILLED_MEMBER = (
    MEMBER_WITH_OPEN_TRANSACTION
    + """
async def main():
    consumer, producer, metadata, offsets = await open_transaction()
    await send_offsets_to_transaction(producer, offsets, consumer)
    print("open", flush=True)
    await asyncio.sleep(120)

asyncio.run(main())
"""
)


async def test_a_member_killed_mid_transaction_is_aborted_and_its_input_redone_once(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str, transactions: None
) -> None:
    """kill -9 after A's outputs and offsets are in its transaction, before the commit.
    B takes the partition when A's session expires; its committed-offset lookup
    (require_stable) waits until the transaction coordinator aborts A's transaction at
    its timeout, then B redoes the input from the start: each input once."""
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=1), await kafka_topic(partitions=1)
    total, txn_timeout_ms = 40, 5000
    await produce_inputs(bootstrap, source, total, partitions=1)
    killed_txn = unique_name("killed")  # also the label its outputs carry
    env = member_env(
        bootstrap,
        source,
        output,
        group_id,
        TOTAL=str(total),
        TRANSACTIONAL_ID=killed_txn,
        TXN_TIMEOUT_MS=str(txn_timeout_ms),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", KILLED_MEMBER, env=env, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), WAIT_S)
        assert line.decode().strip() == "open"
    finally:
        proc.kill()  # SIGKILL: no commit, no abort, no LeaveGroup
        await proc.wait()
    killed_at = asyncio.get_running_loop().time()
    producer = transactional_producer(bootstrap, "after-kill")
    await asyncio.wait_for(producer.start(), WAIT_S)
    try:
        async with consumer(bootstrap, source, group_id) as b:
            started_at = asyncio.get_running_loop().time()
            first_batch_at = await takes_over(b, producer, output, total)
            assert await b.committed(TopicPartition(source, 0)) == total
    finally:
        await producer.stop()
    waited = first_batch_at - killed_at
    print(
        f"kill -9: B joined {started_at - killed_at:.1f}s after the kill and got its first "
        f"records after {waited:.1f}s (A's transaction timeout {txn_timeout_ms} ms)"
    )
    # B's position waited for the abort, which the coordinator cannot do before A's
    # transaction times out (A began it moments before the kill): a causal lower bound.
    assert waited >= 0.8 * txn_timeout_ms / 1000
    history = HistoryRecorder()
    history.member("a").txn_aborted(killed_txn)  # never committed: the coordinator aborts it
    report = await judge_output(bootstrap, output, group_id, source, 1, history)
    report.assert_clean()
    assert report.outputs_checked == total


# --- a real SIGSTOPped process as the zombie ---------------------------------------------

#: Says "open" with its transaction open; on a line from stdin sends the offsets with the
#: group metadata it read the batch under, then commits; prints what happened.
STOPPED_MEMBER = (
    MEMBER_WITH_OPEN_TRANSACTION
    + """
async def main():
    consumer, producer, metadata, offsets = await open_transaction()
    print("open", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    try:
        await send_offsets_to_transaction(producer, offsets, metadata)
        await producer.commit_transaction()
        print("committed", flush=True)
    except TransactionFencedError as exc:
        print(f"fenced {exc.code} aborted={exc.aborted}", flush=True)
    finally:
        await producer.stop()
        await consumer.abort()

asyncio.run(main())
"""
)


async def test_a_sigstopped_process_wakes_fenced_and_nothing_of_it_is_visible(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str, transactions: None
) -> None:
    """A real process with a transaction open (outputs sent) is SIGSTOPped past its
    session; B takes the input over and commits it all; A is woken (SIGCONT) and sends
    its offsets with the metadata it read the batch under: refused (KIP-447), its
    transaction aborted, nothing of it visible read_committed - each input once."""
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=1), await kafka_topic(partitions=1)
    total = 30
    await produce_inputs(bootstrap, source, total, partitions=1)
    a_txn = unique_name("stopped")
    env = member_env(bootstrap, source, output, group_id, TOTAL=str(total), TRANSACTIONAL_ID=a_txn)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        STOPPED_MEMBER,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    history = HistoryRecorder()
    producer = transactional_producer(bootstrap, "after-stop")
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), WAIT_S)
        assert line.decode().strip() == "open"
        proc.send_signal(signal.SIGSTOP)
        history.add("a", "frozen")
        await asyncio.wait_for(producer.start(), WAIT_S)
        # B's start() returns once it is assigned: after A's session (3 s) has expired.
        async with consumer(bootstrap, source, group_id) as b:
            await takes_over(b, producer, output, total)
        answer = await wake_and_commit(proc)
        assert proc.returncode == 0
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            await proc.wait()
        await producer.stop()
    print(f"the woken process: {answer}")
    # UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION: the group replaced it.
    assert answer in ("fenced 25 aborted=True", "fenced 22 aborted=True"), answer
    history.member("a").txn_aborted(a_txn)
    report = await judge_output(bootstrap, output, group_id, source, 1, history)
    report.assert_clean()
    assert report.outputs_checked == total


#: The same zombie with confluent-kafka's asyncio pair: ``AIOProducer`` and the
#: ``consumer_group_metadata()`` of an ``AIOConsumer`` taken when the batch was read.
CONFLUENT_STOPPED_MEMBER = """
import asyncio, os, sys
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.aio import AIOConsumer, AIOProducer

async def main():
    env = os.environ
    consumer = AIOConsumer({"bootstrap.servers": env["BOOTSTRAP"], "group.id": env["GROUP_ID"],
                            "enable.auto.commit": False, "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed", "session.timeout.ms": 6000,
                            "heartbeat.interval.ms": 1000})
    producer = AIOProducer({"bootstrap.servers": env["BOOTSTRAP"],
                            "transactional.id": env["TRANSACTIONAL_ID"]})
    await producer.init_transactions()
    await consumer.subscribe([env["INPUT_TOPIC"]])
    got, total = [], int(env["TOTAL"])
    while len(got) < total:
        got += [m for m in await consumer.consume(num_messages=total, timeout=0.5)
                if m.error() is None]
    metadata = await consumer.consumer_group_metadata()
    await producer.begin_transaction()
    for m in got:
        await producer.produce(env["OUTPUT_TOPIC"], m.value().upper(), partition=0,
                               key=f"{m.partition()}:{m.offset()}".encode())
    await producer.flush()
    print("open", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    offsets = [TopicPartition(got[-1].topic(), got[-1].partition(), got[-1].offset() + 1)]
    try:
        await producer.send_offsets_to_transaction(offsets, metadata)
        await producer.commit_transaction()
        print("committed", flush=True)
    except KafkaException as exc:
        error = exc.args[0]
        print(f"refused {error.name()} abortable={error.txn_requires_abort()}", flush=True)
        if error.txn_requires_abort():
            await producer.abort_transaction()
    finally:
        await consumer.close()

asyncio.run(main())
"""


async def test_confluents_sigstopped_zombie_is_fenced_too(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str, transactions: None
) -> None:
    """The SIGSTOP zombie scenario with confluent-kafka's ``AIOProducer`` and
    ``consumer_group_metadata()`` (librdkafka implements KIP-447): measured to compare
    with aiogroup's - the woken process's offsets commit is refused, its transaction
    aborted, and the output holds each input once."""
    pytest.importorskip("confluent_kafka.aio", reason="not applicable: no confluent-kafka")
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=1), await kafka_topic(partitions=1)
    total = 30
    await produce_inputs(bootstrap, source, total, partitions=1)
    env = member_env(
        bootstrap,
        source,
        output,
        group_id,
        TOTAL=str(total),
        TRANSACTIONAL_ID=unique_name("confluent-stopped"),
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        CONFLUENT_STOPPED_MEMBER,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    producer = transactional_producer(bootstrap, "after-confluent")
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), WAIT_S)
        assert line.decode().strip() == "open"
        proc.send_signal(signal.SIGSTOP)
        await asyncio.wait_for(producer.start(), WAIT_S)
        async with consumer(bootstrap, source, group_id) as b:  # after A's 6 s session
            await takes_over(b, producer, output, total)
        answer = await wake_and_commit(proc)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            await proc.wait()
        await producer.stop()
    print(f"confluent's woken process: {answer}")
    assert answer.startswith("refused "), answer
    keys = await read_output(bootstrap, output)
    assert duplicates(keys) == {} and sorted(keys) == sorted(f"0:{o}" for o in range(total))


# --- a cut connection --------------------------------------------------------------------


async def test_a_cut_connection_mid_transaction_is_retried_and_commits_once(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str, transactions: None
) -> None:
    """Every connection of the transactional producer is cut after the outputs are sent
    and before the offsets are: the commit reconnects (finding the coordinators again)
    and the transaction commits; each input once, the offsets at the input's end."""
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=1), await kafka_topic(partitions=1)
    total = 20
    await produce_inputs(bootstrap, source, total, partitions=1)
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    proxy = await FaultProxy(host, int(port)).start()
    producer = transactional_producer(f"127.0.0.1:{proxy.port}", "cut")
    redirect_to(producer, proxy)
    try:
        await asyncio.wait_for(producer.start(), WAIT_S)
        async with consumer(bootstrap, source, group_id) as member:
            got: dict[Any, Any] = {}

            async def reads() -> None:
                while sum(len(r) for r in got.values()) < total:
                    for tp, records in (await member.getmany(timeout_ms=500)).items():
                        got.setdefault(tp, []).extend(records)

            await asyncio.wait_for(reads(), WAIT_S)
            async with transaction(producer):
                offsets = await process_batch(producer, output, got, txn_label(producer))
                cut_before = sum(proxy.requests.values())
                proxy.cut()
                await send_offsets_to_transaction(producer, offsets, member)
                assert sum(proxy.requests.values()) > cut_before  # went out again, reconnected
            assert await member.committed(TopicPartition(source, 0)) == total
    finally:
        await producer.stop()
        await proxy.close()
    report = await judge_output(bootstrap, output, group_id, source, 1)
    report.assert_clean()
    assert report.outputs_checked == total


def redirect_to(producer: AIOKafkaProducer, proxy: FaultProxy) -> None:
    """Every broker the producer's client learns of is reached through ``proxy``."""
    cluster = producer.client.cluster
    original = cluster.broker_metadata

    def broker_metadata(node_id: Any) -> Any:
        meta = original(node_id)
        return None if meta is None else meta._replace(host="127.0.0.1", port=proxy.port)

    cluster.broker_metadata = broker_metadata


# --- the TransformLoop helper --------------------------------------------------------------


class RevokeSeen:
    """A rebalance hook added before the loop's: it runs first, so it tells the test that
    a revocation has begun while the loop's own hook is about to settle the transaction."""

    def __init__(self) -> None:
        self.revoking = asyncio.Event()

    async def partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.revoking.set()

    async def partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        return None

    async def partitions_lost(self, lost: set[TopicPartition]) -> None:
        return None


@dataclass
class Transformer:
    """TransformLoop's transform for these tests: one labelled output per input; once
    ``block_after`` inputs are done, the next batch blocks (outputs sent) until
    ``release`` is set - a transaction held open across a rebalance."""

    output: str
    block_after: int | None = None
    release: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    blocked: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    blocked_txn: str = ""
    seen: int = 0

    async def __call__(self, producer: AIOKafkaProducer, batch: dict[Any, Any]) -> None:
        txn = txn_label(producer)
        await process_batch(producer, self.output, batch, txn)
        if self.block_after is not None and self.seen >= self.block_after:
            self.block_after = None
            self.blocked_txn = txn
            self.blocked.set()
            await self.release.wait()
        self.seen += sum(len(r) for r in batch.values())


async def run_two_loops(
    bootstrap: str,
    source: str,
    total: int,
    group: str,
    a_transform: Transformer,
    b_transform: Transformer,
    *,
    revoke_timeout_ms: int,
    release_on_revoke: bool,
) -> tuple[TransformLoop, TransformLoop]:
    """A's loop runs until its transform blocks with a transaction open; B joins (eager
    assignor: A's revocation covers everything).  With ``release_on_revoke`` A's
    transform is released as soon as A's revocation begins; otherwise it stays blocked
    and the revoke timeout decides.  Both loops run until the group's offsets reach
    the input's end."""
    options = {"partition_assignment_strategy": ("range",)}
    producers = [transactional_producer(bootstrap, n) for n in ("loop-a", "loop-b")]
    await asyncio.wait_for(asyncio.gather(*(p.start() for p in producers)), WAIT_S)
    try:
        async with consumer(bootstrap, source, group, **options) as a:
            seen = RevokeSeen()
            a._rebalance_hooks.add(seen)  # before the loop's hook: runs first
            a_loop = TransformLoop(
                a, producers[0], a_transform, max_records=20, revoke_timeout_ms=revoke_timeout_ms
            )
            a_task = asyncio.ensure_future(a_loop.run())
            try:
                await asyncio.wait_for(a_transform.blocked.wait(), WAIT_S)
                b = consumer(bootstrap, source, group, **options)
                b_start = asyncio.ensure_future(b.start())
                await asyncio.wait_for(seen.revoking.wait(), WAIT_S)
                if release_on_revoke:
                    a_transform.release.set()
                await asyncio.wait_for(b_start, WAIT_S)
                try:
                    b_loop = TransformLoop(b, producers[1], b_transform, max_records=20)
                    b_task = asyncio.ensure_future(b_loop.run())

                    async def until_all_committed() -> None:
                        tps = [TopicPartition(source, p) for p in range(2)]
                        while True:  # the group's offsets, polled: no event for them
                            got = await group_committed(bootstrap, group, tps, timeout=WAIT_S)
                            if sum(got.values()) >= total:
                                return
                            await asyncio.sleep(0.2)

                    await asyncio.wait_for(until_all_committed(), WAIT_S)
                    await b_loop.stop()
                    await a_loop.stop()
                    await asyncio.wait_for(asyncio.gather(a_task, b_task), WAIT_S)
                finally:
                    await b.stop()
            finally:
                a_transform.release.set()
                if not a_task.done():
                    a_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await a_task
    finally:
        await asyncio.gather(*(p.stop() for p in producers))
    return a_loop, b_loop


async def test_the_loop_helper_commits_the_open_transaction_before_a_revoke_returns(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str, transactions: None
) -> None:
    """TransformLoop: B joins while A's transaction is open; A's revocation waits for it
    and it commits (A's transform is released when the revocation begins) - nothing is
    aborted, and B continues from A's offsets: each input once."""
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=2), await kafka_topic(partitions=1)
    total = 400
    await produce_inputs(bootstrap, source, total, partitions=2)
    a_transform, b_transform = Transformer(output, block_after=100), Transformer(output)
    a_loop, b_loop = await run_two_loops(
        bootstrap,
        source,
        total,
        group_id,
        a_transform,
        b_transform,
        revoke_timeout_ms=30_000,
        release_on_revoke=True,
    )
    print(f"A committed {a_loop.records_committed}, B {b_loop.records_committed}")
    assert a_loop.cancelled_by_rebalance == 0 and a_loop.transactions_aborted == 0
    assert a_loop.records_committed > 100  # the held transaction committed
    assert b_loop.records_committed > 0
    report = await judge_output(bootstrap, output, group_id, source, 2)
    report.assert_clean()
    assert report.outputs_checked == total


async def test_the_loop_helper_aborts_a_transaction_still_open_at_the_revoke_timeout(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str, transactions: None
) -> None:
    """TransformLoop: A's transform never finishes; past ``revoke_timeout_ms`` the
    revocation cancels it and aborts the transaction, and B redoes that input: nothing
    of the aborted transaction visible, each input once."""
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=2), await kafka_topic(partitions=1)
    total = 400
    await produce_inputs(bootstrap, source, total, partitions=2)
    a_transform, b_transform = Transformer(output, block_after=100), Transformer(output)
    a_loop, b_loop = await run_two_loops(
        bootstrap,
        source,
        total,
        group_id,
        a_transform,
        b_transform,
        revoke_timeout_ms=1000,
        release_on_revoke=False,
    )
    assert a_loop.cancelled_by_rebalance == 1 and a_loop.transactions_aborted == 1
    assert b_loop.records_committed >= 100  # B redid at least the aborted batch
    history = HistoryRecorder()
    history.member("a").txn_aborted(a_transform.blocked_txn)
    report = await judge_output(bootstrap, output, group_id, source, 2, history)
    report.assert_clean()
    assert report.outputs_checked == total
