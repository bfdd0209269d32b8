"""GroupConsumer, the facade, against a scripted cluster on virtual time.

The real fetcher and the real classic coordination routine run; only the client is
scripted (``tests/unit/scripted_client.py``).  What is checked is what the facade
decides: which input it refuses and with what message, what a call does in each
lifecycle state, how subscribe and assign exclude each other, what a commit sends,
and how polling ends.  The wire is the integration tier's business.
"""

from __future__ import annotations

import asyncio
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
        with pytest.raises(KafkaConnectionError, match="127.0.0.1:1") as info:
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
        await c.stop()

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
        with pytest.raises(KafkaError, match="GROUP_AUTHORIZATION_FAILED|[Aa]uthoriz"):
            await c.start()
        assert loop.time() - began < 5, "an ACL error is not waited out"
        assert client.closed == 1

    virtual(scenario)


def test_start_raises_a_fatal_group_error(client: ScriptedClient) -> None:
    async def scenario() -> None:
        client.script["JoinGroup"] = [ErrorCode.INCONSISTENT_GROUP_PROTOCOL]
        c = consumer("t")
        with pytest.raises(KafkaError, match="INCONSISTENT_GROUP_PROTOCOL|coordination failed"):
            await c.start()
        assert client.closed == 1

    virtual(scenario)


def test_start_waits_through_a_retriable_error(client: ScriptedClient) -> None:
    class FailsOnce(AsyncConsumerRebalanceListener):
        def __init__(self) -> None:
            self.calls = 0

        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            pass

        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            self.calls += 1

    async def scenario() -> None:
        client.script["JoinGroup"] = [ErrorCode.COORDINATOR_NOT_AVAILABLE]
        listener = FailsOnce()
        c = consumer("t", listener=listener)
        await c.start()
        assert c.assignment() == {TP0, TP1} and listener.calls == 1
        assert client.names().count("JoinGroup") == 2
        await c.stop()

    virtual(scenario)
