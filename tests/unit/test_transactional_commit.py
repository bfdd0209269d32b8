"""send_offsets_to_transaction without a broker: input checks, answers, abort, fencing.

A fake aiokafka producer stands in: its ``client`` answers each request from a
script of error codes, and it records ``abort_transaction()`` calls.  What is
checked: what goes on the wire (the member's identity, v3+), which answers are
retried, and that every final refusal aborts the transaction and raises the one
error type a zombie gets.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from aiokafka.errors import GroupAuthorizationFailedError, IllegalGenerationError
from aiokafka.producer.transaction_manager import TransactionState

from aiogroup import GroupConsumer
from aiogroup._membership.backoff import RetryPolicy
from aiogroup._protocol.messages import FIND_COORDINATOR
from aiogroup._protocol.schema import struct_to_dict
from aiogroup._protocol.transactions import ADD_OFFSETS_TO_TXN, TXN_OFFSET_COMMIT
from aiogroup._transactions.committer import CONCURRENT_TRANSACTIONS_BACKOFF_S, concurrent_pause
from aiogroup._transactions.outcomes import (
    FENCED_MEMBER_CODES,
    FENCED_PRODUCER_CODES,
    Step,
    TxnCode,
    check_commit_input,
    step_for,
    worst_step,
)
from aiogroup.errors import (
    CommitFailedError,
    ConfigurationError,
    IllegalStateError,
    KafkaTimeoutError,
    NotGroupMemberError,
    TransactionFencedError,
)
from aiogroup.group_metadata import ConsumerGroupMetadata
from aiogroup.structs import OffsetAndMetadata, TopicPartition
from aiogroup.transactions import send_offsets_to_transaction, transaction

TP = TopicPartition("in", 0)
META = ConsumerGroupMetadata("g", 5, "member-a", None)
VERSIONS = {10: (0, 6), 25: (0, 4), 28: (0, 6)}


class FakeTxnManager:
    def __init__(self, transactional_id: str | None, in_transaction: bool) -> None:
        self.transactional_id = transactional_id
        self.producer_id, self.producer_epoch = 4000, 2
        self.state = TransactionState.IN_TRANSACTION if in_transaction else TransactionState.READY
        self.groups: list[str] = []
        #: Partitions aiokafka's sender is still adding to the transaction.
        self.pending: set[TopicPartition] = set()

    def partitions_to_add(self) -> set[TopicPartition]:
        return self.pending

    def is_in_transaction(self) -> bool:
        return bool(self.state is TransactionState.IN_TRANSACTION)

    def consumer_group_added(self, group_id: str) -> None:
        self.groups.append(group_id)


class FakeClient:
    """Answers from ``script[api]`` (error codes, or exceptions to raise), then success."""

    def __init__(self) -> None:
        self.script: dict[str, list[int | BaseException]] = {}
        self.sent: list[tuple[str, int, dict[str, Any]]] = []
        self.hang = False

    def get_random_node(self) -> int:
        return 0

    async def send(self, node: int, request: Any, group: Any = None) -> Any:
        struct = request.prepare(VERSIONS)
        name, version = request.API.name, request.api_version
        self.sent.append((name, version, struct_to_dict(struct)))
        if self.hang and name == "TxnOffsetCommit":
            await asyncio.Event().wait()
        answer = self.script.get(name, []).pop(0) if self.script.get(name) else 0
        if isinstance(answer, BaseException):
            raise answer
        if name == "FindCoordinator":
            entry = {"key": "k", "node_id": 1, "host": "h", "port": 1, "error_code": answer}
            entry["error_message"] = None
            return FIND_COORDINATOR.response(
                version, {"throttle_time_ms": 0, "coordinators": [entry]}
            )
        if name == "AddOffsetsToTxn":
            return ADD_OFFSETS_TO_TXN.response(
                version, {"throttle_time_ms": 0, "error_code": answer}
            )
        fields = struct_to_dict(struct)
        topics = [
            {
                "name": t["name"],
                "partitions": [
                    {"partition_index": p["partition_index"], "error_code": answer}
                    for p in t["partitions"]
                ],
            }
            for t in fields["topics"]
        ]
        return TXN_OFFSET_COMMIT.response(version, {"throttle_time_ms": 0, "topics": topics})

    def names(self) -> list[str]:
        return [name for name, _, _ in self.sent]


class FakeProducer:
    def __init__(self, transactional_id: str | None = "tx", in_transaction: bool = True) -> None:
        self._txn_manager = FakeTxnManager(transactional_id, in_transaction)
        self.client = FakeClient()
        self.aborts = 0
        self.abort_error: BaseException | None = None

        self.commits = 0

    async def begin_transaction(self) -> None:
        assert self._txn_manager.state is TransactionState.READY
        self._txn_manager.state = TransactionState.IN_TRANSACTION

    async def commit_transaction(self) -> None:
        assert self._txn_manager.state is TransactionState.IN_TRANSACTION
        self.commits += 1
        self._txn_manager.state = TransactionState.READY

    async def abort_transaction(self) -> None:
        # aiokafka asserts on an abort outside a transaction; so does the fake.
        assert self._txn_manager.is_in_transaction(), "abort outside a transaction"
        self.aborts += 1
        if self.abort_error is not None:
            self._txn_manager.state = TransactionState.FATAL_ERROR
            raise self.abort_error
        self._txn_manager.state = TransactionState.READY


class LateAnswerProducer(FakeProducer):
    """aiokafka's commit as far as the loop sees it: ``commit_transaction`` waits on the
    transaction's end future, which aiokafka's sender resolves when EndTxn is answered;
    cancelling the wait does not recall the EndTxn.  The test answers with :meth:`answer`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{"in_transaction": False, **kwargs})
        self.end: asyncio.Future[None] | None = None
        self.committing = asyncio.Event()
        self._txn_manager.wait_for_transaction_end = lambda: self.end  # type: ignore[attr-defined]

    async def begin_transaction(self) -> None:
        await super().begin_transaction()
        self.end = asyncio.get_running_loop().create_future()

    async def commit_transaction(self) -> None:
        assert self._txn_manager.state is TransactionState.IN_TRANSACTION and self.end
        self._txn_manager.state = TransactionState.COMMITTING_TRANSACTION
        self.committing.set()
        await asyncio.shield(self.end)

    async def abort_transaction(self) -> None:
        # aiokafka aborts from IN_TRANSACTION and from ABORTABLE_ERROR (a refused commit).
        assert self._txn_manager.state in (
            TransactionState.IN_TRANSACTION,
            TransactionState.ABORTABLE_ERROR,
        )
        self.aborts += 1
        self._txn_manager.state = TransactionState.READY

    def answer(self, error: BaseException | None = None) -> None:
        assert self.end is not None and not self.end.done()
        if error is None:
            self.commits += 1
            self._txn_manager.state = TransactionState.READY
            self.end.set_result(None)
        else:
            self._txn_manager.state = TransactionState.ABORTABLE_ERROR
            self.end.set_exception(error)


