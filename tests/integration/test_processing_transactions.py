"""The processing layer inside transactions on a real broker (issue 27 with issue 25).

``Processor(consumer, handler, transactional_producer=producer)``: handlers return
their outputs, which go into one transaction per committed prefix with the offsets that
count their records as finished (KIP-447 fenced).  Judged by the ownership-history
checker's output rules on the output topic read with read_committed: each input's
output exactly once below the group's committed offsets, which are the input's end.

(a) concurrency > 1, key ordering: exactly once, and each key's outputs in input order;
(b) a member killed (-9) mid-processing, its transaction open: the next owner waits for
    the coordinator's abort and redoes only what the dead member did not commit;
(c) a second member joins mid-processing (eager and cooperative): the revocation
    commits the open transaction before the partitions move;
(d) a zombie: a member frozen past its session with outputs in an open transaction
    wakes after the new owner processed everything: its transaction is aborted.

Transactions need ``caps.supports_transactions`` (Tansu refuses InitProducerId for a
transactional id): run with ``AIOGROUP_BROKER=kafka``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import random
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aiokafka import AIOKafkaProducer
from frozen_loop import FrozenLoop

from aiogroup import GroupConsumer, Processor, TopicPartition
from aiogroup.processing import Output
from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.history import HistoryRecorder, HistoryReport, check_history
from aiogroup.testing.outputs import (
    group_committed,
    output_headers,
    read_committed,
    record_outputs,
)
from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration

WAIT_S = 60.0

T = TypeVar("T")

#: This checkout (the subprocesses import its aiogroup) and its examples.
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def transactions(kafka_broker: KafkaBroker) -> None:
    if not kafka_broker.caps.supports_transactions:
        pytest.skip(
            "not applicable: this broker refuses transactional producers "
            "(caps.supports_transactions; test_broker.py::test_caps_transactions asserts it)"
        )


async def produce_inputs(
    bootstrap: str, topic: str, count: int, partitions: int, keys: int
) -> None:
    """``in-i`` with key ``k<i % keys>`` to partition ``i % partitions``."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=2)
    await producer.start()
    try:
        sent = [
            await producer.send(
                topic, f"in-{i}".encode(), key=f"k{i % keys}".encode(), partition=i % partitions
            )
            for i in range(count)
        ]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


def member(bootstrap: str, topic: str, group: str, **options: Any) -> GroupConsumer:
    if options.get("group_protocol") != "consumer":  # the broker sets a KIP-848 session
        options.setdefault("session_timeout_ms", 6000)
        options.setdefault("heartbeat_interval_ms", 500)
    return GroupConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        **options,
    )


def transactional_producer(bootstrap: str, name: str) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        transactional_id=unique_name(name),
        request_timeout_ms=10_000,
    )


def transform(output: str, name: str, seen: list[tuple[str, str]] | None = None) -> Any:
    """The handler: awaits a little I/O, returns one output per input (keyed like it,
    naming it in headers, all to partition 0 so the output's order is the send order)."""

    async def handle(record: Any) -> Output:
        await asyncio.sleep(random.uniform(0.0005, 0.004))
        if seen is not None:
            seen.append((name, f"{record.partition}:{record.offset}"))
        return Output(
            output,
            record.value.upper(),
            key=record.key,
            headers=output_headers(record.topic, record.partition, record.offset, name),
            partition=0,
        )

    return handle


async def until_committed(
    bootstrap: str, group: str, tps: list[TopicPartition], ends: dict[TopicPartition, int]
) -> None:
    """Until the group's committed offsets (read from outside, require_stable) are the
    input's ends: a bounded poll of broker state (no event exists for it)."""

    async def poll() -> None:
        while await group_committed(bootstrap, group, tps, timeout=WAIT_S) != ends:  # noqa: ASYNC110
            await asyncio.sleep(0.2)

    await asyncio.wait_for(poll(), WAIT_S)


