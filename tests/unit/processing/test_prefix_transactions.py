"""A transactional processor's rules without a broker (issue 27).

Which finishes go into which transaction, and which wait: the pure hold-back bound
(``finish_bound``) on trackers, and ``PrefixTransactions`` over the fake aiokafka
producer of ``tests/unit/test_transactional_commit.py`` (its client answers the
offsets requests from a script; here it also takes the outputs' sends, each noted with
the transaction it went into).
"""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace
from typing import Any

import pytest

from aiogroup.errors import (
    CommitFailedError,
    ConfigurationError,
    NotGroupMemberError,
    TransactionFencedError,
    TransactionInDoubtError,
)
from aiogroup.processing import offset_metadata
from aiogroup.processing.finish_bound import RUN_BYTES, admissible, max_runs
from aiogroup.processing.output import Output, outputs_of
from aiogroup.processing.prefix_transactions import PrefixTransactions, recoverable
from aiogroup.processing.scheduler import Work
from aiogroup.processing.tracker import PartitionTracker
from aiogroup.structs import TopicPartition
from tests.unit.test_transactional_commit import META, FakeProducer, LateAnswerProducer

TP = TopicPartition("in", 0)
TP1 = TopicPartition("in", 1)


# --- the hold-back bound (pure) --------------------------------------------------------


def tracker_with(received: range, finished: list[int]) -> PartitionTracker:
    tracker = PartitionTracker()
    for offset in received:
        assert tracker.received(offset)
    for offset in finished:
        tracker.finished(offset)
    return tracker


def test_the_run_bound_is_what_always_fits() -> None:
    assert max_runs(4000) == 142
    # Runs with 13-digit gaps and lengths (the most an int64 offset needs): 142 fit,
    # a 143rd would be dropped - the bound is tight for the worst case.
    big = 36**12
    worst = [(i * 2 * big, i * 2 * big + big) for i in range(1, 144)]
    assert len(offset_metadata.decode(0, offset_metadata.encode(0, worst[:142], 4000))) == 142
    assert len(offset_metadata.decode(0, offset_metadata.encode(0, worst, 4000))) == 142
    with pytest.raises(ValueError, match="metadata_max_bytes"):
        max_runs(20)


def test_a_finish_adds_extends_or_joins_a_run() -> None:
    tracker = tracker_with(range(10), [3, 5])  # unfinished 0-2, 4, 6-9
    assert tracker.finish_adds_run(8) == 1  # alone between unfinished records
    assert tracker.finish_adds_run(2) == 0  # next to the run at 3
    assert tracker.finish_adds_run(4) == -1  # between the runs at 3 and 5
    # Past the last received: counted as not finished (conservative).
    assert tracker.finish_adds_run(9) == 1


def test_the_first_unfinished_record_is_always_taken() -> None:
    tracker = tracker_with(range(20), [2, 4, 6, 8])  # 4 runs
    assert not admissible(tracker, 10, 4)  # a fifth run
    assert admissible(tracker, 0, 1)  # the front: moves the committed offset, no run


def test_a_finish_beyond_the_bound_waits_and_one_that_adds_no_run_does_not() -> None:
    tracker = tracker_with(range(20), [2, 4, 6, 8])  # runs at 2, 4, 6, 8
    assert len(tracker.finished_beyond()) == 4
    assert not admissible(tracker, 12, 4)  # +1
    assert admissible(tracker, 9, 4)  # extends the run at 8
    assert admissible(tracker, 3, 4)  # joins the runs at 2 and 4
    assert admissible(tracker, 12, 5)
    # Few unfinished records: the worst case fits without counting.
    small = tracker_with(range(4), [2])
    assert admissible(small, 1, 2)


