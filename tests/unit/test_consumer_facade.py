"""GroupConsumer, the facade, against a scripted cluster on virtual time.

The real fetcher and the real classic coordination routine run; only the client is
scripted (``tests/unit/scripted_client.py``).  What is checked is what the facade
decides: which input it refuses and with what message, what a call does in each
lifecycle state, how subscribe and assign exclude each other, what a commit sends,
and how polling ends.  The wire is the integration tier's business.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import warnings
from typing import Any

import pytest
from aiokafka.errors import (
    ConsumerStoppedError,
    IllegalOperation,
    IllegalStateError,
    KafkaConnectionError,
    KafkaTimeoutError,
    UnknownTopicOrPartitionError,
)

from aiogroup import AsyncConsumerRebalanceListener, GroupConsumer
from aiogroup._membership.codes import ErrorCode
from aiogroup.errors import CommitFailedError, ConfigurationError, KafkaError
from aiogroup.structs import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from tests.unit.scripted_client import BASE_TS, ScriptedClient, install, virtual

TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
ELSEWHERE = TopicPartition("other", 0)


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> ScriptedClient:
    scripted = ScriptedClient()
    install(monkeypatch, scripted)
    return scripted


def consumer(*topics: str, **options: Any) -> GroupConsumer:
    """A consumer with the scripted group's id and no background commits by default."""
    options.setdefault("group_id", "g")
    options.setdefault("enable_auto_commit", False)
    options.setdefault("auto_offset_reset", "earliest")
    return GroupConsumer(*topics, **options)


async def subscribed(**options: Any) -> GroupConsumer:
    """Started, joined and holding both partitions of topic ``t``."""
    c = consumer("t", **options)
    await c.start()
    assert c.assignment() == {TP0, TP1}
    return c


async def assigned(*partitions: TopicPartition, **options: Any) -> GroupConsumer:
    """Started with a manual assignment (default: both partitions of ``t``)."""
    c = consumer(**options)
    await c.start()
    c.assign(list(partitions or (TP0, TP1)))
    return c


def offsets(batches: dict[TopicPartition, list[Any]]) -> dict[TopicPartition, list[int]]:
    return {tp: [r.offset for r in records] for tp, records in batches.items()}


# -- the constructor's warnings --------------------------------------------------------------


def test_the_loop_argument_is_ignored_with_a_deprecation_warning() -> None:
    loop = asyncio.new_event_loop()
    try:
        with pytest.warns(DeprecationWarning, match="loop argument is ignored"):
            GroupConsumer(loop=loop)
    finally:
        loop.close()