async def judge(
    bootstrap: str, output: str, group: str, source: str, partitions: int
) -> tuple[HistoryReport, list[Any]]:
    history = HistoryRecorder()
    records = await read_committed(bootstrap, output, partitions=1, timeout=WAIT_S)
    record_outputs(history, records)
    tps = [TopicPartition(source, p) for p in range(partitions)]
    history.broker_committed(await group_committed(bootstrap, group, tps, timeout=WAIT_S))
    report = check_history(history.events(), outputs=True)
    print(f"checker: {report.summary()}")
    return report, records


def key_order_violations(records: list[Any]) -> int:
    """Outputs of one key (one input partition) out of input offset order."""
    last: dict[tuple[bytes, int], int] = {}
    bad = 0
    for r in records:
        source = dict(r.headers)["aiogroup-input"].decode()
        _, partition, offset = source.rsplit("/", 2)
        k = (r.key, int(partition))
        if last.get(k, -1) > int(offset):
            bad += 1
        last[k] = int(offset)
    return bad


async def records_written(bootstrap: str, topic: str) -> int:
    """Records in ``topic`` (one partition) as a read_uncommitted reader sees them:
    aborted outputs included (the control markers are not records)."""
    async with GroupConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as r:
        tp = TopicPartition(topic, 0)
        r.assign([tp])
        end = (await r.end_offsets([tp]))[tp]
        count = 0

        async def drain() -> None:
            nonlocal count
            while await r.position(tp) < end:
                count += sum(len(b) for b in (await r.getmany(tp, timeout_ms=500)).values())

        await asyncio.wait_for(drain(), WAIT_S)
        return count


async def run_processor(processor: Processor) -> asyncio.Task[None]:
    return asyncio.get_running_loop().create_task(processor.run())


async def stop(processor: Processor, task: asyncio.Task[None]) -> None:
    await asyncio.wait_for(processor.stop(), WAIT_S)
    await asyncio.wait_for(task, WAIT_S)  # raises what run() raised


# --- (a) exactly once, concurrent and key-ordered ----------------------------------------