# --- pure rules ------------------------------------------------------------------------


def test_each_zombie_code_is_a_fence_and_nothing_else_is() -> None:
    for code in FENCED_MEMBER_CODES:
        assert step_for(code) is Step.FENCED_MEMBER
    for code in FENCED_PRODUCER_CODES:
        assert step_for(code) is Step.FENCED_PRODUCER
    assert step_for(TxnCode.NOT_COORDINATOR) is Step.FIND_COORDINATOR
    assert step_for(TxnCode.CONCURRENT_TRANSACTIONS) is Step.RETRY
    assert step_for(30) is Step.FAIL  # GROUP_AUTHORIZATION_FAILED
    assert step_for(0) is Step.DONE


def test_a_fence_on_one_partition_decides_the_whole_answer() -> None:
    assert worst_step([0, 14, 22]) == (Step.FENCED_MEMBER, 22)
    assert worst_step([22, 90]) == (Step.FENCED_PRODUCER, 90)
    assert worst_step([0, 16, 14]) == (Step.FIND_COORDINATOR, 16)
    assert worst_step([0, 0]) == (Step.DONE, 0)
    assert worst_step([])[0] is Step.FAIL


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"transactional_id": None}, "no transactional_id"),
        ({"auto_commit": True}, "enable_auto_commit=True"),
        ({"in_transaction": False}, "begin_transaction"),
        ({"owned": {TopicPartition("in", 1)}}, "does not own: in-0"),
    ],
)
def test_misuse_is_named(kwargs: dict[str, Any], fragment: str) -> None:
    args: dict[str, Any] = {
        "transactional_id": "tx",
        "in_transaction": True,
        "owned": {TP},
        "auto_commit": False,
    }
    problem = check_commit_input({TP: OffsetAndMetadata(1, "")}, **(args | kwargs))
    assert problem is not None and fragment in problem.message
    assert check_commit_input({TP: OffsetAndMetadata(1, "")}, **args) is None


