"""TransformLoop without a broker: a batch per transaction, and the rebalance duties.

A scripted consumer hands out batches; the fake transactional producer of
test_transactional_commit answers every request with success and counts commits and
aborts.  What is checked: the revoke hook waits for the transaction in flight to
commit, or aborts it at its timeout; the lost hook aborts it at once; an aborted batch
is read again from its first offsets where still owned; misuse is refused up front.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka.producer.transaction_manager import TransactionState
from aiokafka.structs import ConsumerRecord

from aiogroup.errors import ConfigurationError, ConsumerStoppedError, KafkaTimeoutError
from aiogroup.group_metadata import ConsumerGroupMetadata
from aiogroup.listeners import RebalanceHooks
from aiogroup.structs import TopicPartition
from aiogroup.transactions import TransactionOutcome, TransformLoop, transaction
from tests.unit.test_transactional_commit import FakeProducer, LateAnswerProducer

TP = TopicPartition("in", 0)


def records(first: int, count: int) -> list[ConsumerRecord[bytes, bytes]]:
    return [
        ConsumerRecord(
            topic="in",
            partition=0,
            offset=o,
            timestamp=0,
            timestamp_type=0,
            key=None,
            value=b"v",
            checksum=None,
            serialized_key_size=0,
            serialized_value_size=1,
            headers=(),
        )
        for o in range(first, first + count)
    ]


@dataclass
class Config:
    enable_auto_commit: bool = False
    group_id: str | None = "g"


@dataclass
class ScriptedConsumer:
    """Hands out ``batches`` one per getmany (then nothing); owns ``owned``."""

    batches: deque[dict[TopicPartition, list[Any]]] = field(default_factory=deque)
    owned: set[TopicPartition] = field(default_factory=lambda: {TP})
    config: Config = field(default_factory=Config)
    seeks: list[tuple[TopicPartition, int]] = field(default_factory=list)
    _rebalance_hooks: RebalanceHooks = field(default_factory=RebalanceHooks)

    async def getmany(self, timeout_ms: int = 0, max_records: int | None = None) -> Any:
        if self.batches:
            return self.batches.popleft()
        await asyncio.sleep(timeout_ms / 1000)
        return {}

    def assignment(self) -> set[TopicPartition]:
        return set(self.owned)

    def group_metadata(self) -> ConsumerGroupMetadata:
        return ConsumerGroupMetadata("g", 1, "m", None)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.seeks.append((tp, offset))


class Gate:
    """A transform that blocks each batch until released; counts the batches it saw."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.batches = 0

    async def __call__(self, producer: Any, batch: dict[TopicPartition, list[Any]]) -> None:
        self.batches += 1
        self.entered.set()
        await self.release.wait()


def loop_with(gate: Gate, **options: Any) -> tuple[TransformLoop, ScriptedConsumer, FakeProducer]:
    consumer = ScriptedConsumer(deque([{TP: records(10, 5)}]))
    producer = FakeProducer(in_transaction=False)
    loop = TransformLoop(consumer, producer, gate, poll_timeout_ms=10, **options)  # type: ignore[arg-type]
    return loop, consumer, producer


async def test_a_revoke_waits_for_the_open_transaction_to_commit() -> None:
    gate = Gate()
    loop, consumer, producer = loop_with(gate, revoke_timeout_ms=30_000)
    run = asyncio.ensure_future(loop.run())
    await asyncio.wait_for(gate.entered.wait(), 5)
    revoke = asyncio.ensure_future(consumer._rebalance_hooks.revoked({TP}))
    await asyncio.sleep(0.05)
    assert not revoke.done(), "the revoke returned with the transaction still open"
    gate.release.set()
    await asyncio.wait_for(revoke, 5)
    # When the hook returns, the transaction has committed: the offsets match the output.
    assert producer.commits == 1 and producer.aborts == 0
    assert loop.records_committed == 5 and loop.transactions_committed == 1
    await loop.stop()
    await asyncio.wait_for(run, 5)