def test_api_version_is_ignored_with_a_warning_unless_auto() -> None:
    with pytest.warns(DeprecationWarning, match="api_version is ignored"):
        GroupConsumer(api_version="2.8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GroupConsumer(api_version="auto")


# -- lifecycle --------------------------------------------------------------------------------


def test_start_builds_the_client_from_the_config_then_stop_leaves_and_closes(
    client: ScriptedClient,
) -> None:
    async def scenario() -> None:
        c = await subscribed(client_id="me", request_timeout_ms=7_000, security_protocol="SSL")
        assert client.options["client_id"] == "me"
        assert client.options["request_timeout_ms"] == 7_000
        assert client.options["security_protocol"] == "SSL"
        assert (c.member_id, c.generation) == ("m-1", 1)
        assert c.config.group_id == "g"
        await c.stop()
        assert client.names()[-1] == "LeaveGroup" and client.closed == 1
        await c.stop()  # idempotent: nothing sent, nothing closed twice
        assert client.names().count("LeaveGroup") == 1 and client.closed == 1

    virtual(scenario)


def test_start_twice_is_refused_and_start_after_stop_is_stopped(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = await subscribed()
        with pytest.raises(IllegalStateError, match="start\\(\\) called twice"):
            await c.start()
        await c.stop()
        with pytest.raises(ConsumerStoppedError):
            await c.start()

    virtual(scenario)


def test_calls_while_start_is_connecting_and_a_stop_then(client: ScriptedClient) -> None:
    """A second start() is refused, a poll says the consumer is starting, and a stop()
    waits for start() to finish connecting, then stops it: each call ends in a state
    it can name, and nothing is opened twice."""

    async def scenario() -> None:
        client.bootstrap_gate = gate = asyncio.Event()
        c = consumer("t")
        starting = asyncio.create_task(c.start())
        await asyncio.sleep(0)  # the task runs to the gate: bootstrap() is its first await
        assert client.bootstraps == 1
        assert c.health().member_state == "STARTING"
        with pytest.raises(IllegalStateError, match="start\\(\\) called twice"):
            await c.start()
        with pytest.raises(IllegalStateError, match="is starting"):
            await c.getmany()
        stopping = asyncio.create_task(c.stop())
        await asyncio.sleep(1)
        assert not stopping.done()  # waits for the connecting start()
        gate.set()
        await stopping
        assert client.bootstraps == 1 and client.closed == 1
        assert c.health().member_state in ("STOPPED", "CLOSED")
        await asyncio.gather(starting, return_exceptions=True)
        with pytest.raises(ConsumerStoppedError):
            await c.getmany()

    virtual(scenario)


def test_start_while_stop_runs_is_refused_naming_why(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = await subscribed()
        first = asyncio.create_task(c.stop())
        await asyncio.sleep(0)
        assert c.health().member_state not in ("STOPPED", "CLOSED")
        with pytest.raises(ConsumerStoppedError, match="while stop\\(\\) is running"):
            await c.start()
        await first
        assert c.health().member_state in ("STOPPED", "CLOSED") and client.closed == 1

    virtual(scenario)


def test_calls_after_stop_raise_consumer_stopped(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = await subscribed()
        await c.stop()
        for call in (c.getmany(), c.getone(), c.commit(), c.committed(TP0), c.topics()):
            with pytest.raises(ConsumerStoppedError):
                await call
        with pytest.raises(ConsumerStoppedError):
            c.seek(TP0, 1)
        with pytest.raises(ConsumerStoppedError):
            c.paused()

    virtual(scenario)


def test_a_failed_bootstrap_says_why_and_closes_what_was_opened(client: ScriptedClient) -> None:
    async def scenario() -> None:
        client.bootstrap_error = KafkaConnectionError("Unable to bootstrap from [...]")
        c = consumer("t", bootstrap_servers="127.0.0.1:1")
        with pytest.raises(
            KafkaConnectionError, match=r"could not connect to 127\.0\.0\.1:1 \(PLAINTEXT\)"
        ) as info:
            await c.start()
        assert isinstance(info.value.__cause__, KafkaConnectionError)
        assert client.closed == 1

    # Not on virtual time: the diagnosis dials the (closed) port for real.
    asyncio.run(scenario())


def test_abort_sends_nothing_and_is_idempotent(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = await subscribed()
        sent = len(client.requests)
        await c.abort()
        assert [n for n in client.names()[sent:] if n != "Fetch"] == []
        assert "LeaveGroup" not in client.names() and client.closed == 1
        await c.abort()
        await c.stop()  # after abort: already stopped
        assert client.closed == 1
        fresh = consumer()
        await fresh.abort()  # never started: stopped, nothing to close
        with pytest.raises(ConsumerStoppedError):
            await fresh.start()

    virtual(scenario)


def test_async_with_starts_and_stops(client: ScriptedClient) -> None:
    async def scenario() -> None:
        async with consumer("t") as c:
            assert c.assignment() == {TP0, TP1}
        assert client.closed == 1
        with pytest.raises(ConsumerStoppedError):
            await c.getmany()

    virtual(scenario)


def test_assign_before_start_is_applied_by_start(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = consumer()
        c.assign([TP1])
        await c.start()
        assert c.assignment() == {TP1}
        assert "JoinGroup" not in client.names()
        await c.stop()

    virtual(scenario)


def test_subscribe_before_start_by_pattern_joins_at_start(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = consumer()
        c.subscribe(pattern="^t$")
        await c.start()
        assert c.assignment() == {TP0, TP1}
        assert c.subscription() == frozenset({"t"})
        await c.stop()

    virtual(scenario)


def test_the_consumer_protocol_builds_its_own_coordinator(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = consumer(group_protocol="consumer")
        c.assign([TP0])
        await c.start()
        assert type(c._coordinator).__name__ == "ConsumerGroupCoordinator"
        assert c.assignment() == {TP0}
        assert "JoinGroup" not in client.names()  # the classic join is not used
        await c.stop()
        assert client.closed == 1

    virtual(scenario)


# -- start() waiting for the first assignment -------------------------------------------------


def test_start_times_out_when_the_group_never_answers_and_stops(client: ScriptedClient) -> None:
    async def scenario() -> None:
        client.hold_join = asyncio.Event()  # the JoinGroup is never answered
        c = consumer("t", rebalance_timeout_ms=20_000, request_timeout_ms=5_000)
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(KafkaTimeoutError, match="no assignment for group 'g' within 25s"):
            await c.start()
        assert loop.time() - began == pytest.approx(25, abs=1)
        assert client.closed == 1
        with pytest.raises(ConsumerStoppedError):
            await c.getmany()

    virtual(scenario)


def test_start_raises_a_missing_acl_at_once(client: ScriptedClient) -> None:
    async def scenario() -> None:
        client.script["JoinGroup"] = [ErrorCode.GROUP_AUTHORIZATION_FAILED]
        c = consumer("t")
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(KafkaError, match=r"not authorized for group 'g'"):
            await c.start()
        assert loop.time() - began < 5, "an ACL error is not waited out"
        assert client.closed == 1

    virtual(scenario)


def test_start_raises_a_fatal_group_error(client: ScriptedClient) -> None:
    async def scenario() -> None:
        client.script["JoinGroup"] = [ErrorCode.INCONSISTENT_GROUP_PROTOCOL]
        c = consumer("t")
        with pytest.raises(KafkaError, match=r"INCONSISTENT_GROUP_PROTOCOL"):
            await c.start()
        assert client.closed == 1

    virtual(scenario)


def test_start_waits_through_a_retriable_error(client: ScriptedClient) -> None:
    class Counting(AsyncConsumerRebalanceListener):
        def __init__(self) -> None:
            self.calls = 0

        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            pass

        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            self.calls += 1

    async def scenario() -> None:
        client.script["JoinGroup"] = [ErrorCode.COORDINATOR_NOT_AVAILABLE]
        listener = Counting()
        c = consumer("t", listener=listener)
        await c.start()
        assert c.assignment() == {TP0, TP1} and listener.calls == 1
        assert client.names().count("JoinGroup") == 2
        await c.stop()

    virtual(scenario)


def test_a_listener_failing_in_the_first_assignment_ends_the_waiting_poll(
    client: ScriptedClient,
) -> None:
    class Raising(AsyncConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            pass

        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            raise ValueError("listener bug")

    async def scenario() -> None:
        c = consumer("t", listener=Raising())
        await c.start()  # the assignment is in: the listener runs after start() returns
        assert c.assignment() == {TP0, TP1}
        with pytest.raises(ValueError, match="listener bug"):
            await c.getmany(timeout_ms=60_000)  # woken by the error, not its timeout
        assert await c.getmany() == {}  # reported once
        await c.stop()

    virtual(scenario)


# -- subscribe and assign -------------------------------------------------------------------


@pytest.mark.parametrize("started", [False, True], ids=["before-start", "after-start"])
@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"topics": ["t"], "pattern": "t.*"}, "topics or pattern, not both"),
        ({}, "needs topics or a pattern"),
        ({"pattern": "("}, "invalid subscription pattern '\\('"),
    ],
)
def test_subscribe_rejects_bad_arguments(
    client: ScriptedClient, started: bool, kwargs: dict[str, Any], fragment: str
) -> None:
    async def scenario() -> None:
        c = consumer()
        if started:
            await c.start()
        with pytest.raises(ConfigurationError, match=fragment):
            c.subscribe(**kwargs)
        assert c.subscription() == frozenset()
        await c.stop()

    virtual(scenario)


def test_subscribe_without_a_group_is_refused_after_start(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = consumer(group_id=None)
        await c.start()
        with pytest.raises(ConfigurationError, match="subscribe\\(\\) needs group_id"):
            c.subscribe(["t"])
        with pytest.raises(IllegalOperation, match="needs a group_id"):
            await c.commit({TP0: 1})
        with pytest.raises(IllegalOperation, match="committed\\(\\) needs a group_id"):
            await c.committed(TP0)
        assert c.member_id is None and c.generation is None
        await c.stop()

    virtual(scenario)


def test_a_non_listener_passed_to_subscribe_before_start_is_refused() -> None:
    c = consumer()
    with pytest.raises(TypeError, match="on_partitions_revoked"):
        c.subscribe(["t"], listener=object())
    assert c.subscription() == frozenset()


def test_subscribe_and_assign_exclude_each_other_after_start(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = await assigned(TP0)
        with pytest.raises(IllegalStateError, match="subscribe\\(\\) after assign\\(\\)"):
            c.subscribe(["t"])
        c.unsubscribe()
        assert c.assignment() == set()
        c.subscribe("t")  # a single topic name is one topic, not its letters
        assert c.subscription() == frozenset({"t"})
        with pytest.raises(IllegalStateError, match="assign\\(\\) after subscribe\\(\\)"):
            c.assign([TP0])
        await c.stop()

    virtual(scenario)


def test_subscribe_by_pattern_after_start_follows_matching_topics(
    client: ScriptedClient,
) -> None:
    async def scenario() -> None:
        c = consumer()
        await c.start()
        c.subscribe(pattern="^t$")
        await client.until(lambda: c.assignment() == {TP0, TP1})
        assert c.subscription() == frozenset({"t"})
        await c.stop()

    virtual(scenario)


@pytest.mark.parametrize("started", [False, True], ids=["before-start", "after-start"])
@pytest.mark.parametrize(
    ("partition", "error", "fragment"),
    [
        (("t", 0), TypeError, "assign\\(\\) takes TopicPartition objects"),
        (TopicPartition("t", -1), ValueError, "partition numbers are >= 0"),
        (TopicPartition("bad topic", 0), ValueError, "may contain only"),
    ],
)
def test_assign_rejects_what_is_not_a_partition(
    client: ScriptedClient, started: bool, partition: Any, error: type[Exception], fragment: str
) -> None:
    async def scenario() -> None:
        c = consumer()
        if started:
            await c.start()
        with pytest.raises(error, match=fragment):
            c.assign([partition])
        assert c.assignment() == set()
        await c.stop()

    virtual(scenario)


def test_assign_after_unsubscribing_from_the_group_starts_from_committed(
    client: ScriptedClient,
) -> None:
    async def scenario() -> None:
        client.committed[("t", 0)] = 2
        client.produce(TP0, 5)
        c = await subscribed()
        c.seek(TP0, 4)  # the group-era position is not carried into the assignment
        c.unsubscribe()
        assert c.assignment() == set()
        c.assign([TP0])
        assert c.assignment() == {TP0}
        assert await c.position(TP0) == 2
        await c.stop()

    virtual(scenario)


def test_without_a_group_an_assignment_starts_by_auto_offset_reset(
    client: ScriptedClient,
) -> None:
    async def scenario() -> None:
        client.produce(TP0, 3)
        c = await assigned(TP0, group_id=None, auto_offset_reset="latest")
        assert await c.position(TP0) == 3
        assert "OffsetFetch" not in client.names()
        await c.stop()

    virtual(scenario)


def test_unsubscribe_before_start_forgets_the_assignment() -> None:
    c = consumer()
    c.assign([TP0])
    c.unsubscribe()
    c.subscribe(["t"])  # no longer "after assign()"
    assert c.subscription() == frozenset({"t"})


# -- polling ----------------------------------------------------------------------------------


def test_getmany_returns_what_is_there_bounded_by_max_records(client: ScriptedClient) -> None:
    async def scenario() -> None:
        client.produce(TP0, 5)
        c = await subscribed()
        first = await c.getmany(TP0, timeout_ms=1_000, max_records=2)
        assert offsets(first) == {TP0: [0, 1]}
        rest = await c.getmany(timeout_ms=1_000)
        assert offsets(rest) == {TP0: [2, 3, 4]}
        snap = c.metrics()
        assert snap.records_consumed == 5 and snap.bytes_consumed > 0
        await c.stop()

    virtual(scenario)


def test_max_poll_records_is_the_default_max_records(client: ScriptedClient) -> None:
    async def scenario() -> None:
        client.produce(TP1, 4)
        c = await subscribed(max_poll_records=3)
        assert offsets(await c.getmany(timeout_ms=1_000)) == {TP1: [0, 1, 2]}
        await c.stop()

    virtual(scenario)


def test_getmany_waits_up_to_its_timeout_then_returns_nothing(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = await subscribed()
        loop = asyncio.get_running_loop()
        began = loop.time()
        assert await c.getmany(timeout_ms=3_000) == {}
        assert loop.time() - began == pytest.approx(3.0, abs=0.6)
        began = loop.time()
        assert await c.getmany() == {}  # timeout_ms=0: what is buffered, at once
        assert loop.time() - began < 0.1
        await c.stop()

    virtual(scenario)


def test_getmany_wakes_when_records_arrive(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = await subscribed()
        waiting = asyncio.ensure_future(c.getmany(timeout_ms=60_000))
        await client.until(lambda: c._subscription is not None and c._subscription.polls_waiting)
        assert c.health().seconds_since_last_poll == 0.0  # waiting for records is polling
        client.produce(TP1, 2)
        assert offsets(await waiting) == {TP1: [0, 1]}
        await c.stop()

    virtual(scenario)


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"timeout_ms": -1}, "timeout_ms must be >= 0, got -1"),
        ({"max_records": 0}, "max_records must be > 0 or None, got 0"),
    ],
)
def test_poll_arguments_are_checked(
    client: ScriptedClient, kwargs: dict[str, int], fragment: str
) -> None:
    async def scenario() -> None:
        c = await subscribed()
        with pytest.raises(ValueError, match=fragment):
            await c.getmany(**kwargs)
        with pytest.raises(ValueError, match=fragment):
            await c.getmany_arrow(**kwargs)
        await c.stop()

    virtual(scenario)


def test_polling_an_unassigned_partition_names_it(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = await assigned(TP0)
        for call in (c.getmany(TP1), c.getone(TP1), c.getmany_arrow(TP1)):
            with pytest.raises(IllegalStateError, match=r"partition=1\).* is not assigned"):
                await call
        assert c._subscription is not None and c._subscription.polls_waiting == 0
        await c.stop()

    virtual(scenario)


def test_getone_hands_out_records_in_order(client: ScriptedClient) -> None:
    async def scenario() -> None:
        client.produce(TP0, 2)
        c = await assigned(TP0)
        got = [(await c.getone()).offset, (await c.getone(TP0)).offset]
        assert got == [0, 1]
        assert c.metrics().records_consumed == 2
        await c.stop()

    virtual(scenario)


def test_getmany_arrow_returns_one_batch_or_none(client: ScriptedClient) -> None:
    async def scenario() -> None:
        client.produce(TP0, 3)
        c = await assigned(TP0)
        batch = await c.getmany_arrow(timeout_ms=1_000)
        assert batch is not None and batch.column("offset").to_pylist() == [0, 1, 2]
        assert batch.column("value").to_pylist() == [b"v0", b"v1", b"v2"]
        assert c.metrics().records_consumed == 3
        assert await c.getmany_arrow(timeout_ms=100) is None
        await c.stop()

    virtual(scenario)


def test_async_for_ends_when_the_consumer_is_stopped(client: ScriptedClient) -> None:
    async def scenario() -> None:
        client.produce(TP0, 3)
        c = await assigned(TP0)
        seen: list[int] = []
        three = asyncio.Event()

        async def consume() -> None:
            async for record in c:
                seen.append(record.offset)
                if len(seen) == 3:
                    three.set()

        loop_task = asyncio.ensure_future(consume())
        await three.wait()
        await c.stop()
        await asyncio.wait_for(loop_task, 5)  # the iteration ended, no exception
        assert seen == [0, 1, 2]

    virtual(scenario)


def test_async_for_from_held_records_notes_a_poll_each_second_and_counts_each_record(
    client: ScriptedClient,
) -> None:
    """Steps served from held records skip the per-step poll; a timer brings it back."""

    async def scenario() -> None:
        client.produce(TP0, 50)
        c = await assigned(TP0)
        assert c._subscription is not None
        polls: list[float] = []
        c._subscription.add_poll_callback(lambda: polls.append(asyncio.get_running_loop().time()))
        n = 0
        async for _record in c:
            n += 1
            if n == 20:
                break
            await asyncio.sleep(0.3)  # the application's work, 5.7 s in all
        # One refill held all 50: the poll is noted there and then about each second.
        assert 5 <= len(polls) <= 8
        assert max(b - a for a, b in itertools.pairwise(polls)) <= 1.3
        assert c.metrics().records_consumed == 20
        assert await c.position(TP0) == 20
        await c.stop()

    virtual(scenario)


# -- committing -------------------------------------------------------------------------------


def test_commit_without_offsets_commits_the_consumed_positions(client: ScriptedClient) -> None:
    async def scenario() -> None:
        client.produce(TP0, 3)
        c = await subscribed()
        await c.getmany(timeout_ms=1_000)
        await c.commit()
        assert client.committed == {("t", 0): 3, ("t", 1): 0}
        assert await c.committed(TP0) == 3
        await c.stop()

    virtual(scenario)


def test_commit_takes_ints_and_offset_and_metadata(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = await subscribed()
        await c.commit({TP0: 5, TP1: OffsetAndMetadata(7, "note")})
        assert client.committed == {("t", 0): 5, ("t", 1): 7}
        (sent,) = [t for t in client.of("OffsetCommit")[-1]["topics"]]
        assert {p["committed_metadata"] for p in sent["partitions"]} == {"", "note"}
        assert await c._fetch_committed([TP1]) == {TP1: OffsetAndMetadata(7, "")}
        await c.stop()

    virtual(scenario)


@pytest.mark.parametrize(
    ("offsets_given", "error", "fragment"),
    [
        ({("t", 0): 1}, TypeError, "commit\\(\\) keys must be TopicPartition"),
        ({TP0: "5"}, TypeError, "must be int or OffsetAndMetadata"),
        ({TP0: True}, TypeError, "must be int or OffsetAndMetadata"),
        ({TP0: -1}, ValueError, "must be >= 0, got -1"),
        ({TP0: OffsetAndMetadata(-3, "")}, ValueError, "must be >= 0, got -3"),
        ({ELSEWHERE: 1}, CommitFailedError, "not assigned to this member"),
    ],
)
def test_commit_rejects_bad_offsets_naming_them(
    client: ScriptedClient, offsets_given: Any, error: type[Exception], fragment: str
) -> None:
    async def scenario() -> None:
        c = await subscribed()
        commits = len(client.of("OffsetCommit"))
        with pytest.raises(error, match=fragment):
            await c.commit(offsets_given)
        assert len(client.of("OffsetCommit")) == commits
        await c.stop()

    virtual(scenario)


def test_commit_of_an_unassigned_partition_under_assign_is_refused(
    client: ScriptedClient,
) -> None:
    async def scenario() -> None:
        c = await assigned(TP0)
        with pytest.raises(CommitFailedError, match="not in this consumer's assign\\(\\)"):
            await c.commit({TP1: 1})
        await c.commit({TP0: 1})
        assert client.committed == {("t", 0): 1}
        await c.stop()

    virtual(scenario)


def test_commit_with_nothing_assigned_sends_nothing(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = consumer()
        await c.start()
        await c.commit()
        await c.commit({})
        assert "OffsetCommit" not in client.names()
        await c.stop()

    virtual(scenario)


def test_commit_to_a_topic_the_cluster_lacks_fails_at_once(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = await assigned(TP0, ELSEWHERE, TopicPartition("t", 5))
        with pytest.raises(UnknownTopicOrPartitionError, match="other"):
            await c.commit({ELSEWHERE: 1})
        assert client.metadata_fetches == 1  # not in the client's metadata: asked
        with pytest.raises(UnknownTopicOrPartitionError, match="partition=5"):
            await c.commit({TopicPartition("t", 5): 1})
        assert client.metadata_fetches == 1  # topic known: its partitions answer
        assert "OffsetCommit" not in client.names()
        await c.stop()

    virtual(scenario)


def test_commit_beyond_the_high_watermark_is_warned_of(
    client: ScriptedClient, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        client.produce(TP0, 2)
        c = await assigned(TP0)
        await c.getmany(timeout_ms=1_000)
        assert c.highwater(TP0) == 2
        with caplog.at_level(logging.WARNING, logger="aiogroup.consumer"):
            await c.commit({TP0: 2})
            assert not caplog.records
            await c.commit({TP0: 1_000})
        assert "beyond its high watermark 2" in caplog.text
        assert client.committed == {("t", 0): 1_000}  # said, not refused
        await c.stop()

    virtual(scenario)


def test_commit_async_calls_back_with_the_offsets_and_the_outcome(
    client: ScriptedClient,
) -> None:
    async def scenario() -> None:
        c = await subscribed()
        outcomes: list[tuple[dict[TopicPartition, OffsetAndMetadata], BaseException | None]] = []
        await c.commit_async({TP0: 4}, callback=lambda o, e: outcomes.append((dict(o), e)))
        assert outcomes == [({TP0: OffsetAndMetadata(4, "")}, None)]
        client.script["OffsetCommit"] = [ErrorCode.OFFSET_METADATA_TOO_LARGE]
        await c.commit_async({TP1: 1}, callback=lambda o, e: outcomes.append((dict(o), e)))
        assert isinstance(outcomes[-1][1], KafkaError)
        client.script["OffsetCommit"] = [ErrorCode.OFFSET_METADATA_TOO_LARGE]
        with pytest.raises(KafkaError, match="OFFSET_METADATA_TOO_LARGE"):
            await c.commit_async({TP1: 1})  # no callback: the task fails
        await c.commit_async()  # the positions, captured now
        assert client.committed[("t", 1)] == 0
        await c.stop()

    virtual(scenario)


def test_commit_async_with_nothing_to_commit_still_calls_back(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = consumer()
        await c.start()
        outcomes: list[object] = []
        await c.commit_async(callback=lambda o, e: outcomes.append((dict(o), e)))
        assert outcomes == [({}, None)]
        await c.stop()

    virtual(scenario)


# -- positions ----------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [-1, True, 1.5, "3"])
def test_seek_rejects_what_is_not_an_offset(client: ScriptedClient, offset: Any) -> None:
    async def scenario() -> None:
        c = await assigned(TP0)
        with pytest.raises(ValueError, match="seek\\(\\) offset must be an int >= 0"):
            c.seek(TP0, offset)
        await c.stop()

    virtual(scenario)


def test_calls_on_an_unassigned_partition_name_it(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = await assigned(TP0)
        unassigned = f"partition {TP1} is not assigned to this consumer"
        sync_calls = [
            lambda: c.seek(TP1, 0),
            lambda: c.pause(TP1),
            lambda: c.resume(TP1),
            lambda: c.highwater(TP1),
            lambda: c.last_stable_offset(TP1),
            lambda: c.last_poll_timestamp(TP1),
            lambda: c.lag(TP1),
        ]
        for call in sync_calls:
            with pytest.raises(IllegalStateError) as info:
                call()
            assert str(info.value).endswith(unassigned)
        for coro in (c.seek_to_beginning(TP1), c.seek_to_end(TP1), c.position(TP1)):
            with pytest.raises(IllegalStateError, match="is not assigned"):
                await coro
        await c.stop()

    virtual(scenario)


def test_seek_then_consume_from_there(client: ScriptedClient) -> None:
    async def scenario() -> None:
        client.produce(TP0, 6)
        c = await assigned(TP0)
        c.seek(TP0, 4)
        assert await c.position(TP0) == 4
        assert offsets(await c.getmany(timeout_ms=1_000)) == {TP0: [4, 5]}
        await c.stop()

    virtual(scenario)


def test_seek_to_beginning_end_and_committed(client: ScriptedClient) -> None:
    async def scenario() -> None:
        log = client.log(TP0)
        client.produce(TP0, 10)
        log.start = 3  # retention removed the first three
        client.committed[("t", 0)] = 6
        c = await assigned(TP0, TP1)
        assert await c.seek_to_end() is True
        assert await c.position(TP0) == 10
        assert await c.seek_to_beginning(TP0) is True
        assert await c.position(TP0) == 3
        assert await c.seek_to_committed() == {TP0: 6}  # TP1 has none: left alone
        assert await c.position(TP0) == 6
        await c.stop()

    virtual(scenario)


def test_seek_to_committed_needs_a_group(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = await assigned(TP0, group_id=None)
        with pytest.raises(IllegalOperation, match="seek_to_committed\\(\\) needs a group_id"):
            await c.seek_to_committed()
        await c.stop()

    virtual(scenario)


def test_position_waits_within_its_timeout_and_ends_when_the_consumer_closes(
    client: ScriptedClient,
) -> None:
    async def scenario() -> None:
        client.held["OffsetFetch"] = asyncio.Event()  # the committed offset never comes
        c = await assigned(TP0)
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(asyncio.TimeoutError):
            await c.position(TP0, timeout_ms=500)
        assert loop.time() - began == pytest.approx(0.5)
        waiting = asyncio.ensure_future(c.position(TP0))
        await client.until(lambda: client.holding.get("OffsetFetch") == 1)
        await c.abort()  # stop() would wait for the held request
        with pytest.raises(ConsumerStoppedError):
            await waiting

    virtual(scenario)


def test_lag_highwater_and_fetch_time_after_a_fetch(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = await assigned(TP0)
        assert c.lag(TP0) is None and c.highwater(TP0) is None
        assert c.last_poll_timestamp(TP0) is None
        client.produce(TP0, 5)
        await c.getmany(TP0, timeout_ms=1_000, max_records=2)
        assert (c.highwater(TP0), c.last_stable_offset(TP0)) == (5, 5)
        assert c.lag(TP0) == 3
        assert c.last_poll_timestamp(TP0) is not None
        assert c.metrics().partitions[TP0].lag == 3
        await c.stop()

    virtual(scenario)


def test_pause_and_resume(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = await assigned(TP0, TP1)
        assert c.paused() == set()
        c.pause(TP0, TP1)
        assert c.paused() == {TP0, TP1}
        client.produce(TP0, 2)
        assert await c.getmany(timeout_ms=500) == {}
        c.resume(TP0)
        assert c.paused() == {TP1}
        assert offsets(await c.getmany(timeout_ms=1_000)) == {TP0: [0, 1]}
        c.unsubscribe()
        assert c.paused() == set()
        await c.stop()

    virtual(scenario)


# -- offsets and metadata lookups --------------------------------------------------------------


def test_offset_lookups(client: ScriptedClient) -> None:
    async def scenario() -> None:
        client.produce(TP0, 4)
        client.log(TP0).start = 1
        c = consumer(group_id=None)
        await c.start()
        assert await c.beginning_offsets([TP0, TP1]) == {TP0: 1, TP1: 0}
        assert await c.end_offsets([TP0]) == {TP0: 4}
        found = await c.offsets_for_times({TP0: BASE_TS + 2, TP1: 0})
        assert found == {TP0: OffsetAndTimestamp(2, BASE_TS + 2), TP1: None}
        with pytest.raises(ValueError, match=r"timestamp for .* must be >= 0, got -5"):
            await c.offsets_for_times({TP0: -5})
        await c.stop()

    virtual(scenario)


def test_topics_and_partitions_for_topic(client: ScriptedClient) -> None:
    async def scenario() -> None:
        c = consumer(group_id=None)
        await c.start()
        assert c.partitions_for_topic("t") == {0, 1}
        assert c.partitions_for_topic("x") is None  # not listed yet
        listed = ScriptedClient().cluster
        listed.partitions = {"t": 2, "x": 3}

        async def everything() -> Any:
            return listed

        client.fetch_all_metadata = everything  # type: ignore[method-assign]
        assert await c.topics() == {"t", "x"}
        assert c.partitions_for_topic("x") == {0, 1, 2}  # from the last topics()
        assert c.partitions_for_topic("y") is None
        with pytest.raises(ValueError, match="may contain only"):
            c.partitions_for_topic("bad topic")
        await c.stop()

    virtual(scenario)


# -- metrics and health -------------------------------------------------------------------------


def test_metrics_and_health_of_a_consumer_not_started() -> None:
    c = consumer("t")
    h = c.health()
    assert (h.started, h.live, h.ready, h.member_state) == (False, False, False, "NEW")
    snap = c.metrics()
    assert snap.partitions == {} and snap.member_id is None and snap.records_consumed == 0


def test_metrics_and_health_through_the_lifecycle(client: ScriptedClient) -> None:
    async def scenario() -> None:
        plain = consumer(group_id=None)
        await plain.start()
        assert plain.health().member_state == "NO_GROUP"
        assert plain.health().seconds_since_last_poll is None  # never polled
        await plain.stop()
        assert plain.health().member_state == "STOPPED" and not plain.health().live
        c = await subscribed()
        await client.until(lambda: c.health().member_state == "STABLE")
        await c.getmany()
        h = c.health()
        assert h.live and h.ready and h.joined and h.member_state == "STABLE"
        assert h.seconds_since_last_poll is not None and h.seconds_since_last_poll >= 0
        snap = c.metrics()
        assert (snap.member_id, snap.generation) == ("m-1", 1)
        assert set(snap.partitions) == {TP0, TP1}
        await c.stop()
        assert not c.health().live

    virtual(scenario)


# -- stopping -----------------------------------------------------------------------------------


def test_a_second_stop_while_the_first_runs_returns_at_once(client: ScriptedClient) -> None:
    async def scenario() -> None:
        client.held["LeaveGroup"] = asyncio.Event()
        c = await subscribed()
        first = asyncio.ensure_future(c.stop())
        await client.until(lambda: client.holding.get("LeaveGroup") == 1)
        await c.stop()  # returns while the first is still leaving
        assert not first.done() and client.closed == 0
        client.held["LeaveGroup"].set()
        await first
        assert client.closed == 1 and c.health().member_state != "STABLE"

    virtual(scenario)


def test_the_revoke_listener_of_stop_may_still_commit(client: ScriptedClient) -> None:
    class CommitsOnRevoke(AsyncConsumerRebalanceListener):
        def __init__(self) -> None:
            self.consumer: GroupConsumer | None = None

        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            assert self.consumer is not None
            await self.consumer.commit({tp: 9 for tp in revoked})

        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            pass

    async def scenario() -> None:
        listener = CommitsOnRevoke()
        c = consumer("t", listener=listener)
        listener.consumer = c
        await c.start()
        await client.until(lambda: c.health().member_state == "STABLE")
        await c.stop()
        assert client.committed == {("t", 0): 9, ("t", 1): 9}
        assert client.names()[-1] == "LeaveGroup"

    virtual(scenario)


def test_a_loop_that_swallows_a_repeated_fatal_error_does_not_starve_the_event_loop(
    client: ScriptedClient,
) -> None:
    """Every poll after a fatal error raises it; a loop that catches it and polls again
    must still let the other tasks run (it hung a CI run: the test's own member loop
    starved its event loop after a refused join)."""

    async def scenario() -> None:
        c = await assigned(TopicPartition("t", 0))
        assert c._subscription is not None
        c._subscription.report_error(PermissionError("refused for good"), fatal=True)
        other_ran = asyncio.Event()
        seen: list[int] = []

        async def swallowing_loop() -> None:
            for i in range(50):
                try:
                    await c.getmany(timeout_ms=100)
                except PermissionError:
                    if other_ran.is_set():
                        seen.append(i)
                        return
            seen.append(-1)

        loop_task = asyncio.ensure_future(swallowing_loop())
        await asyncio.sleep(0)
        other_ran.set()  # runs only if the loop above suspends between its polls
        await loop_task
        assert seen and seen[0] >= 0, "the loop never let another task run"
        await c.stop()

    virtual(scenario)