# --- the committer over a fake producer ------------------------------------------------


async def test_success_sends_the_identity_and_joins_the_group_to_the_transaction() -> None:
    producer = FakeProducer()
    await send_offsets_to_transaction(producer, {TP: 10}, META)
    client = producer.client
    assert client.names() == [
        "FindCoordinator",
        "AddOffsetsToTxn",
        "FindCoordinator",
        "TxnOffsetCommit",
    ]
    _, version, commit = client.sent[-1]
    assert version == 4
    assert (commit["generation_id"], commit["member_id"], commit["group_id"]) == (
        5,
        "member-a",
        "g",
    )
    assert commit["topics"][0]["partitions"][0]["committed_offset"] == 10
    assert (commit["producer_id"], commit["producer_epoch"]) == (4000, 2)
    # aiokafka is told, so commit_transaction() sends EndTxn even with no records.
    assert producer._txn_manager.groups == ["g"]
    assert producer.aborts == 0


async def test_the_offsets_wait_until_aiokafka_has_added_the_produced_partitions() -> None:
    """AddOffsetsToTxn sent while aiokafka's AddPartitionsToTxn is being applied is
    answered CONCURRENT_TRANSACTIONS and both back off: it waits for the add instead."""
    producer = FakeProducer()
    out = TopicPartition("out", 0)
    producer._txn_manager.pending.add(out)
    commit = asyncio.ensure_future(send_offsets_to_transaction(producer, {TP: 10}, META))
    for _ in range(20):
        await asyncio.sleep(0.001)
    assert "AddOffsetsToTxn" not in producer.client.names(), "sent while an add was pending"
    producer._txn_manager.pending.discard(out)  # aiokafka's add answered
    await asyncio.wait_for(commit, 5)
    assert producer.client.names().count("AddOffsetsToTxn") == 1


async def test_a_pending_add_that_never_ends_is_bounded_by_the_timeout() -> None:
    producer = FakeProducer()
    producer._txn_manager.pending.add(TopicPartition("out", 0))
    with pytest.raises(KafkaTimeoutError):
        await send_offsets_to_transaction(producer, {TP: 10}, META, timeout=0.05)
    assert "AddOffsetsToTxn" not in producer.client.names()
    assert producer.aborts == 1