async def test_a_revoke_past_its_timeout_aborts_and_the_batch_is_not_sought_back() -> None:
    gate = Gate()
    loop, consumer, producer = loop_with(gate, revoke_timeout_ms=50)
    run = asyncio.ensure_future(loop.run())
    await asyncio.wait_for(gate.entered.wait(), 5)
    await asyncio.wait_for(consumer._rebalance_hooks.revoked({TP}), 5)
    assert producer.aborts == 1 and producer.commits == 0
    await loop.stop()
    await asyncio.wait_for(run, 5)
    assert loop.cancelled_by_rebalance == 1 and loop.transactions_aborted == 1
    assert consumer.seeks == []  # revoked: the next owner starts from the group's offsets


async def test_lost_aborts_the_open_transaction_at_once() -> None:
    gate = Gate()
    loop, consumer, producer = loop_with(gate, revoke_timeout_ms=60_000)
    run = asyncio.ensure_future(loop.run())
    await asyncio.wait_for(gate.entered.wait(), 5)
    # Well inside the revoke timeout: a loss does not wait for the transaction.
    await asyncio.wait_for(consumer._rebalance_hooks.lost({TP}), 1)
    assert producer.aborts == 1 and producer.commits == 0
    await loop.stop()
    await asyncio.wait_for(run, 5)


async def test_a_refused_batch_is_read_again_from_its_first_offset() -> None:
    async def transform(producer: Any, batch: Any) -> None:
        await loop.stop()  # one batch: run() returns once it is settled

    consumer = ScriptedConsumer(deque([{TP: records(10, 5)}]))
    producer = FakeProducer(in_transaction=False)
    producer.client.script = {"TxnOffsetCommit": [22]}  # ILLEGAL_GENERATION: a zombie's
    loop = TransformLoop(consumer, producer, transform, poll_timeout_ms=10)  # type: ignore[arg-type]
    await asyncio.wait_for(loop.run(), 5)
    assert loop.transactions_aborted == 1 and loop.records_committed == 0
    assert consumer.seeks == [(TP, 10)] and producer.aborts == 1 and producer.commits == 0


@pytest.mark.parametrize(
    ("consumer_config", "transactional_id", "fragment"),
    [
        (Config(enable_auto_commit=True), "tx", "enable_auto_commit"),
        (Config(group_id=None), "tx", "group_id"),
        (Config(), None, "transactional_id"),
    ],
)
def test_misuse_is_refused_before_anything_runs(
    consumer_config: Config, transactional_id: str | None, fragment: str
) -> None:
    consumer = ScriptedConsumer(config=consumer_config)
    producer = FakeProducer(transactional_id=transactional_id)
    with pytest.raises(ConfigurationError, match=fragment):
        TransformLoop(consumer, producer, Gate())  # type: ignore[arg-type]


class SlowCommitProducer(FakeProducer):
    """EndTxn takes until ``release``: a rebalance arrives while the commit is under way."""

    def __init__(self) -> None:
        super().__init__(in_transaction=False)
        self.committing = asyncio.Event()
        self.release = asyncio.Event()

    async def commit_transaction(self) -> None:
        self.committing.set()
        await self.release.wait()
        await super().commit_transaction()


async def test_a_loss_during_the_commit_lets_the_commit_finish() -> None:
    """Cancelling aiokafka's commit does not stop its EndTxn: a transaction whose offsets
    are in must be let finish, or the batch would count as aborted and be redone."""

    async def transform(producer: Any, batch: Any) -> None:
        return None

    consumer = ScriptedConsumer(deque([{TP: records(10, 5)}]))
    producer = SlowCommitProducer()
    loop = TransformLoop(consumer, producer, transform, poll_timeout_ms=10)  # type: ignore[arg-type]
    run = asyncio.ensure_future(loop.run())
    await asyncio.wait_for(producer.committing.wait(), 5)
    lost = asyncio.ensure_future(consumer._rebalance_hooks.lost({TP}))
    await asyncio.sleep(0.05)
    assert not lost.done(), "the loss did not wait for the commit under way"
    producer.release.set()
    await asyncio.wait_for(lost, 5)
    assert producer.commits == 1 and producer.aborts == 0
    assert loop.transactions_committed == 1 and loop.transactions_aborted == 0
    await loop.stop()
    await asyncio.wait_for(run, 5)


