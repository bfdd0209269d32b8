"""Bad input to the processor gets an error naming the problem; the rebalance hook order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from aiogroup import ConfigurationError, GroupConsumer, Processor, RetryPolicy
from aiogroup.listeners import (
    AsyncConsumerRebalanceListener,
    ConsumerRebalanceListener,
    HookedListener,
    ListenerThread,
    RebalanceHooks,
    as_async_listener,
)
from aiogroup.structs import TopicPartition


async def handler(record: Any) -> None:
    pass


def consumer(**options: Any) -> GroupConsumer:
    options.setdefault("enable_auto_commit", False)
    return GroupConsumer(group_id="g", **options)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"concurrency": 0}, ValueError, "concurrency must be an int >= 1"),
        ({"concurrency": 2.5}, ValueError, "concurrency"),
        ({"ordering": "offset"}, ValueError, "ordering must be one of"),
        ({"on_failure": "ignore"}, ValueError, "on_failure"),
        ({"retry": 3}, TypeError, "RetryPolicy"),
        ({"record_timeout_ms": 0}, ValueError, "record_timeout_ms"),
        ({"drain_timeout_ms": -5}, ValueError, "drain_timeout_ms"),
        ({"commit_interval_ms": -1}, ValueError, "commit_interval_ms must be a number"),
        ({"commit_interval_ms": "5s"}, ValueError, "commit_interval_ms"),
        ({"max_unfinished_per_partition": 0}, ValueError, "max_unfinished_per_partition"),
        ({"max_uncommitted": 0}, ValueError, "max_uncommitted must be None or an int >= conc"),
        ({"concurrency": 10, "max_uncommitted": 9}, ValueError, r"int >= concurrency \(10\)"),
        ({"max_uncommitted": True}, ValueError, "max_uncommitted"),
        ({"max_uncommitted": 150.0}, ValueError, "max_uncommitted"),
        (
            {"max_uncommitted": 100, "transactional_producer": object()},
            ValueError,
            "max_uncommitted and transactional_producer cannot be combined",
        ),
    ],
)
def test_bad_options_are_named(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        Processor(consumer(), handler, **kwargs)


def test_handler_must_be_callable() -> None:
    with pytest.raises(TypeError, match="handler must be callable"):
        Processor(consumer(), "not a function")  # type: ignore[arg-type]


def test_auto_commit_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="enable_auto_commit=False"):
        Processor(consumer(enable_auto_commit=True), handler)


def test_drain_must_fit_in_the_rebalance_timeout() -> None:
    with pytest.raises(ConfigurationError, match="rebalance timeout"):
        Processor(consumer(max_poll_interval_ms=20_000), handler, drain_timeout_ms=20_000)


def test_good_options_build() -> None:
    p = Processor(consumer(), lambda r: None, ordering="unordered", retry=RetryPolicy(attempts=1))
    assert p is not None


async def test_commit_interval_zero_commits_after_each_finish_not_on_a_clock() -> None:
    """commit_interval_ms=0: a commit as soon as a record finished (one at a time), and
    none while nothing finishes - continuous, not periodic."""
    from aiogroup.processing.scheduler import Work

    p = Processor(consumer(), handler, commit_interval_ms=0)
    commits: list[None] = []
    committed = asyncio.Event()

    async def fake_commit(partitions: object) -> None:
        commits.append(None)
        committed.set()

    p._commit = fake_commit  # type: ignore[method-assign]
    loop_task = asyncio.ensure_future(p._commit_loop())
    try:
        for _ in range(5):
            await asyncio.sleep(0)
        assert commits == []  # nothing finished: no commit
        tp = TopicPartition("t", 0)
        p._finish(Work(tp, 0, tp))
        p._finish(Work(tp, 1, tp))  # two finishes before the loop runs: one commit
        await asyncio.wait_for(committed.wait(), 5)
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(commits) == 1
        committed.clear()
        p._finish(Work(tp, 2, tp))
        await asyncio.wait_for(committed.wait(), 5)
        assert len(commits) == 2
    finally:
        loop_task.cancel()
        await asyncio.gather(loop_task, return_exceptions=True)


async def test_a_start_refused_for_max_uncommitted_commits_at_once_and_refills_after() -> None:
    """commit_interval_ms=5000 with max_uncommitted: a start refused for the bound
    wakes the commit loop at once (not after 5 s); its answer lets the slots refill
    (_dispatch); a failed commit is tried again shortly while they wait."""
    p = Processor(consumer(), handler, concurrency=2, max_uncommitted=2, commit_interval_ms=5000)
    outcomes = [False, True]
    commits: list[bool] = []
    answered = asyncio.Event()
    dispatched: list[bool] = []

    async def fake_commit(partitions: object) -> bool | None:
        commits.append(outcomes[len(commits)] if len(commits) < len(outcomes) else True)
        if commits[-1]:
            answered.set()
        return commits[-1]

    p._commit = fake_commit  # type: ignore[method-assign]
    p._dispatch = lambda: dispatched.append(p._bound_blocked)  # type: ignore[method-assign]
    loop_task = asyncio.ensure_future(p._commit_loop())
    try:
        for _ in range(5):
            await asyncio.sleep(0)
        assert commits == []  # nothing asked for: the interval has not passed
        p._bound_blocked = True  # what _take_bounded does when it refuses
        assert p._urgent is not None
        p._urgent.set()
        await asyncio.wait_for(answered.wait(), 2)  # well before the 5 s interval
        for _ in range(5):
            await asyncio.sleep(0)
        assert commits == [False, True]  # the failure was tried again
        assert dispatched == [False] and not p._bound_blocked
    finally:
        loop_task.cancel()
        await asyncio.gather(loop_task, return_exceptions=True)


async def test_metrics_show_the_work_at_risk_only_with_the_bound() -> None:
    plain = Processor(consumer(), handler)
    assert plain._bound is None and plain._urgent is None
    assert (plain.metrics()["uncommitted"], plain.metrics()["max_uncommitted"]) == (None, None)
    bounded = Processor(consumer(), handler, concurrency=4, max_uncommitted=8)
    assert bounded._bound is not None
    bounded._bound.started(TopicPartition("t", 0), 3)
    m = bounded.metrics()
    assert (m["uncommitted"], m["max_uncommitted"], m["commit_waits"]) == (1, 8, 0)


class Recording:
    def __init__(self, calls: list[str], name: str) -> None:
        self.calls, self.name = calls, name

    async def partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(f"{self.name}-revoked")

    async def partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(f"{self.name}-assigned")

    async def partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.calls.append(f"{self.name}-lost")


async def test_hooks_run_before_the_application_listener_and_lost_is_not_revoked() -> None:
    calls: list[str] = []

    class App(AsyncConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            calls.append("app-revoked")

        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            calls.append("app-assigned")

    hooks = RebalanceHooks()
    listener = HookedListener(App(), hooks)
    hook = Recording(calls, "hook")
    hooks.add(hook)  # added after the listener was made: still runs
    tps = {TopicPartition("t", 0)}
    await listener.on_partitions_assigned(tps)
    await listener.on_partitions_revoked(tps)
    await listener.on_partitions_lost(tps)  # App's default lost calls its revoked
    assert calls == [
        "hook-assigned",
        "app-assigned",
        "hook-revoked",
        "app-revoked",
        "hook-lost",
        "app-revoked",
    ]
    hooks.remove(hook)
    calls.clear()
    await listener.on_partitions_revoked(tps)
    assert calls == ["app-revoked"]


async def test_rewrapping_with_the_consumer_thread_keeps_the_hooks() -> None:
    calls: list[str] = []

    class Sync(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            calls.append("sync-revoked")

    hooks = RebalanceHooks()
    hooks.add(Recording(calls, "hook"))
    thread = ListenerThread()
    wrapped = as_async_listener(HookedListener(Sync(), hooks), thread=thread)
    assert isinstance(wrapped, HookedListener) and wrapped.hooks is hooks
    await wrapped.on_partitions_revoked({TopicPartition("t", 0)})
    assert calls == ["hook-revoked", "sync-revoked"]
    assert thread._executor is not None  # the sync method ran in the consumer's thread
    thread.close()


def test_a_metrics_partition_key_names_its_partition_and_nothing_else_parses() -> None:
    from aiogroup.processing.processor import metrics_partition

    assert metrics_partition("orders.v2-x[12]") == TopicPartition("orders.v2-x", 12)
    for bad in ("orders", "[3]", "orders[]", "orders[x]", "orders[3", "orders3]"):
        with pytest.raises(ValueError, match="not a processor metrics partition key"):
            metrics_partition(bad)


async def test_a_handler_task_goes_on_with_the_next_record_and_retries_a_failed_first_attempt() -> (
    None
):
    """The per-record path of a handler task (Processor._work): the first attempt is
    awaited in the task itself; one that fails goes through the retry policy; the
    record is finished, its slot freed, and the same task takes the next record."""
    from aiogroup.processing.scheduler import Work
    from aiogroup.processing.tracker import PartitionTracker

    calls: list[int] = []
    tasks_seen: set[asyncio.Task[Any]] = set()

    async def flaky(record: Any) -> None:
        calls.append(record)
        task = asyncio.current_task()
        assert task is not None
        tasks_seen.add(task)
        await asyncio.sleep(0)
        if record == 1 and calls.count(1) == 1:
            raise RuntimeError("first attempt fails")

    p = Processor(consumer(), flaky, concurrency=1, retry=RetryPolicy(attempts=2, backoff_ms=1))
    tp = TopicPartition("t", 0)
    tracker = p._trackers[tp] = PartitionTracker()
    works = [Work(tp, offset, tp, record=offset) for offset in range(3)]
    for w in works:
        assert tracker.received(w.offset)
    p._sched.add_many(tp, works)
    first = p._sched.take_one()
    assert first is works[0] and p._sched.take_one() is None  # concurrency 1
    task = asyncio.ensure_future(p._work(first))
    p._tasks[first] = task
    await asyncio.wait_for(task, 5)
    assert calls == [0, 1, 1, 2]  # in offset order, record 1 twice
    assert tasks_seen == {task}  # one task carried all three
    assert (p._finished, p._retried, p._failed) == (3, 1, 0)
    assert tracker.unfinished == 0 and tracker.committable() == 3
    assert not p._sched.in_flight and p._sched.queued == 0 and not p._tasks


def test_a_transactional_producer_needs_a_transactional_id() -> None:
    from aiokafka import AIOKafkaProducer

    async def make() -> None:
        plain = AIOKafkaProducer(bootstrap_servers="localhost:1")  # never started
        with pytest.raises(ConfigurationError, match="no transactional_id"):
            Processor(consumer(), handler, transactional_producer=plain)
        with pytest.raises(ConfigurationError, match="transactional_producer"):
            Processor(consumer(), handler, transactional_producer=object())

    asyncio.run(make())