async def test_the_coordinators_are_looked_up_once_per_producer() -> None:
    """A transaction per batch: the second commit goes straight to the coordinators found
    by the first (two round trips saved), until one answers NOT_COORDINATOR."""
    producer = FakeProducer()
    await send_offsets_to_transaction(producer, {TP: 10}, META)
    producer._txn_manager.state = TransactionState.IN_TRANSACTION
    producer.client.sent.clear()
    await send_offsets_to_transaction(producer, {TP: 11}, META)
    assert producer.client.names() == ["AddOffsetsToTxn", "TxnOffsetCommit"]
    producer.client.sent.clear()
    producer.client.script = {"TxnOffsetCommit": [TxnCode.NOT_COORDINATOR]}
    await send_offsets_to_transaction(producer, {TP: 12}, META)
    assert producer.client.names() == [
        "AddOffsetsToTxn",
        "TxnOffsetCommit",
        "FindCoordinator",
        "TxnOffsetCommit",
    ]


async def test_passing_answers_are_retried() -> None:
    producer = FakeProducer()
    producer.client.script = {
        "AddOffsetsToTxn": [TxnCode.CONCURRENT_TRANSACTIONS, TxnCode.NOT_COORDINATOR],
        "TxnOffsetCommit": [TxnCode.COORDINATOR_LOAD_IN_PROGRESS],
    }
    await send_offsets_to_transaction(producer, {TP: 10}, META)
    names = producer.client.names()
    assert names.count("AddOffsetsToTxn") == 3 and names.count("TxnOffsetCommit") == 2
    assert names.count("FindCoordinator") == 3  # once more after NOT_COORDINATOR
    assert producer.aborts == 0


async def test_retries_back_off_doubling_from_the_producers_retry_backoff() -> None:
    """The shared retry policy (KIP-580): each consecutive retriable answer waits twice
    as long as the one before, from the producer's ``retry_backoff_ms``.  Lower bounds
    only: a loaded machine may wait longer, never shorter."""
    producer = FakeProducer()
    # What aiokafka's client keeps, in seconds: above the old fixed 100 ms, so that loop
    # fails the first bound, and a fixed wait of the backoff fails the second.
    producer.client._retry_backoff = 0.15
    producer.client.script = {"AddOffsetsToTxn": [TxnCode.COORDINATOR_LOAD_IN_PROGRESS] * 2}
    loop = asyncio.get_running_loop()
    sent_at: list[float] = []
    send = producer.client.send

    async def timed(node: int, request: Any, group: Any = None) -> Any:
        if request.API.name == "AddOffsetsToTxn":
            sent_at.append(loop.time())
        return await send(node, request, group)

    producer.client.send = timed  # type: ignore[method-assign]
    await send_offsets_to_transaction(producer, {TP: 10}, META)
    gaps = [b - a for a, b in itertools.pairwise(sent_at)]
    assert len(gaps) == 2
    for gap, delay in zip(gaps, (0.15, 0.3), strict=True):
        assert gap >= delay * 0.95, (gaps, delay)


def test_concurrent_transactions_waits_milliseconds_doubling_up_to_the_producers_backoff() -> None:
    """CONCURRENT_TRANSACTIONS means the coordinator is still writing the previous
    transaction's markers: a millisecond or two, not the producer's ``retry_backoff_ms``."""
    policy = RetryPolicy.from_backoff(0.1)
    pauses = [concurrent_pause(policy, n) for n in range(1, 10)]
    assert pauses[:3] == [
        CONCURRENT_TRANSACTIONS_BACKOFF_S,
        2 * CONCURRENT_TRANSACTIONS_BACKOFF_S,
        4 * CONCURRENT_TRANSACTIONS_BACKOFF_S,
    ]
    assert pauses[0] < policy.initial / 10
    assert max(pauses) == policy.initial == pauses[-1]
    assert pauses == sorted(pauses)


async def test_concurrent_transactions_is_resent_until_it_passes() -> None:
    producer = FakeProducer()
    producer.client._retry_backoff = 0.15
    producer.client.script = {"AddOffsetsToTxn": [TxnCode.CONCURRENT_TRANSACTIONS] * 3}
    await send_offsets_to_transaction(producer, {TP: 10}, META)
    assert producer.client.names().count("AddOffsetsToTxn") == 4
    assert producer.client.names().count("TxnOffsetCommit") == 1
    assert producer.aborts == 0