def sync_transform(output: str, name: str) -> Any:
    """:func:`transform` as a plain function (the processor runs it in its thread pool)."""

    def handle(record: Any) -> Output:
        time.sleep(random.uniform(0.0005, 0.004))
        return Output(
            output,
            record.value.upper(),
            key=record.key,
            headers=output_headers(record.topic, record.partition, record.offset, name),
            partition=0,
        )

    return handle


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_transactional_processor_writes_each_inputs_output_once_in_key_order(
    kafka_broker: KafkaBroker,
    kafka_topic: TopicFactory,
    group_id: str,
    transactions: None,
    kind: str,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=4), await kafka_topic(partitions=1)
    total = 2000
    await produce_inputs(bootstrap, source, total, partitions=4, keys=40)
    tps = [TopicPartition(source, p) for p in range(4)]
    producer = transactional_producer(bootstrap, "proc")
    await asyncio.wait_for(producer.start(), WAIT_S)
    try:
        async with member(bootstrap, source, group_id) as consumer:
            processor = Processor(
                consumer,
                transform(output, "a") if kind == "async" else sync_transform(output, "a"),
                concurrency=16,
                ordering="key",
                commit_interval_ms=100,
                transactional_producer=producer,
            )
            task = await run_processor(processor)
            await until_committed(bootstrap, group_id, tps, {tp: total // 4 for tp in tps})
            stats = processor.metrics()["transactions"]
            await stop(processor, task)
    finally:
        await producer.stop()
    print(f"transactions: {stats}")
    assert stats["transactions_committed"] >= 2  # the interval closed several
    assert stats["transactions_aborted"] == 0
    report, records = await judge(bootstrap, output, group_id, source, 4)
    report.assert_clean()
    assert report.outputs_checked == total
    assert key_order_violations(records) == 0


# --- (b) kill -9 mid-processing ------------------------------------------------------------

#: A processor in its own process: says "open" once a transaction of its has
#: committed and the next has outputs in the log, then goes on until it is killed.
KILLED_MEMBER = """
import asyncio, os, sys
from aiokafka import AIOKafkaProducer
from aiogroup import GroupConsumer, Processor
from aiogroup.processing import Output
from aiogroup.testing.outputs import output_headers

async def main():
    env = os.environ
    consumer = GroupConsumer(env["INPUT_TOPIC"], bootstrap_servers=env["BOOTSTRAP"],
                             group_id=env["GROUP_ID"], enable_auto_commit=False,
                             auto_offset_reset="earliest", isolation_level="read_committed",
                             session_timeout_ms=3000, heartbeat_interval_ms=500)
    producer = AIOKafkaProducer(bootstrap_servers=env["BOOTSTRAP"],
                                transactional_id=env["TRANSACTIONAL_ID"],
                                transaction_timeout_ms=int(env["TXN_TIMEOUT_MS"]))
    await producer.start()
    await consumer.start()

    async def handle(record):
        await asyncio.sleep(0.02)
        return Output(env["OUTPUT_TOPIC"], record.value.upper(), key=record.key, partition=0,
                      headers=output_headers(record.topic, record.partition, record.offset,
                                             "killed"))

    processor = Processor(consumer, handle, concurrency=4, ordering="key",
                          commit_interval_ms=1000, transactional_producer=producer)
    task = asyncio.ensure_future(processor.run())
    # A transaction committed, and the open one has 20 outputs in the log: then
    # "open" (the test kills it now).  Read through the processor's insides: no public
    # event says an output was delivered before its transaction ends.
    txn = processor._txn
    while txn.transactions_committed < 1 or txn._outputs.sent < 20:
        await asyncio.sleep(0.01)
    await asyncio.gather(*list(txn._outputs._futures))
    print("open", flush=True)
    await task

asyncio.run(main())
"""


async def test_a_processor_killed_mid_processing_leaves_each_inputs_output_once(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str, transactions: None
) -> None:
    """kill -9 while the processor has a transaction open with outputs written (it
    commits every second and takes 20 ms a record at concurrency 4): the coordinator
    aborts that transaction at its timeout; the next owner's committed-offset lookup
    (require_stable) waits for that, then it processes from the dead member's last
    commit (skipping the runs its metadata lists): each input's output once."""
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=2), await kafka_topic(partitions=1)
    total = 1200
    await produce_inputs(bootstrap, source, total, partitions=2, keys=30)
    tps = [TopicPartition(source, p) for p in range(2)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "BOOTSTRAP": bootstrap,
        "INPUT_TOPIC": source,
        "OUTPUT_TOPIC": output,
        "GROUP_ID": group_id,
        "TRANSACTIONAL_ID": unique_name("killed"),
        "TXN_TIMEOUT_MS": "4000",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", KILLED_MEMBER, env=env, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), WAIT_S)
        assert line.decode().strip() == "open"
        # Mid-processing: at least one transaction committed, the input not all done.
        before = await group_committed(bootstrap, group_id, tps, timeout=WAIT_S)
    finally:
        proc.kill()  # SIGKILL: no commit, no abort, no LeaveGroup
        await proc.wait()
    done_before = sum(before.values())
    assert 0 < done_before < total, before
    seen: list[tuple[str, str]] = []
    producer = transactional_producer(bootstrap, "after-kill")
    await asyncio.wait_for(producer.start(), WAIT_S)
    try:
        async with member(bootstrap, source, group_id) as consumer:
            processor = Processor(
                consumer,
                transform(output, "b", seen),
                concurrency=16,
                commit_interval_ms=100,
                transactional_producer=producer,
            )
            task = await run_processor(processor)
            await until_committed(bootstrap, group_id, tps, {tp: total // 2 for tp in tps})
            await stop(processor, task)
    finally:
        await producer.stop()
    redone = len(seen)
    # The kill hit an open transaction with outputs in it: they are in the log, aborted.
    written = await records_written(bootstrap, output)
    print(f"kill -9: {written - total} output(s) of the killed member's open transaction aborted")
    assert written > total
    print(f"kill -9: committed before the kill {done_before}, processed after {redone}")
    # The next owner processed only what the dead member had not committed.
    assert redone <= total - done_before
    report, _ = await judge(bootstrap, output, group_id, source, 2)
    report.assert_clean()
    assert report.outputs_checked == total


# --- (c) a rebalance mid-processing ------------------------------------------------------


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky", "consumer-protocol"])
async def test_a_member_joining_mid_processing_keeps_each_inputs_output_once(
    kafka_broker: KafkaBroker,
    kafka_topic: TopicFactory,
    group_id: str,
    transactions: None,
    assignor: str,
) -> None:
    """A processes a 4-partition input; once it has committed some, B joins and the
    partitions move (all revoked first with range; only the moving ones with
    cooperative-sticky and under the consumer protocol, KIP-848, where the broker moves
    them).  A's revocation drains and commits its open transaction before the partitions
    go: the output holds each input once, and B did part of it."""
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=4), await kafka_topic(partitions=1)
    total = 3000
    await produce_inputs(bootstrap, source, total, partitions=4, keys=40)
    tps = [TopicPartition(source, p) for p in range(4)]
    options: dict[str, Any] = (
        {"group_protocol": "consumer"}
        if assignor == "consumer-protocol"
        else {"partition_assignment_strategy": (assignor,)}
    )
    seen: list[tuple[str, str]] = []
    progress = asyncio.Event()

    def handler(name: str) -> Callable[[Any], Awaitable[Output]]:
        inner = transform(output, name, seen)

        async def handle(record: Any) -> Output:
            await asyncio.sleep(0.003)  # so that B's share is not gone before it joins
            out: Output = await inner(record)
            if len(seen) >= total // 5:
                progress.set()
            return out

        return handle

    producers = [transactional_producer(bootstrap, n) for n in ("a", "b")]
    await asyncio.wait_for(asyncio.gather(*(p.start() for p in producers)), WAIT_S)
    try:
        async with member(bootstrap, source, group_id, **options) as a:
            pa = Processor(
                a,
                handler("a"),
                concurrency=8,
                commit_interval_ms=200,
                transactional_producer=producers[0],
            )
            ta = await run_processor(pa)
            await asyncio.wait_for(progress.wait(), WAIT_S)
            async with member(bootstrap, source, group_id, **options) as b:
                pb = Processor(
                    b,
                    handler("b"),
                    concurrency=8,
                    commit_interval_ms=200,
                    transactional_producer=producers[1],
                )
                tb = await run_processor(pb)
                await until_committed(bootstrap, group_id, tps, {tp: total // 4 for tp in tps})
                stats = {"a": pa.metrics()["transactions"], "b": pb.metrics()["transactions"]}
                await stop(pb, tb)
            await stop(pa, ta)
    finally:
        await asyncio.gather(*(p.stop() for p in producers))
    by_member = collections.Counter(name for name, _ in seen)
    print(f"{assignor}: processed {dict(by_member)}, transactions {stats}")
    assert by_member["b"] > 0, "B processed nothing: the partitions did not move"
    report, _ = await judge(bootstrap, output, group_id, source, 4)
    report.assert_clean()
    assert report.outputs_checked == total


# --- (d) a zombie: frozen past its session with a transaction open -------------------------


@pytest.mark.parametrize("interval_ms", [60_000, 300])
async def test_a_processor_frozen_with_a_transaction_open_wakes_and_nothing_of_it_is_visible(
    kafka_broker: KafkaBroker,
    kafka_topic: TopicFactory,
    group_id: str,
    transactions: None,
    interval_ms: int,
) -> None:
    """A's processor has outputs in an open transaction when its event loop is frozen
    past its session (with a 60 s interval it has committed nothing; with 300 ms, some,
    and its next commit is overdue when it wakes).  B takes the partitions
    and processes everything.  A wakes: its loss, or its stop's commit with the stale
    group metadata (fenced, KIP-447), aborts the transaction - whichever its timers run
    first.  The output holds each input once; A's outputs are in the log, aborted."""
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=2), await kafka_topic(partitions=1)
    total = 600
    await produce_inputs(bootstrap, source, total, partitions=2, keys=20)
    tps = [TopicPartition(source, p) for p in range(2)]
    frozen = FrozenLoop()
    a_options = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 1000}
    # Made on A's loop (aiokafka binds a producer to the loop it is created on).
    a_producer: AIOKafkaProducer | None = None
    a: GroupConsumer | None = None

    async def slow(record: Any) -> Output:
        await asyncio.sleep(0.02)
        return await transform(output, "a")(record)  # type: ignore[no-any-return]

    pa: Processor | None = None

    async def a_starts() -> asyncio.Task[None]:
        nonlocal pa, a, a_producer
        a_producer = transactional_producer(bootstrap, "zombie")
        a = member(bootstrap, source, group_id, **a_options)
        await a_producer.start()
        await a.start()
        pa = Processor(
            a,
            slow,
            concurrency=4,
            commit_interval_ms=interval_ms,
            transactional_producer=a_producer,
        )
        task = asyncio.ensure_future(pa.run())
        txn = pa._txn
        assert txn is not None
        # Its open transaction has 20 outputs in the log (no public event says so).
        while txn._outputs.sent < 20 or (interval_ms < 1000 and txn.transactions_committed < 1):  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        await asyncio.gather(*list(txn._outputs._futures))
        return task

    async def a_wakes(task: asyncio.Task[None]) -> dict[str, Any]:
        assert pa is not None and a is not None and a_producer is not None
        try:
            await asyncio.wait_for(pa.stop(), WAIT_S)
            with contextlib.suppress(Exception):
                await task
            stats: dict[str, Any] = pa.metrics()["transactions"]
            stats["last_abort"] = repr(pa._txn.last_abort if pa._txn else None)
            return stats
        finally:
            await a.abort()
            await a_producer.stop()

    try:
        a_task = await frozen.run(a_starts())
        frozen.freeze()
        b_producer = transactional_producer(bootstrap, "successor")
        await asyncio.wait_for(b_producer.start(), WAIT_S)
        try:
            async with member(bootstrap, source, group_id) as b:
                pb = Processor(
                    b,
                    transform(output, "b"),
                    concurrency=16,
                    commit_interval_ms=100,
                    transactional_producer=b_producer,
                )
                tb = await run_processor(pb)
                await until_committed(bootstrap, group_id, tps, {tp: total // 2 for tp in tps})
                await stop(pb, tb)
        finally:
            await b_producer.stop()
        frozen.thaw()
        a_stats = await frozen.run(a_wakes(a_task))
    finally:
        frozen.close()
    print(f"zombie A: {a_stats}")
    if interval_ms == 60_000:
        assert a_stats["transactions_committed"] == 0
    assert a_stats["transactions_aborted"] >= 1
    assert "TransactionFencedError" in a_stats["last_abort"] or "lost" in a_stats["last_abort"]
    written = await records_written(bootstrap, output)
    assert written >= total + 20  # A's outputs are in the log, aborted
    report, _ = await judge(bootstrap, output, group_id, source, 2)
    report.assert_clean()
    assert report.outputs_checked == total


# --- the example -----------------------------------------------------------------------------


async def test_the_processor_example_runs_exactly_once(
    kafka_broker: KafkaBroker, kafka_topic: TopicFactory, group_id: str, transactions: None
) -> None:
    """examples/exactly_once_processor.py as a process: once the group's offsets reach
    the input's end, SIGTERM stops it (the last transaction committed); every input's
    output once in the read_committed output."""
    bootstrap = kafka_broker.bootstrap_servers
    source, output = await kafka_topic(partitions=2), await kafka_topic(partitions=1)
    total = 200
    await produce_inputs(bootstrap, source, total, partitions=2, keys=10)
    env = {
        **os.environ,
        "AIOGROUP_BOOTSTRAP": bootstrap,
        "INPUT_TOPIC": source,
        "OUTPUT_TOPIC": output,
        "GROUP_ID": group_id,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "examples" / "exactly_once_processor.py"),
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        tps = [TopicPartition(source, p) for p in range(2)]
        await until_committed(bootstrap, group_id, tps, {tp: total // 2 for tp in tps})
        proc.send_signal(signal.SIGTERM)
        out = (await asyncio.wait_for(proc.stdout.read(), WAIT_S)).decode()
        assert await asyncio.wait_for(proc.wait(), WAIT_S) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert f"committed {total} records" in out and "(0 aborted)" in out, out
    values = [r.value for r in await read_committed(bootstrap, output, partitions=1)]
    assert sorted(values) == sorted(f"IN-{i}".encode() for i in range(total))