@pytest.mark.parametrize("seed", range(20))
def test_finishes_taken_under_the_bound_are_always_all_in_the_commit(seed: int) -> None:
    """Random finish orders: every commit point taken lists every finished record (what
    the metadata drops would be committed outputs processed again: duplicates); and
    every record finishes in the end (held-back finishes are taken once the front moves)."""
    rng = random.Random(seed)
    limit_bytes = len(offset_metadata.PREFIX) + 3 * RUN_BYTES - 1  # room for 3 runs
    limit = max_runs(limit_bytes)
    assert limit == 3
    tracker = tracker_with(range(100, 160), [])
    order = list(range(100, 160))
    rng.shuffle(order)
    held: list[int] = []
    finished: set[int] = set()
    while order or held:
        # Held-back records try again whenever something finished; else the next one.
        candidates = held + order[:1]
        taken = next((o for o in candidates if admissible(tracker, o, limit)), None)
        if taken is None:
            held.append(order.pop(0))
            continue
        (held if taken in held else order).remove(taken)
        tracker.finished(taken)
        finished.add(taken)
        committed, metadata = tracker.commit_point(limit_bytes)  # type: ignore[misc]
        listed = {o for s, e in offset_metadata.decode(committed, metadata) for o in range(s, e)}
        assert {o for o in finished if o >= committed} == listed
        assert len(held) <= 60
    assert tracker.committable() == 160


# --- outputs (pure) --------------------------------------------------------------------


def test_a_handler_returns_none_one_output_or_several() -> None:
    out = Output("t", b"v", key=b"k", headers=[("h", b"1")], partition=2)
    assert outputs_of(None) == []
    assert outputs_of(out) == [out]
    assert outputs_of([out, out]) == [out, out]
    assert outputs_of(o for o in [out]) == [out]


@pytest.mark.parametrize("bad", [b"bytes", "text", 3, {"topic": "t"}, [Output("t", b""), 1]])
def test_anything_else_a_handler_returns_is_named(bad: object) -> None:
    with pytest.raises(TypeError, match="Output"):
        outputs_of(bad)


def test_an_output_needs_a_topic_and_a_real_partition() -> None:
    with pytest.raises(ValueError, match="topic"):
        Output("", b"v")
    with pytest.raises(ValueError, match="partition"):
        Output("t", b"v", partition=-1)


# --- PrefixTransactions over the fake producer ----------------------------------------