async def test_run_returns_when_the_consumer_stops() -> None:
    consumer = ScriptedConsumer()

    async def stopped(timeout_ms: int = 0, max_records: int | None = None) -> Any:
        raise ConsumerStoppedError()

    consumer.getmany = stopped  # type: ignore[method-assign]
    loop = TransformLoop(consumer, FakeProducer(), Gate())  # type: ignore[arg-type]
    await asyncio.wait_for(loop.run(), 5)
    assert loop.transactions_committed == 0


class OutputProducer(FakeProducer):
    """The fake producer with ``send``: each output's delivery is a future the test settles."""

    def __init__(self) -> None:
        super().__init__(in_transaction=False)
        self.deliveries: list[asyncio.Future[Any]] = []

    async def send(self, topic: str, value: bytes, **kwargs: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.deliveries.append(future)
        return future


async def test_the_commit_waits_for_every_output_the_transform_did_not_await() -> None:
    """aiokafka's commit_transaction would commit past an output still in flight (or
    failed): the loop awaits the deliveries the transform left behind first."""

    async def transform(producer: Any, batch: Any) -> None:
        for r in batch[TP]:
            await producer.send("out", r.value)  # delivery not awaited
        await loop.stop()

    consumer = ScriptedConsumer(deque([{TP: records(10, 3)}]))
    producer = OutputProducer()
    loop = TransformLoop(consumer, producer, transform, poll_timeout_ms=10)  # type: ignore[arg-type]
    run = asyncio.ensure_future(loop.run())
    for _ in range(100):
        if len(producer.deliveries) == 3 and "TxnOffsetCommit" in producer.client.names():
            break
        await asyncio.sleep(0.001)
    # The offsets went out while the outputs were in flight; the commit did not.
    assert "TxnOffsetCommit" in producer.client.names()
    await asyncio.sleep(0.02)
    assert producer.commits == 0 and not run.done()
    for f in producer.deliveries:
        f.set_result(None)
    await asyncio.wait_for(run, 5)
    assert producer.commits == 1 and loop.records_committed == 3


async def test_a_failed_output_aborts_the_transaction_and_the_batch_is_read_again() -> None:
    async def transform(producer: Any, batch: Any) -> None:
        for r in batch[TP]:
            await producer.send("out", r.value)
        await loop.stop()

    consumer = ScriptedConsumer(deque([{TP: records(10, 3)}]))
    producer = OutputProducer()
    loop = TransformLoop(consumer, producer, transform, poll_timeout_ms=10)  # type: ignore[arg-type]
    run = asyncio.ensure_future(loop.run())
    for _ in range(100):
        if len(producer.deliveries) == 3:
            break
        await asyncio.sleep(0.001)
    producer.deliveries[0].set_result(None)
    producer.deliveries[1].set_exception(RuntimeError("Produce refused: NOT_ENOUGH_REPLICAS"))
    producer.deliveries[2].set_result(None)
    with pytest.raises(RuntimeError, match="NOT_ENOUGH_REPLICAS"):
        await asyncio.wait_for(run, 5)
    assert producer.commits == 0 and producer.aborts == 1
    assert loop.records_committed == 0 and consumer.seeks == [(TP, 10)]


class LingeringAccumulator:
    """aiokafka's accumulator as far as the loop uses it: records when it was told to send."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.flushed_after: list[str] | None = None

    async def flush_for_commit(self) -> None:
        self.flushed_after = list(self.client.names())


async def test_the_outputs_leave_before_the_offsets_instead_of_lingering() -> None:
    """Nothing more comes to the transaction once the transform returned: its batches are
    closed then (as librdkafka's commit does), not in commit_transaction.  The offsets
    went first: AddOffsetsToTxn before any output, TxnOffsetCommit while they fly."""

    async def transform(producer: Any, batch: Any) -> None:
        for r in batch[TP]:
            await producer.send("out", r.value)
        for f in out.deliveries:
            f.set_result(None)
        await loop.stop()

    consumer = ScriptedConsumer(deque([{TP: records(10, 2)}]))
    out = OutputProducer()
    out._message_accumulator = LingeringAccumulator(out.client)  # type: ignore[attr-defined]
    loop = TransformLoop(consumer, out, transform, poll_timeout_ms=10)  # type: ignore[arg-type]
    await asyncio.wait_for(loop.run(), 5)
    flushed_after = out._message_accumulator.flushed_after  # type: ignore[attr-defined]
    assert flushed_after is not None
    assert next(n for n in flushed_after if n != "FindCoordinator") == "AddOffsetsToTxn"
    assert "EndTxn" not in flushed_after and out.commits == 1


async def test_the_group_joins_the_transaction_before_the_transform_runs() -> None:
    """AddOffsetsToTxn is answered before the first output is sent: sent while aiokafka adds
    the outputs' partitions, the coordinator would answer CONCURRENT_TRANSACTIONS."""
    seen: list[list[str]] = []

    async def transform(producer: Any, batch: Any) -> None:
        seen.append(list(out.client.names()))
        for r in batch[TP]:
            await producer.send("out", r.value)
        for f in out.deliveries:
            f.set_result(None)
        await loop.stop()

    consumer = ScriptedConsumer(deque([{TP: records(10, 2)}]))
    out = OutputProducer()
    loop = TransformLoop(consumer, out, transform, poll_timeout_ms=10)  # type: ignore[arg-type]
    await asyncio.wait_for(loop.run(), 5)
    assert len(seen) == 1 and "AddOffsetsToTxn" in seen[0]
    assert "EndTxn" not in seen[0]
    assert out.client.names().count("TxnOffsetCommit") == 1 and out.commits == 1


async def test_a_failed_transform_aborts_only_after_its_offsets_request_is_answered() -> None:
    """The TxnOffsetCommit flies while the transform runs; when the transform fails, the
    abort waits for its answer, so the request cannot reach the group coordinator after
    the abort's markers."""
    answer = asyncio.Event()
    in_flight = asyncio.Event()
    out = FakeProducer(in_transaction=False)
    send = out.client.send

    async def held(node: int, request: Any, group: Any = None) -> Any:
        if request.API.name == "TxnOffsetCommit":
            in_flight.set()
            await answer.wait()
        return await send(node, request, group)

    out.client.send = held  # type: ignore[method-assign]

    async def transform(producer: Any, batch: Any) -> None:
        await in_flight.wait()
        raise RuntimeError("transform failed")

    consumer = ScriptedConsumer(deque([{TP: records(10, 2)}]))
    loop = TransformLoop(consumer, out, transform, poll_timeout_ms=10)  # type: ignore[arg-type]
    run = asyncio.ensure_future(loop.run())
    await in_flight.wait()
    for _ in range(20):  # the loop gets every chance to abort early; it must not
        await asyncio.sleep(0)
    assert out.aborts == 0 and not run.done()
    answer.set()
    with pytest.raises(RuntimeError, match="transform failed"):
        await asyncio.wait_for(run, 5)
    assert out.aborts == 1 and out.commits == 0


# --- a commit whose answer comes after its wait ended (in doubt) ---------------------


async def test_a_commit_cancelled_in_flight_reports_the_answer_it_waited_for() -> None:
    producer = LateAnswerProducer()
    seen: list[TransactionOutcome] = []

    async def block() -> None:
        async with transaction(producer, timeout=5) as outcome:
            seen.append(outcome)

    task = asyncio.ensure_future(block())
    await asyncio.wait_for(producer.committing.wait(), 5)
    task.cancel()
    await asyncio.sleep(0.01)
    assert not task.done(), "the cancellation went on before the commit's answer"
    assert seen[0].in_doubt
    producer.answer()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert seen[0].committed is True and not seen[0].in_doubt
    assert producer.aborts == 0


async def test_a_commit_past_its_timeout_is_in_doubt_and_the_next_transaction_waits() -> None:
    producer = LateAnswerProducer()
    with pytest.raises(KafkaTimeoutError, match="in doubt"):
        async with transaction(producer, timeout=0.02) as first:
            pass
    assert first.in_doubt and first.committed is None
    assert await first.settle(0.01) is None  # no answer yet: still in doubt
    began = asyncio.Event()

    async def second() -> None:
        async with transaction(producer, timeout=5):
            began.set()
            await asyncio.Event().wait()  # held open: cancelled below

    nxt = asyncio.ensure_future(second())
    await asyncio.sleep(0.01)
    assert not began.is_set(), "a transaction began while the last commit was unanswered"
    producer.answer()
    await asyncio.wait_for(began.wait(), 5)
    assert await first.settle(1) is True
    assert producer._txn_manager.state is TransactionState.IN_TRANSACTION
    nxt.cancel()
    with pytest.raises(asyncio.CancelledError):
        await nxt
    assert producer.aborts == 1  # the held-open second one, cancelled in its body


async def test_a_refused_commit_learned_late_is_aborted_before_the_next_begins() -> None:
    producer = LateAnswerProducer()
    with pytest.raises(KafkaTimeoutError):
        async with transaction(producer, timeout=0.02) as first:
            pass
    producer.answer(RuntimeError("EndTxn refused"))
    producer.committing.clear()

    async def second() -> None:
        async with transaction(producer, timeout=5):
            pass

    nxt = asyncio.ensure_future(second())
    await asyncio.wait_for(producer.committing.wait(), 5)
    assert producer.aborts == 1  # the refused one, before the second began
    producer.answer()
    await asyncio.wait_for(nxt, 5)
    assert await first.settle(0) is False
    assert producer.commits == 1


def in_doubt_loop() -> tuple[TransformLoop, ScriptedConsumer, LateAnswerProducer]:
    async def transform(producer: Any, batch: Any) -> None:
        return None

    consumer = ScriptedConsumer(deque([{TP: records(10, 5)}]))
    producer = LateAnswerProducer()
    loop = TransformLoop(consumer, producer, transform, poll_timeout_ms=10, timeout=0.05)  # type: ignore[arg-type]
    return loop, consumer, producer


async def test_the_loop_counts_an_in_doubt_commit_that_completed_as_committed() -> None:
    """The commit timed out and the coordinator completed it later (a new coordinator
    after a failover): the batch is committed, never read again (that would double
    its outputs)."""
    loop, consumer, producer = in_doubt_loop()
    run = asyncio.ensure_future(loop.run())
    await asyncio.wait_for(producer.committing.wait(), 5)
    await asyncio.sleep(0.2)  # several commit timeouts pass unanswered
    assert not run.done() and loop.transactions_committed == 0
    producer.answer()
    for _ in range(200):
        if loop.transactions_committed:
            break
        await asyncio.sleep(0.005)
    assert loop.transactions_committed == 1 and loop.records_committed == 5
    assert loop.transactions_aborted == 0 and consumer.seeks == []
    await loop.stop()
    await asyncio.wait_for(run, 5)


async def test_the_loop_reads_again_an_in_doubt_commit_that_was_refused() -> None:
    loop, consumer, producer = in_doubt_loop()
    run = asyncio.ensure_future(loop.run())
    await asyncio.wait_for(producer.committing.wait(), 5)
    await asyncio.sleep(0.1)
    assert consumer.seeks == [], "read again before the commit's answer was known"
    producer.answer(RuntimeError("EndTxn refused"))
    for _ in range(200):
        if loop.transactions_aborted:
            break
        await asyncio.sleep(0.005)
    assert loop.transactions_aborted == 1 and consumer.seeks == [(TP, 10)]
    assert loop.transactions_committed == 0
    await loop.stop()
    await asyncio.wait_for(run, 5)


async def test_a_revoke_waits_for_an_in_doubt_commit_s_answer() -> None:
    loop, consumer, producer = in_doubt_loop()
    loop._timeout = 0.05
    run = asyncio.ensure_future(loop.run())
    await asyncio.wait_for(producer.committing.wait(), 5)
    await asyncio.sleep(0.1)  # the commit's wait timed out: in doubt
    assert loop._outcome is not None and loop._outcome.in_doubt
    loop._timeout = 5  # the revoke's wait for the answer
    revoke = asyncio.ensure_future(consumer._rebalance_hooks.revoked({TP}))
    await asyncio.sleep(0.05)
    assert not revoke.done(), "the partitions were let go with the commit in doubt"
    producer.answer()
    await asyncio.wait_for(revoke, 5)
    await loop.stop()
    await asyncio.wait_for(run, 5)
    assert loop.transactions_committed == 1 and consumer.seeks == []