@pytest.mark.parametrize("code", sorted(FENCED_MEMBER_CODES))
async def test_a_zombie_member_is_fenced_and_its_transaction_aborted(code: int) -> None:
    producer = FakeProducer()
    producer.client.script = {"TxnOffsetCommit": [code]}
    with pytest.raises(TransactionFencedError, match="no longer has member 'member-a'") as info:
        await send_offsets_to_transaction(producer, {TP: 10}, META)
    assert not info.value.producer_fenced and info.value.aborted
    assert info.value.code == code
    assert TxnCode(code).name in str(info.value)  # named even where aiokafka has no class
    assert producer.aborts == 1
    assert producer.client.names().count("TxnOffsetCommit") == 1  # never retried


async def test_a_fenced_producer_is_told_apart_and_its_failed_abort_reported() -> None:
    producer = FakeProducer()
    producer.client.script = {"AddOffsetsToTxn": [TxnCode.PRODUCER_FENCED]}
    producer.abort_error = RuntimeError("ProducerFenced")
    with pytest.raises(TransactionFencedError, match="close this producer") as info:
        await send_offsets_to_transaction(producer, {TP: 10}, META)
    assert info.value.producer_fenced and not info.value.aborted
    assert "TxnOffsetCommit" not in producer.client.names()


async def test_another_refusal_aborts_and_raises_the_brokers_error() -> None:
    producer = FakeProducer()
    producer.client.script = {"TxnOffsetCommit": [30]}
    with pytest.raises(GroupAuthorizationFailedError, match="aborted"):
        await send_offsets_to_transaction(producer, {TP: 10}, META)
    assert producer.aborts == 1


async def test_no_final_answer_in_time_aborts_and_says_so() -> None:
    producer = FakeProducer()
    producer.client.hang = True
    with pytest.raises(KafkaTimeoutError, match=r"within 0\.05s; the transaction was aborted"):
        await send_offsets_to_transaction(producer, {TP: 10}, META, timeout=0.05)
    assert producer.aborts == 1


@pytest.mark.parametrize(
    ("producer", "error", "fragment"),
    [
        (FakeProducer(transactional_id=None), ConfigurationError, "no transactional_id"),
        (FakeProducer(in_transaction=False), IllegalStateError, "begin_transaction"),
    ],
)
async def test_misuse_sends_nothing(producer: FakeProducer, error: type, fragment: str) -> None:
    with pytest.raises(error, match=fragment):
        await send_offsets_to_transaction(producer, {TP: 10}, META)
    assert producer.client.sent == [] and producer.aborts == 0


async def test_a_producer_that_is_not_transactional_at_all_is_named() -> None:
    class Plain:  # an AIOKafkaProducer without transactional_id or idempotence
        _txn_manager = None

    with pytest.raises(ConfigurationError, match="transactional_id"):
        await send_offsets_to_transaction(Plain(), {TP: 10}, META)


async def test_a_consumer_that_auto_commits_is_refused() -> None:
    class AutoCommitting(GroupConsumer):
        def group_metadata(self) -> ConsumerGroupMetadata:
            return META

        def assignment(self) -> set[TopicPartition]:
            return {TP}

    producer = FakeProducer()
    consumer = AutoCommitting("in", group_id="g")  # enable_auto_commit defaults to True
    with pytest.raises(ConfigurationError, match="enable_auto_commit=False"):
        await send_offsets_to_transaction(producer, {TP: 10}, consumer)
    assert producer.client.sent == []


async def test_a_consumer_offsets_of_partitions_it_does_not_own_are_refused() -> None:
    class Owning(GroupConsumer):
        def group_metadata(self) -> ConsumerGroupMetadata:
            return META

        def assignment(self) -> set[TopicPartition]:
            return {TopicPartition("in", 1)}

    producer = FakeProducer()
    consumer = Owning("in", group_id="g", enable_auto_commit=False)
    with pytest.raises(CommitFailedError, match="does not own: in-0"):
        await send_offsets_to_transaction(producer, {TP: 10}, consumer)
    assert producer.client.sent == []


