"""Group coordination beyond the listener contract: cooperative rebalancing, static
membership, leaving the group, max_poll_interval_ms, auto-commit on close."""

from __future__ import annotations

import asyncio
from typing import Any

import async_timeout
import pytest
import test_listener_contract as contract
from fault_proxy import LEAVE_GROUP_API_KEY
from test_listener_contract import WAIT, Journal, assigned_to, fault_proxy, produce

from aiogroup.consumer import GroupConsumer
from aiogroup.structs import TopicPartition
from aiogroup.testing.broker import unique_name

pytestmark = pytest.mark.integration

# the fixtures shared with the listener-contract tests
journal = contract.journal
member_factory = contract.member_factory
proxied = contract.proxied


async def test_cooperative_rebalance_moves_partitions_without_revoking_the_rest(
    kafka_topic: Any, member_factory: Any, journal: Journal
) -> None:
    topic = await kafka_topic(partitions=4)
    everything = frozenset(TopicPartition(topic, p) for p in range(4))
    coop = {"partition_assignment_strategy": ("cooperative-sticky",)}
    async with member_factory("a", topic, **coop) as (ca, _):
        await journal.wait_for(lambda c: assigned_to(journal, "a") == 1, "a assigned")
        assert journal.of("a", "assigned")[0].partitions == everything
        async with member_factory("b", topic, **coop) as (cb, _):

            def balanced(_: list[Any]) -> bool:
                return len(ca.assignment()) == 2 and len(cb.assignment()) == 2

            await journal.wait_for(
                lambda c: balanced(c) and assigned_to(journal, "b") >= 1, "two balanced members"
            )
            revoked = journal.of("a", "revoked")
            assert len(revoked) == 1  # only the partitions that moved, once
            moved = revoked[0].partitions
            assert len(moved) == 2 and moved <= everything
            assert ca.assignment() == set(everything - moved)
            assert cb.assignment() == set(moved)
            # a was never handed a partition it already had
            assert all(not call.partitions for call in journal.of("a", "assigned")[1:])
            assert journal.of("a", "lost") == [] and journal.of("b", "lost") == []
            assert ca.generation == cb.generation


async def test_stop_sends_leave_group_but_abort_and_static_members_do_not(
    bootstrap_servers: str, kafka_topic: Any, member_factory: Any, journal: Journal, proxied: None
) -> None:
    topic = await kafka_topic(partitions=1)
    cases: list[tuple[str, dict[str, Any], str, int]] = [
        ("dynamic-stop", {}, "stop", 1),
        ("dynamic-abort", {}, "abort", 0),
        ("static-stop", {"group_instance_id": unique_name("static")}, "stop", 0),
    ]
    for name, options, how, expected in cases:
        options["group_id"] = unique_name("group")  # no leftover member of another case
        async with fault_proxy(bootstrap_servers) as proxy:
            async with member_factory(name, topic, proxy=proxy, **options) as (consumer, _):
                await journal.wait_for(
                    lambda c, name=name: assigned_to(journal, name) >= 1, "assigned"
                )
                if how == "abort":
                    await consumer.abort()
                else:
                    await consumer.stop()
            assert proxy.requests[LEAVE_GROUP_API_KEY] == expected, name


async def test_static_member_restart_keeps_its_partitions(
    kafka_topic: Any, member_factory: Any, journal: Journal
) -> None:
    """A restarted static member (same group_instance_id) gets its partitions back.

    On Apache Kafka the restart within the session timeout causes no rebalance at
    all (the broker hands back the stored assignment); the embedded test broker
    rebalances anyway, so this checks what the client controls: no LeaveGroup on stop
    (see above), the same instance id on rejoin, and the same partitions.
    """
    topic = await kafka_topic(partitions=2)
    instance_a, instance_b = unique_name("a"), unique_name("b")
    async with member_factory("b", topic, group_instance_id=instance_b) as (cb, _):
        async with member_factory("a1", topic, group_instance_id=instance_a) as (ca, _):
            await journal.wait_for(
                lambda c: len(ca.assignment()) == 1 and len(cb.assignment()) == 1,
                "both members assigned",
            )
            before = set(ca.assignment())
        async with member_factory("a2", topic, group_instance_id=instance_a) as (ca2, _):
            await journal.wait_for(
                lambda c: set(ca2.assignment()) == before and len(cb.assignment()) == 1,
                "a restarted with its partitions",
            )
        assert not any(call.kind == "lost" for call in journal.calls)