class OutputProducer(FakeProducer):
    """The fake producer that also takes outputs: each ``send`` noted with the number of
    the transaction it went into (commits + aborts so far)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.outputs: list[tuple[int, str, Any]] = []
        self.send_error: BaseException | None = None
        self.offsets_gate: asyncio.Event | None = None

    async def send(self, topic: str, value: Any, **kwargs: Any) -> asyncio.Future[Any]:
        assert self._txn_manager.is_in_transaction(), "an output outside a transaction"
        if self.send_error is not None:
            raise self.send_error
        self.outputs.append((self.commits + self.aborts, topic, value))
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


class GatedClient:
    """Wraps the fake client: TxnOffsetCommit waits for ``gate`` (a close in flight)."""

    def __init__(self, inner: Any, gate: asyncio.Event) -> None:
        self.inner, self.gate = inner, gate
        self.waiting = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def send(self, node: int, request: Any, group: Any = None) -> Any:
        if request.API.name == "TxnOffsetCommit":
            self.waiting.set()
            await self.gate.wait()
        return await self.inner.send(node, request, group)


def fake_consumer(owned: set[TopicPartition], auto_commit: bool = False) -> Any:
    return SimpleNamespace(
        config=SimpleNamespace(enable_auto_commit=auto_commit),
        assignment=lambda: set(owned),
        group_metadata=lambda: META,
    )


class LateOutputProducer(LateAnswerProducer, OutputProducer):
    """Outputs as OutputProducer; the commit answered when the test says (in doubt)."""


class Harness:
    def __init__(
        self,
        max_bytes: int = offset_metadata.DEFAULT_MAX_BYTES,
        producer: OutputProducer | None = None,
        timeout: float = 5.0,
    ) -> None:
        self.producer = producer or OutputProducer(in_transaction=False)
        self.trackers: dict[TopicPartition, PartitionTracker] = {
            TP: tracker_with(range(10), []),
            TP1: tracker_with(range(10), []),
        }
        self.set_aside: list[Work] = []
        self.redone: list[dict[TopicPartition, int]] = []
        self.failed: list[BaseException] = []
        self.marked: list[tuple[TopicPartition, int]] = []

        async def redo(starts: dict[TopicPartition, int]) -> None:
            self.redone.append(starts)

        self.txn = PrefixTransactions(
            self.producer,
            fake_consumer({TP, TP1}),
            self.trackers,
            metadata_max_bytes=max_bytes,
            set_aside=self.set_aside.append,
            redo=redo,
            fail=self.failed.append,
            timeout=timeout,
        )

    def mark(self, work: Work) -> None:
        self.marked.append((work.tp, work.offset))
        self.trackers[work.tp].finished(work.offset)

    async def finish(self, tp: TopicPartition, offset: int, *values: bytes) -> bool:
        outs = [Output("out", v) for v in values]
        return await self.txn.finish(Work(tp, offset, (tp, offset)), outs, self.mark)

    def offsets_sent(self) -> list[dict[tuple[str, int], int]]:
        found = []
        for name, _, fields in self.producer.client.sent:
            if name == "TxnOffsetCommit":
                found.append(
                    {
                        (t["name"], p["partition_index"]): p["committed_offset"]
                        for t in fields["topics"]
                        for p in t["partitions"]
                    }
                )
        return found


async def test_a_finish_begins_the_transaction_its_outputs_go_into_and_the_commit_counts_it() -> (
    None
):
    h = Harness()
    assert not h.txn.in_transaction
    assert await h.finish(TP, 0, b"a", b"b")
    assert await h.finish(TP1, 0)  # no outputs: still counted in this transaction
    assert h.txn.in_transaction and h.marked == [(TP, 0), (TP1, 0)]
    assert h.producer.outputs == [(0, "out", b"a"), (0, "out", b"b")]
    committed = await h.txn.commit()
    assert {tp: oam.offset for tp, oam in committed.items()} == {TP: 1, TP1: 1}
    assert h.offsets_sent() == [{("in", 0): 1, ("in", 1): 1}]
    assert h.producer.commits == 1 and h.producer.aborts == 0
    assert h.txn.stats()["records_committed"] == 2
    assert h.txn.stats()["outputs_committed"] == 2
    assert await h.txn.commit() == {}  # nothing open: nothing sent
    assert h.producer.commits == 1


async def test_the_commit_carries_the_finished_beyond_runs_of_what_it_counts() -> None:
    h = Harness()
    for offset in (0, 2, 3):
        assert await h.finish(TP, offset, b"x")
    committed = await h.txn.commit()
    assert committed[TP].offset == 1
    assert offset_metadata.decode(1, committed[TP].metadata) == [(2, 4)]


async def test_a_finish_while_a_transaction_closes_waits_and_goes_into_the_next() -> None:
    h = Harness()
    gate = asyncio.Event()
    client = GatedClient(h.producer.client, gate)
    h.producer.client = client  # type: ignore[assignment]
    assert await h.finish(TP, 0, b"first")
    closing = asyncio.ensure_future(h.txn.commit())
    await asyncio.wait_for(client.waiting.wait(), 5)  # offsets computed and in flight
    late = asyncio.ensure_future(h.finish(TP, 1, b"second"))
    await asyncio.sleep(0.01)
    assert not late.done() and (TP, 1) not in h.marked  # neither counted nor sent
    assert [v for _, _, v in h.producer.outputs] == [b"first"]
    gate.set()
    committed = await asyncio.wait_for(closing, 5)
    assert committed[TP].offset == 1  # the first transaction did not count offset 1
    assert await asyncio.wait_for(late, 5)
    # Its output went into the second transaction, which counts it.
    assert h.producer.outputs == [(0, "out", b"first"), (1, "out", b"second")]
    assert (await h.txn.commit())[TP].offset == 2


async def test_a_finish_the_metadata_could_not_hold_waits_for_the_front_and_gives_its_slot() -> (
    None
):
    h = Harness(max_bytes=len(offset_metadata.PREFIX) + RUN_BYTES - 1)  # one run fits
    assert await h.finish(TP, 2, b"2")  # the one run: 2
    held = asyncio.ensure_future(h.finish(TP, 5, b"5"))  # a second run: held back
    await asyncio.sleep(0.01)
    assert not held.done() and [w.offset for w in h.set_aside] == [5]
    assert [v for _, _, v in h.producer.outputs] == [b"2"]
    # A commit now represents what is counted (offset 0, the run at 2) and nothing else.
    committed = await h.txn.commit()
    assert committed[TP].offset == 0
    assert offset_metadata.decode(0, committed[TP].metadata) == [(2, 3)]
    assert await h.finish(TP, 0, b"0")  # the front
    assert await h.finish(TP, 1, b"1")  # front again: the prefix is now 0-2
    assert await asyncio.wait_for(held, 5)  # one run again: taken
    assert (TP, 5) in h.marked
    committed = await h.txn.commit()
    assert committed[TP].offset == 3
    assert offset_metadata.decode(3, committed[TP].metadata) == [(5, 6)]


async def test_a_held_back_finish_of_a_revoked_partition_ends_unfinished() -> None:
    h = Harness(max_bytes=len(offset_metadata.PREFIX) + RUN_BYTES - 1)
    assert await h.finish(TP, 2)
    held = asyncio.ensure_future(h.finish(TP, 5, b"5"))
    await asyncio.sleep(0.01)
    h.txn.forget({TP})
    assert await asyncio.wait_for(held, 5) is False
    assert (TP, 5) not in h.marked and b"5" not in [v for _, _, v in h.producer.outputs]


async def test_a_zombies_fence_aborts_and_reads_again_from_where_the_transaction_began() -> None:
    h = Harness()
    assert await h.finish(TP, 0)
    await h.txn.commit()
    assert await h.finish(TP, 1, b"x")
    assert await h.finish(TP1, 3, b"y")  # TP1's committable before it: 0
    h.producer.client.script["TxnOffsetCommit"] = [22]  # ILLEGAL_GENERATION
    assert await h.txn.commit() == {}
    assert h.producer.aborts == 1 and h.failed == []
    assert h.redone == [{TP: 1, TP1: 0}]
    assert isinstance(h.txn.last_abort, TransactionFencedError)
    # The next finish begins a new transaction.
    assert await h.finish(TP, 2, b"z")
    assert h.producer.outputs[-1] == (2, "out", b"z")


async def test_a_held_back_finish_of_a_partition_read_again_ends_unfinished() -> None:
    """An abort voids the partitions it touched: a finish of one held back meanwhile
    must not enter the next transaction (its record is read and processed again)."""
    h = Harness(max_bytes=len(offset_metadata.PREFIX) + RUN_BYTES - 1)
    assert await h.finish(TP, 2, b"2")
    held = asyncio.ensure_future(h.finish(TP, 5, b"5"))
    await asyncio.sleep(0.01)
    assert not held.done()
    h.producer.client.script["TxnOffsetCommit"] = [25]  # UNKNOWN_MEMBER_ID
    assert await h.txn.commit() == {}
    assert h.redone == [{TP: 0}]
    assert await asyncio.wait_for(held, 5) is False
    assert (TP, 5) not in h.marked and not h.txn.in_transaction
    assert b"5" not in [v for _, _, v in h.producer.outputs]


async def test_a_commit_answered_after_its_timeout_counts_as_committed() -> None:
    """The EndTxn had no answer in time (a coordinator failing over) and completed later:
    the transaction committed - counted so, nothing read again (that would write its
    outputs twice)."""
    producer = LateOutputProducer()
    h = Harness(producer=producer, timeout=0.05)
    assert await h.finish(TP, 0, b"a")
    closing = asyncio.ensure_future(h.txn.commit())
    await asyncio.wait_for(producer.committing.wait(), 5)
    await asyncio.sleep(0.08)  # the commit's own wait has timed out
    assert not closing.done()
    producer.answer()
    committed = await asyncio.wait_for(closing, 5)
    assert {tp: oam.offset for tp, oam in committed.items()} == {TP: 1}
    assert h.redone == [] and h.failed == [] and h.producer.aborts == 0
    assert h.txn.stats()["transactions_committed"] == 1


async def test_a_commit_still_unanswered_stops_the_processor_and_reads_nothing_again() -> None:
    producer = LateOutputProducer()
    h = Harness(producer=producer, timeout=0.02)
    assert await h.finish(TP, 0, b"a")
    assert await asyncio.wait_for(h.txn.commit(), 5) == {}
    assert h.redone == [] and len(h.failed) == 1
    assert isinstance(h.failed[0], TransactionInDoubtError)
    assert h.producer.aborts == 0 and h.txn.stats()["transactions_aborted"] == 0


async def test_a_commit_refused_after_its_timeout_aborts_and_reads_again() -> None:
    producer = LateOutputProducer()
    h = Harness(producer=producer, timeout=0.05)
    assert await h.finish(TP, 0, b"a")
    closing = asyncio.ensure_future(h.txn.commit())
    await asyncio.wait_for(producer.committing.wait(), 5)
    await asyncio.sleep(0.08)
    producer.answer(CommitFailedError("EndTxn refused"))
    assert await asyncio.wait_for(closing, 5) == {}
    assert h.producer.aborts == 1 and h.redone == [{TP: 0}] and h.failed == []


async def test_a_fenced_producer_stops_the_processor() -> None:
    h = Harness()
    assert await h.finish(TP, 0, b"x")
    h.producer.client.script["TxnOffsetCommit"] = [90]  # PRODUCER_FENCED
    assert await h.txn.commit() == {}
    assert h.redone == [] and len(h.failed) == 1
    assert isinstance(h.failed[0], TransactionFencedError) and h.failed[0].producer_fenced


async def test_an_output_that_cannot_be_sent_leaves_its_record_unfinished_and_aborts() -> None:
    h = Harness()
    assert await h.finish(TP, 0, b"a")
    h.producer.send_error = RuntimeError("record too large")
    assert await h.finish(TP, 1, b"b") is False
    assert (TP, 1) not in h.marked
    assert await h.finish(TP, 2) is False  # the transaction is doomed: nothing more enters
    assert await h.txn.commit() == {}
    assert h.producer.aborts == 1 and h.producer.commits == 0
    assert [type(e) for e in h.failed] == [RuntimeError]
    assert not [s for s in h.offsets_sent() if s]


async def test_a_loss_aborts_the_transaction_holding_its_partitions_and_redoes_the_others() -> None:
    h = Harness()
    assert await h.finish(TP, 0, b"a")
    await h.txn.lost({TP1})  # nothing of TP1 in it: untouched
    assert h.producer.aborts == 0 and h.txn.in_transaction
    assert await h.finish(TP1, 0, b"b")
    await h.txn.lost({TP1})
    assert h.producer.aborts == 1 and not h.txn.in_transaction
    assert h.redone == [{TP: 0}]
    assert h.producer.commits == 0


async def test_a_finish_cancelled_while_sending_dooms_its_transaction() -> None:
    """A drain's cancellation between a record's outputs: some may be in the transaction,
    the record is not finished - so the transaction aborts and its partitions are read
    again, rather than commit outputs of an unfinished record."""
    h = Harness()
    assert await h.finish(TP1, 0, b"other")
    started = asyncio.Event()
    release = asyncio.Event()
    original = h.producer.send

    async def slow(topic: str, value: Any, **kwargs: Any) -> asyncio.Future[Any]:
        future = await original(topic, value, **kwargs)
        started.set()
        await release.wait()
        return future

    h.producer.send = slow  # type: ignore[method-assign]
    task = asyncio.ensure_future(h.finish(TP, 0, b"a", b"b"))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (TP, 0) not in h.marked
    assert await h.txn.commit() == {}
    assert h.producer.aborts == 1 and h.producer.commits == 0
    assert h.redone == [{TP1: 0, TP: 0}] and h.failed == []


def test_bad_setup_is_named() -> None:
    class Plain:
        pass

    async def redo(starts: dict[TopicPartition, int]) -> None:
        pass

    with pytest.raises(ConfigurationError, match="transactional_id"):
        PrefixTransactions(
            Plain(),
            fake_consumer(set()),
            {},
            metadata_max_bytes=4000,
            set_aside=lambda w: None,
            redo=redo,
            fail=lambda e: None,
        )
    with pytest.raises(ConfigurationError, match="enable_auto_commit"):
        PrefixTransactions(
            FakeProducer(in_transaction=False),
            fake_consumer(set(), auto_commit=True),
            {},
            metadata_max_bytes=4000,
            set_aside=lambda w: None,
            redo=redo,
            fail=lambda e: None,
        )


def test_what_is_recovered_and_what_stops() -> None:
    fence = dict(code=22, error=Exception, aborted=True)
    assert recoverable(TransactionFencedError("m", producer_fenced=False, **fence))  # type: ignore[arg-type]
    assert not recoverable(TransactionFencedError("p", producer_fenced=True, **fence))  # type: ignore[arg-type]
    assert not recoverable(RuntimeError("output refused"))
    assert recoverable(NotGroupMemberError("membership lost"))  # the loss follows
    assert not recoverable(TransactionInDoubtError("commit unanswered"))  # could double