def test_illegal_generation_maps_to_aiokafkas_class() -> None:
    """``TransactionFencedError.error`` is aiokafka's class, so existing handlers match."""
    from aiogroup.errors import error_for_code

    assert error_for_code(TxnCode.ILLEGAL_GENERATION) is IllegalGenerationError


# --- transaction(): begin, commit, or abort what is still open --------------------------


async def test_the_context_commits_a_clean_body() -> None:
    producer = FakeProducer(in_transaction=False)
    async with transaction(producer):
        await send_offsets_to_transaction(producer, {TP: 10}, META)
    assert (producer.commits, producer.aborts) == (1, 0)


async def test_the_context_aborts_an_open_transaction_on_an_error() -> None:
    producer = FakeProducer(in_transaction=False)
    with pytest.raises(ValueError, match="transform failed"):
        async with transaction(producer):
            raise ValueError("transform failed")
    assert (producer.commits, producer.aborts) == (0, 1)


async def test_the_context_leaves_a_fenced_commits_abort_alone() -> None:
    """send_offsets_to_transaction aborted already; a second abort would break aiokafka."""
    producer = FakeProducer(in_transaction=False)
    producer.client.script = {"TxnOffsetCommit": [TxnCode.ILLEGAL_GENERATION]}
    with pytest.raises(TransactionFencedError):
        async with transaction(producer):
            await send_offsets_to_transaction(producer, {TP: 10}, META)
    assert (producer.commits, producer.aborts) == (0, 1)


async def test_the_context_needs_a_transactional_producer() -> None:
    with pytest.raises(ConfigurationError, match="transactional_id"):
        async with transaction(FakeProducer(transactional_id=None)):
            raise AssertionError("the body must not run")


async def test_an_eager_member_mid_rebalance_gets_commit_failed_not_a_membership_error() -> None:
    """Between revocation and the new assignment an eager member owns nothing and has no
    metadata to give; the batch in hand is someone else's: CommitFailedError (redo)."""

    class Rebalancing(GroupConsumer):
        def group_metadata(self) -> ConsumerGroupMetadata:
            raise NotGroupMemberError("no assignment yet")

        def assignment(self) -> set[TopicPartition]:
            return set()

    producer = FakeProducer()
    consumer = Rebalancing("in", group_id="g", enable_auto_commit=False)
    with pytest.raises(CommitFailedError, match="does not own: in-0"):
        await send_offsets_to_transaction(producer, {TP: 10}, consumer)
    assert producer.client.sent == []


async def test_the_view_reads_a_real_aiokafka_producer() -> None:
    """ProducerTxnView is the one place that reads aiokafka's private transaction state:
    an aiokafka upgrade that moves it fails here, not in production."""
    from aiokafka import AIOKafkaProducer

    from aiogroup._transactions.committer import ProducerTxnView

    transactional = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", transactional_id="tx-1")
    view = ProducerTxnView(transactional)
    assert view.transactional_id == "tx-1"
    assert not view.in_transaction and not view.abortable  # not started: no producer id yet
    assert view.client is transactional.client
    txn = transactional._txn_manager
    txn.set_pid_and_epoch(4000, 3)  # what InitProducerId's answer does
    txn.begin_transaction()
    assert view.in_transaction and view.abortable
    assert (view.producer_id, view.producer_epoch) == (4000, 3)
    view.group_joined_transaction("g")
    assert not txn.is_empty_transaction()  # so EndTxn goes out even without records
    plain = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")
    assert ProducerTxnView(plain).transactional_id is None
    idempotent = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", enable_idempotence=True)
    assert ProducerTxnView(idempotent).transactional_id is None
    await asyncio.gather(transactional.stop(), plain.stop(), idempotent.stop())