async def test_max_poll_interval_leaves_and_the_next_poll_rejoins(
    bootstrap_servers: str, kafka_topic: Any, member_factory: Any, journal: Journal, proxied: None
) -> None:
    topic = await kafka_topic(partitions=1)
    async with fault_proxy(bootstrap_servers) as proxy:
        async with member_factory("a", topic, proxy=proxy, max_poll_interval_ms=3000) as (c, _):
            await c.getmany(timeout_ms=10)  # one poll, then none
            await journal.wait_for(lambda c: bool(journal.of("a", "revoked")), "poll timeout")
            await asyncio.wait_for(proxy.wait_for_request(LEAVE_GROUP_API_KEY), WAIT)
            assert proxy.requests[LEAVE_GROUP_API_KEY] == 1
            assert journal.of("a", "lost") == []
            first = assigned_to(journal, "a")
            async with async_timeout.timeout(WAIT):
                while assigned_to(journal, "a") == first:
                    await c.getmany(timeout_ms=200)  # polling again brings the member back
            assert c.assignment() == {TopicPartition(topic, 0)}


async def test_auto_commit_commits_consumed_positions_on_stop(
    bootstrap_servers: str, group_id: str, kafka_topic: Any
) -> None:
    topic = await kafka_topic(partitions=1)
    tp = TopicPartition(topic, 0)
    await produce(bootstrap_servers, topic, 1, 10)
    consumer = GroupConsumer(
        topic,
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        auto_offset_reset="earliest",
        enable_auto_commit=True,
        auto_commit_interval_ms=60_000,  # only the commit on stop can do it
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
    )
    await consumer.start()
    received = 0
    async with async_timeout.timeout(WAIT):
        while received < 10:
            batch = await consumer.getmany(timeout_ms=1000)
            received += sum(len(records) for records in batch.values())
    await consumer.stop()
    async with GroupConsumer(bootstrap_servers=bootstrap_servers, group_id=group_id) as check:
        check.assign([tp])
        assert await check.committed(tp) == 10


async def test_stop_leaves_no_task_behind(
    kafka_topic: Any, member_factory: Any, journal: Journal
) -> None:
    topic = await kafka_topic(partitions=1)
    before = asyncio.all_tasks()
    async with member_factory("a", topic):
        await journal.wait_for(lambda c: assigned_to(journal, "a") == 1, "assigned")
    await asyncio.sleep(0)
    left = {t for t in asyncio.all_tasks() - before if not t.done()}
    left.discard(asyncio.current_task())  # type: ignore[arg-type]
    assert not [t.get_name() for t in left if t.get_name().startswith("aiogroup")]


async def test_pattern_subscription_picks_up_new_matching_topics(
    bootstrap_servers: str, group_id: str, kafka_topic: Any, journal: Journal
) -> None:
    prefix = unique_name("pat")
    first = await kafka_topic(partitions=1, name=f"{prefix}-one")
    await kafka_topic(partitions=1, name=unique_name("other"))  # must not match
    listener = contract.Recorder("a", journal)
    consumer = GroupConsumer(
        pattern=f"^{prefix}-.*",
        listener=listener,
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        metadata_max_age_ms=1000,  # new topics are seen at the next metadata refresh
    )
    await consumer.start()
    try:
        await journal.wait_for(
            lambda c: {tp.topic for tp in consumer.assignment()} == {first}, "first topic"
        )
        second = await kafka_topic(partitions=1, name=f"{prefix}-two")
        await journal.wait_for(
            lambda c: {tp.topic for tp in consumer.assignment()} == {first, second},
            "second topic",
        )
        assert journal.of("a", "lost") == []
    finally:
        await consumer.stop()
