"""The share processor's pure parts (outcome -> acknowledgement, the answers' tally, the
health judgement), its input checks, and its thin shell against a scripted consumer.

The fake consumer here stands in for ``ShareConsumer`` only in what the shell calls
(getmany, acknowledge, commit, the renewal and result hooks); the real consumer is
exercised on Apache Kafka in tests/integration/test_share_processing.py.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from aiogroup import ConfigurationError, DeadLetter, ProcessingError, RetryPolicy, ShareConsumer
from aiogroup.metrics import ShareMetrics
from aiogroup.processing import ShareProcessor
from aiogroup.processing.share_outcomes import (
    OUTCOMES,
    ShareTally,
    acknowledgement_for,
    check_on_failure,
)
from aiogroup.share import AcknowledgeType, AckResult, InvalidAcknowledgement
from aiogroup.share.health import LeaderSession, ShareMemberView, assess_share_health
from aiogroup.structs import TopicPartition

T = AcknowledgeType


# -- outcome -> acknowledgement --------------------------------------------------------------

CHOICES: list[str | DeadLetter] = ["stop", "release", "reject", DeadLetter(topic="dlq")]


@pytest.mark.parametrize("on_failure", CHOICES, ids=str)
@pytest.mark.parametrize("outcome", OUTCOMES)
def test_every_outcome_under_every_choice_ends_with_one_acknowledgement(
    outcome: Any, on_failure: str | DeadLetter
) -> None:
    expected = {
        "finished": T.ACCEPT,
        "dead_lettered": T.ACCEPT,
        "cancelled": T.RELEASE,
        "failed": T.REJECT if on_failure == "reject" else T.RELEASE,
    }[outcome]
    assert acknowledgement_for(outcome, on_failure) is expected


def test_an_unknown_outcome_is_named() -> None:
    with pytest.raises(ValueError, match="outcome must be one of"):
        acknowledgement_for("done", "stop")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["ignore", None, 3, "REJECT"])
def test_a_bad_on_failure_is_named(bad: object) -> None:
    with pytest.raises(ValueError, match='"stop", "release", "reject" or DeadLetter'):
        check_on_failure(bad)


# -- the answers' tally ------------------------------------------------------------------------


def result(kind: AcknowledgeType, offsets: tuple[int, ...], code: int = 0) -> AckResult:
    return AckResult("t", 0, kind, offsets, code)


def test_only_a_confirmed_accept_counts_as_accepted() -> None:
    tally = ShareTally()
    tally.answered(
        [
            result(T.ACCEPT, (0, 1, 2)),
            result(T.ACCEPT, (3,), code=58),  # INVALID_RECORD_STATE: the lock ran out
            result(T.ACCEPT, (4,), code=-1),  # no answer: the session ended
            result(T.RELEASE, (5, 6)),
            result(T.REJECT, (7,)),
            result(T.REJECT, (8,), code=58),
            result(T.RENEW, (9, 10)),
            result(T.RENEW, (11,), code=58),
        ]
    )
    tally.refused()  # refused before sending: delivered again since
    assert tally.as_dict() == {
        "accepted": 3,
        "released": 2,
        "rejected": 1,
        "renewed": 2,
        "renew_failed": 1,
        "lock_lost": 4,
    }


# -- health ------------------------------------------------------------------------------------


def view(**changes: Any) -> ShareMemberView:
    base: dict[str, Any] = {
        "lifecycle": "started",
        "member_state": "stable",
        "member_id": "m1",
        "member_epoch": 3,
        "joined": True,
        "session_valid_for_s": 4.5,
        "seconds_since_last_heartbeat": 0.5,
        "seconds_since_broker_response": 0.1,
        "broker_reachable": True,
        "leaders": (LeaderSession(1, True, 7, 2, True),),
        "records_acquired": 10,
        "records_buffered": 4,
        "acknowledgements_in_flight": 2,
    }
    base.update(changes)
    return ShareMemberView(**base)


def test_a_joined_member_with_a_proven_session_is_live_and_ready() -> None:
    h = assess_share_health(view())
    assert (h.live, h.ready, h.session_alive, h.reasons) == (True, True, True, ())
    assert (h.records_acquired, h.records_buffered, h.records_unacknowledged) == (10, 4, 6)
    assert h.as_dict()["leader_sessions"][0]["epoch"] == 7


@pytest.mark.parametrize(
    ("changes", "live", "reason"),
    [
        ({"lifecycle": "new", "joined": False}, False, "consumer is new"),
        ({"lifecycle": "stopped"}, False, "consumer is stopped"),
        ({"joined": False, "member_state": "joining"}, True, "not joined (member state joining)"),
        ({"session_valid_for_s": None}, True, "session not proven"),
        ({"session_valid_for_s": -0.2}, True, "session not proven"),
        ({"broker_reachable": False}, True, "no broker request succeeded"),
        ({"fatal_error": RuntimeError("group type")}, False, "fatal error"),
    ],
)
def test_each_reason_not_to_be_ready_is_named(
    changes: dict[str, Any], live: bool, reason: str
) -> None:
    h = assess_share_health(view(**changes))
    assert not h.ready
    assert h.live is live
    assert any(reason in r for r in h.reasons), h.reasons


def test_the_fatal_error_is_the_last_error() -> None:
    h = assess_share_health(view(fatal_error=KeyError("x"), last_broker_error="old"))
    assert h.last_error == "KeyError('x')"
    assert assess_share_health(view(last_broker_error="timeout")).last_error == "timeout"


def test_an_unstarted_share_consumer_is_not_live() -> None:
    c = ShareConsumer("t", group_id="g")
    h = c.health()
    assert (h.live, h.ready, h.started, h.member_state) == (False, False, False, "new")
    assert h.leader_sessions == () and h.records_acquired == 0


# -- input -------------------------------------------------------------------------------------


async def handler(record: Any) -> None:
    pass


def explicit() -> ShareConsumer:
    return ShareConsumer("t", group_id="g", acknowledgement_mode="explicit")


def test_an_implicit_mode_consumer_is_refused_naming_why() -> None:
    with pytest.raises(ConfigurationError, match="acknowledgement_mode='explicit'"):
        ShareProcessor(ShareConsumer("t", group_id="g"), handler)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"concurrency": 0}, ValueError, "concurrency must be an int >= 1"),
        ({"ordering": "offset"}, ValueError, "ordering must be one of"),
        ({"on_failure": "ignore"}, ValueError, "on_failure"),
        ({"retry": 3}, TypeError, "RetryPolicy"),
        ({"record_timeout_ms": 0}, ValueError, "record_timeout_ms"),
        ({"drain_timeout_ms": -1}, ValueError, "drain_timeout_ms"),
    ],
)
def test_bad_options_are_named(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ShareProcessor(explicit(), handler, **kwargs)


def test_the_handler_must_be_callable() -> None:
    with pytest.raises(TypeError, match="handler must be callable"):
        ShareProcessor(explicit(), 42)  # type: ignore[arg-type]


# -- the shell, against a scripted consumer ------------------------------------------------------


@dataclass
class Rec:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    delivery_count: int = 1
    id: int = 0


@dataclass
class FakeShareConsumer:
    """What ShareProcessor calls of a ShareConsumer, scripted: records to hand out,
    acknowledgements kept, each commit answering them ok (or with ``fail_codes``)."""

    pending: list[Rec] = field(default_factory=list)
    acknowledgement_mode: str = "explicit"
    max_poll_records: int = 500
    acks: list[tuple[int, AcknowledgeType]] = field(default_factory=list)
    held: dict[int, Rec] = field(default_factory=dict)
    taken_max: int = 0
    lock_keepers: int = 0
    keep_lock_calls: int = 0
    commits: int = 0
    fail_codes: dict[int, int] = field(default_factory=dict)
    lost: set[int] = field(default_factory=set)
    stopped: bool = False
    #: As the real consumer: no ShareFetch from hold until the next poll began.
    fetch_held: bool = False
    metrics: ShareMetrics = field(default_factory=ShareMetrics)
    _result_listeners: list[Callable[[list[AckResult]], None]] = field(default_factory=list)
    _stop_hooks: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    _unanswered: list[tuple[Rec, AcknowledgeType]] = field(default_factory=list)

    def _running(self) -> None:
        if self.stopped:
            from aiogroup.errors import ConsumerStoppedError

            raise ConsumerStoppedError("stopped")

    def _hold_fetching(self) -> None:
        self.fetch_held = True

    async def getmany(self, timeout_ms: int = 0, max_records: int = 500) -> Any:
        self._running()
        self.fetch_held = False
        self.taken_max = max(self.taken_max, max_records)
        batch, self.pending = self.pending[:max_records], self.pending[max_records:]
        if not batch:
            await asyncio.sleep(timeout_ms / 1000)
            return {}
        out: dict[TopicPartition, list[Rec]] = {}
        for r in batch:
            self.held[r.offset] = r
            out.setdefault(TopicPartition(r.topic, r.partition), []).append(r)
        return out

    def acknowledge(self, record: Rec, type: AcknowledgeType = T.ACCEPT) -> None:
        self._running()
        if record.offset in self.lost:
            raise InvalidAcknowledgement(f"offset {record.offset} is no longer held")
        if self.held.pop(record.offset, None) is None:
            raise InvalidAcknowledgement("already acknowledged")
        self.acks.append((record.offset, type))
        self._unanswered.append((record, type))

    async def commit(self) -> dict[Any, Any]:
        self._running()
        self.commits += 1
        self._answer()
        return {}

    def commit_async(self) -> asyncio.Task[dict[Any, Any]]:
        return asyncio.get_running_loop().create_task(self.commit())

    def _answer(self) -> None:
        unanswered, self._unanswered = self._unanswered, []
        results = [
            AckResult(r.topic, r.partition, t, (r.offset,), self.fail_codes.get(r.offset, 0))
            for r, t in unanswered
        ]
        for listener in list(self._result_listeners):
            listener(results)

    def _keep_locks(self, on: bool) -> None:
        self._running()
        self.lock_keepers += 1 if on else -1
        self.keep_lock_calls += 1

    async def topics(self) -> set[str]:
        return {"dlq"}

    def _client_settings(self) -> tuple[str, str, dict[str, Any]]:
        return "localhost:9092", "test", {}

    async def stop(self) -> None:
        for hook in list(self._stop_hooks):
            await hook()
        self.stopped = True
        self._answer()  # the close carries what is pending


def records(n: int, keys: Callable[[int], bytes | None] = lambda i: b"k%d" % i) -> list[Rec]:
    ids = itertools.count(1)
    return [Rec("t", 0, i, keys(i), b"v%d" % i, id=next(ids)) for i in range(n)]


async def test_handled_records_are_accepted_and_held_records_stay_within_twice_concurrency() -> (
    None
):
    consumer = FakeShareConsumer(pending=records(50))
    running = 0
    most = 0
    done = asyncio.Event()
    handled: list[int] = []

    async def handle(record: Rec) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.001)
        running -= 1
        handled.append(record.offset)
        if len(handled) == 50:
            done.set()

    proc = ShareProcessor(consumer, handle, concurrency=4)  # type: ignore[arg-type]
    run = asyncio.create_task(proc.run())
    await asyncio.wait_for(done.wait(), 10)
    await proc.stop()
    await run
    assert sorted(handled) == list(range(50))
    assert most == 4  # the concurrency bound, reached
    assert consumer.taken_max <= 8  # never more than 2 x concurrency held
    assert sorted(consumer.acks) == [(i, T.ACCEPT) for i in range(50)]
    m = proc.metrics()
    assert (m["finished"], m["accepted"], m["held"], m["in_flight"]) == (50, 50, 0, 0)
    assert consumer.commits >= 1
    assert (consumer.keep_lock_calls, consumer.lock_keepers) == (2, 0)  # on, then off
    assert consumer._result_listeners == [] and consumer._stop_hooks == []


async def test_key_ordering_runs_one_record_of_a_key_at_a_time_in_delivery_order() -> None:
    consumer = FakeShareConsumer(pending=records(30, keys=lambda i: b"k%d" % (i % 3)))
    seen: dict[bytes, list[int]] = {}
    active: set[bytes] = set()
    overlap = False
    done = asyncio.Event()

    async def handle(record: Rec) -> None:
        nonlocal overlap
        assert record.key is not None
        overlap = overlap or record.key in active
        active.add(record.key)
        await asyncio.sleep(0.001)
        active.discard(record.key)
        seen.setdefault(record.key, []).append(record.offset)
        if sum(map(len, seen.values())) == 30:
            done.set()

    proc = ShareProcessor(consumer, handle, concurrency=10, ordering="key")  # type: ignore[arg-type]
    run = asyncio.create_task(proc.run())
    await asyncio.wait_for(done.wait(), 10)
    await proc.stop()
    await run
    assert not overlap
    assert all(offsets == sorted(offsets) for offsets in seen.values())


@pytest.mark.parametrize(
    ("on_failure", "ack", "counter"),
    [("reject", T.REJECT, "rejected"), ("release", T.RELEASE, "released")],
)
async def test_a_record_failing_every_attempt_is_acknowledged_per_on_failure(
    on_failure: str, ack: AcknowledgeType, counter: str
) -> None:
    consumer = FakeShareConsumer(pending=records(3))
    calls: list[int] = []
    done = asyncio.Event()

    async def handle(record: Rec) -> None:
        calls.append(record.offset)
        if len(calls) == 4:
            done.set()
        if record.offset == 1:
            raise ValueError("poison")

    retry = RetryPolicy(attempts=2, backoff_ms=0)
    proc = ShareProcessor(consumer, handle, retry=retry, on_failure=on_failure)  # type: ignore[arg-type]
    run = asyncio.create_task(proc.run())
    await asyncio.wait_for(done.wait(), 10)
    await proc.stop()
    await run
    assert calls.count(1) == 2
    assert sorted(consumer.acks) == [(0, T.ACCEPT), (1, ack), (2, T.ACCEPT)]
    m = proc.metrics()
    assert (m["failed"], m["retried"], m[counter], m["accepted"]) == (1, 1, 1, 2)


async def test_stop_on_failure_releases_the_record_and_raises() -> None:
    consumer = FakeShareConsumer(pending=records(1))

    async def handle(record: Rec) -> None:
        raise RuntimeError("broken")

    proc = ShareProcessor(consumer, handle, retry=RetryPolicy(attempts=1))  # type: ignore[arg-type]
    with pytest.raises(ProcessingError, match="broken") as caught:
        await asyncio.wait_for(proc.run(), 10)
    assert (caught.value.offset, caught.value.attempts) == (0, 1)
    assert consumer.acks == [(0, T.RELEASE)]
    assert proc.metrics()["released"] == 1


async def test_stop_cancels_what_overruns_the_drain_and_releases_it_and_the_waiting() -> None:
    consumer = FakeShareConsumer(pending=records(5))
    started = asyncio.Event()
    never = asyncio.Event()

    async def stuck(record: Rec) -> None:
        started.set()
        await never.wait()

    proc = ShareProcessor(consumer, stuck, concurrency=3, drain_timeout_ms=10)  # type: ignore[arg-type]
    run = asyncio.create_task(proc.run())
    await asyncio.wait_for(started.wait(), 10)
    await proc.stop()
    await run
    assert sorted(consumer.acks) == [(i, T.RELEASE) for i in range(5)]
    m = proc.metrics()
    assert (m["released"], m["finished"], m["held"]) == (5, 0, 0)
    # The consumer runs on but fetches nothing until the application polls it again:
    # what was released is not acquired back for a consumer nobody reads.
    assert consumer.fetch_held
    await consumer.getmany(timeout_ms=0)
    assert not consumer.fetch_held


async def test_consumer_stop_stops_the_processor_and_leaves_the_releases_to_its_close() -> None:
    consumer = FakeShareConsumer(pending=records(2))
    first = asyncio.Event()
    never = asyncio.Event()

    async def handle(record: Rec) -> None:
        if record.offset == 0:
            first.set()
            return
        await never.wait()

    proc = ShareProcessor(consumer, handle, drain_timeout_ms=10)  # type: ignore[arg-type]
    run = asyncio.create_task(proc.run())
    await asyncio.wait_for(first.wait(), 10)
    await consumer.stop()
    await run
    # The finished record is accepted; the cancelled one is the close's to release
    # (the real consumer's close RELEASEs what is handed out and not acknowledged).
    assert consumer.acks == [(0, T.ACCEPT)]
    assert 1 in consumer.held
    assert proc.metrics()["accepted"] == 1
    assert not consumer.fetch_held  # closing: nothing to hold


async def test_a_record_whose_lock_was_lost_is_counted_not_accepted() -> None:
    consumer = FakeShareConsumer(pending=records(3), lost={1}, fail_codes={2: 58})
    done = asyncio.Event()
    handled: list[int] = []

    async def handle(record: Rec) -> None:
        handled.append(record.offset)
        if len(handled) == 3:
            done.set()

    proc = ShareProcessor(consumer, handle)  # type: ignore[arg-type]
    run = asyncio.create_task(proc.run())
    await asyncio.wait_for(done.wait(), 10)
    await proc.stop()
    await run
    m = proc.metrics()
    assert (m["finished"], m["accepted"], m["lock_lost"]) == (3, 1, 2)


async def test_a_processor_runs_once() -> None:
    consumer = FakeShareConsumer()
    proc = ShareProcessor(consumer, handler)  # type: ignore[arg-type]
    await proc.stop()  # before run(): run() returns at once
    await asyncio.wait_for(proc.run(), 5)
    with pytest.raises(RuntimeError, match="can be called once"):
        await proc.run()


# -- the share fetcher settles acknowledgements before re-acquisitions (was a gap) ----------


async def test_a_release_riding_on_a_fetch_that_reacquires_the_record_is_reported() -> None:
    from aiogroup._fetch.share_fetcher import ShareHooks
    from tests.unit.share.test_share_fetcher import TID, Gated, ScriptedLeader, fetch_answer, make
    from tests.unit.share.test_share_fetcher import records as fetched

    # The share fetcher settles a ShareFetch answer's acknowledgements before it registers
    # what the answer acquired.  The fetch that reads ahead (it leaves while record 0 is
    # buffered) is held until the RELEASE is made, so the RELEASE rides on the one after.
    ahead = Gated(fetch_answer())
    client = ScriptedLeader(
        [fetch_answer(acquired=(0, 0, 1)), ahead, fetch_answer(acquired=(0, 0, 2))]
    )
    reported: list[AckResult] = []
    fetcher = make(client, hooks=ShareHooks(results=reported.extend))
    try:
        fetcher.set_assignment({("t", 0): TID})
        (first,) = await fetched(fetcher, 1)
        fetcher.tracker.acknowledge(first.acquisition, T.RELEASE)
        fetcher.acknowledged()
        ahead.gate.set()  # the buffer is empty: the RELEASE rides on the next fetch
        (again,) = await fetched(fetcher, 1)  # ... whose answer acquires offset 0 again
        assert again.delivery_count == 2
        assert [(r.ack_type, r.offsets, r.ok) for r in reported] == [(T.RELEASE, (0,), True)]
    finally:
        await fetcher.abort()


async def test_process_needs_a_started_explicit_consumer() -> None:
    from aiogroup.errors import IllegalStateError

    with pytest.raises(ConfigurationError, match="acknowledgement_mode='explicit'"):
        await ShareConsumer("t", group_id="g").process(handler)
    with pytest.raises(IllegalStateError, match="not started"):
        await explicit().process(handler)


async def test_a_sync_handler_runs_in_a_thread_and_an_overrun_is_a_failed_attempt() -> None:
    import threading

    consumer = FakeShareConsumer(pending=records(2))
    threads: set[str] = set()
    attempts: dict[int, int] = {}
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    def handle(record: Rec) -> None:  # a plain function: the thread pool
        threads.add(threading.current_thread().name)
        attempts[record.offset] = attempts.get(record.offset, 0) + 1
        if record.offset == 1 and attempts[1] == 1:
            threading.Event().wait(0.5)  # overruns record_timeout_ms the first time
        if sum(attempts.values()) == 3:
            loop.call_soon_threadsafe(done.set)

    proc = ShareProcessor(
        consumer,  # type: ignore[arg-type]
        handle,
        record_timeout_ms=100,
        retry=RetryPolicy(attempts=2, backoff_ms=0),
    )
    run = asyncio.create_task(proc.run())
    await asyncio.wait_for(done.wait(), 10)
    await proc.stop()
    await run
    assert all(name.startswith("aiogroup-handler") for name in threads)
    assert attempts == {0: 1, 1: 2}
    assert sorted(consumer.acks) == [(0, T.ACCEPT), (1, T.ACCEPT)]
    assert proc.metrics()["retried"] == 1
