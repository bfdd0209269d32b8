"""max_poll_interval_ms counts the time *between* polls, judged by the broker (issue 24).

A getone() / getmany() / getmany_arrow() / ``async for`` that is waiting for records
on a quiet topic is the application polling (Java and aiokafka count it so): the
member stays in its group however long the topic stays quiet.  Only an application that stops asking
for records for longer than ``max_poll_interval_ms`` is taken out - with a WARNING -
and it rejoins, with a WARNING, as soon as it asks again.

Both protocols: classic on every broker, the consumer protocol (KIP-848) where the
broker speaks it.  The verdict is the broker's (DescribeGroups /
ConsumerGroupDescribe, sampled from outside every member): the member's id is
present in every sample, the group Stable, and - consumer protocol - its member
epoch unchanged; a member taken out is absent from the broker's view.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import async_timeout
import pytest
from aiokafka import AIOKafkaClient
from aiokafka.client import CoordinationType

from aiogroup import GroupConsumer
from aiogroup._protocol.consumer_group import (
    ConsumerGroupDescribeRequest,
    parse_consumer_group_describe,
)
from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.observer import describe_group
from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration

MAX_POLL_MS = 3000
#: The smallest session Apache Kafka accepts by default (group.min.session.timeout.ms);
#: consumer-protocol groups get theirs from the broker (6 s in the test brokers).
SESSION_MS = 6000
HEARTBEAT_MS = 500
#: How often the broker is asked: several samples per max_poll_interval_ms.
SAMPLE_S = 0.5
WAIT = 30.0


#: Whether this broker's DescribeGroups says what each member holds.
REPORTS_ASSIGNMENT: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "REPORTS_ASSIGNMENT", default=True
)


@pytest.fixture(params=["classic", "consumer"])
def protocol(request: pytest.FixtureRequest, kafka_broker: KafkaBroker) -> str:
    if request.param == "consumer" and not kafka_broker.caps.supports_consumer_protocol:
        pytest.skip("not applicable: this broker has no consumer group protocol (KIP-848)")
    REPORTS_ASSIGNMENT.set(kafka_broker.caps.describe_groups_reports_assignment)
    return str(request.param)


@dataclass(frozen=True)
class Seen:
    """One member as the broker describes it."""

    member_id: str
    #: The member epoch (consumer protocol); None for classic groups.
    epoch: int | None
    #: How many partitions the broker says it holds (None: the broker does not say -
    #: Tansu's DescribeGroups, caps.describe_groups_reports_assignment).
    partitions: int | None


def holds_the_partition(state: str, seen: dict[str, Seen]) -> bool:
    return state == "Stable" and [s.partitions for s in seen.values()] in ([1], [None])


async def broker_view(
    client: AIOKafkaClient, group: str, protocol: str
) -> tuple[str, dict[str, Seen]]:
    """The group's state and its members by member id, from the coordinator itself."""
    if protocol == "classic":
        sample = await describe_group(client, group)
        said = REPORTS_ASSIGNMENT.get()
        return sample.state, {
            mid: Seen(mid, None, len(parts) if said else None)
            for mid, parts in sample.members.values()
        }
    node = await client.coordinator_lookup(CoordinationType.GROUP, group)
    described = parse_consumer_group_describe(
        await client.send(node, ConsumerGroupDescribeRequest(group))
    )
    if described.error_code:
        raise RuntimeError(f"ConsumerGroupDescribe {group!r}: error {described.error_code}")
    return described.group_state, {
        m.member_id: Seen(m.member_id, m.member_epoch, len(m.assignment)) for m in described.members
    }


async def until_view(
    client: AIOKafkaClient,
    group: str,
    protocol: str,
    what: str,
    predicate: Callable[[str, dict[str, Seen]], bool],
) -> dict[str, Seen]:
    """Ask the broker until ``predicate(state, members)`` holds (bounded by WAIT)."""
    last: tuple[str, dict[str, Seen]] | None = None
    try:
        async with async_timeout.timeout(WAIT):
            while True:
                last = await broker_view(client, group, protocol)
                if predicate(*last):
                    return last[1]
                await asyncio.sleep(SAMPLE_S / 5)
    except asyncio.TimeoutError:
        pytest.fail(f"group {group}: the broker never showed {what}; last view: {last}")


@contextlib.asynccontextmanager
async def admin(bootstrap: str) -> AsyncIterator[AIOKafkaClient]:
    client = AIOKafkaClient(bootstrap_servers=bootstrap, client_id="idle-observer")
    await client.bootstrap()
    try:
        yield client
    finally:
        await client.close()


def idle_member(bootstrap: str, group: str, protocol: str) -> GroupConsumer:
    options: dict[str, Any] = dict(
        bootstrap_servers=bootstrap,
        group_id=group,
        client_id=unique_name("idle"),
        group_protocol=protocol,
        auto_offset_reset="latest",
        enable_auto_commit=False,
        max_poll_interval_ms=MAX_POLL_MS,
    )
    if protocol == "classic":
        options.update(session_timeout_ms=SESSION_MS, heartbeat_interval_ms=HEARTBEAT_MS)
    return GroupConsumer(**options)


async def first_record(consumer: GroupConsumer) -> object:
    async for record in consumer:
        return record
    return None


#: The ways an application waits for records, each one call that never returns on a
#: quiet topic.
WAITS: dict[str, Callable[[GroupConsumer], Awaitable[object]]] = {
    "async for": first_record,
    "getone": lambda c: c.getone(),
    "getmany": lambda c: c.getmany(timeout_ms=100 * MAX_POLL_MS),
    "getmany_arrow": lambda c: c.getmany_arrow(timeout_ms=100 * MAX_POLL_MS),
}


async def test_members_waiting_for_records_stay_in_their_groups(
    bootstrap_servers: str, kafka_topic: TopicFactory, protocol: str
) -> None:
    """One group per way of waiting, all at once: each member waits in one call on a
    quiet topic for 3 x max_poll_interval_ms; the broker shows every member present
    in every sample, same id (and epoch), holding its partition, group Stable."""
    topic = await kafka_topic(partitions=1)
    groups = {kind: unique_name("idle-group") for kind in WAITS}
    members = {kind: idle_member(bootstrap_servers, groups[kind], protocol) for kind in WAITS}
    async with admin(bootstrap_servers) as client, contextlib.AsyncExitStack() as stack:
        waits: dict[str, asyncio.Future[object]] = {}

        async def start_and_wait(kind: str, consumer: GroupConsumer) -> None:
            consumer.subscribe([topic])
            await stack.enter_async_context(consumer)  # start(): the first assignment is in
            assert len(consumer.assignment()) == 1  # the rule is about members holding some
            waits[kind] = asyncio.ensure_future(WAITS[kind](consumer))

        stack.callback(lambda: [wait.cancel() for wait in waits.values()])
        await asyncio.gather(*(start_and_wait(kind, c) for kind, c in members.items()))
        try:
            joined: dict[str, Seen] = {}
            for kind, group in groups.items():
                view = await until_view(
                    client, group, protocol, "the member holding the partition", holds_the_partition
                )
                (joined[kind],) = view.values()
            loop = asyncio.get_running_loop()
            end = loop.time() + 3 * MAX_POLL_MS / 1000
            samples = 0
            while loop.time() < end:
                for kind, group in groups.items():
                    state, seen = await broker_view(client, group, protocol)
                    assert (state, list(seen.values())) == ("Stable", [joined[kind]]), (
                        f"{kind}: the broker's view changed while the member waited "
                        f"for records: {state} {seen}, joined as {joined[kind]}"
                    )
                samples += 1
                await asyncio.sleep(SAMPLE_S)
            assert samples >= 3 * MAX_POLL_MS / 1000 / (SAMPLE_S + 1)
            for kind, wait in waits.items():
                assert not wait.done(), f"{kind} returned on a quiet topic: {wait!r}"
        finally:
            for wait in waits.values():
                wait.cancel()
            await asyncio.gather(*waits.values(), return_exceptions=True)


async def test_a_member_that_stops_asking_is_taken_out_and_rejoins_when_it_asks(
    bootstrap_servers: str,
    kafka_topic: TopicFactory,
    protocol: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No poll at all after start(): after max_poll_interval_ms the broker shows the
    member gone (WARNING: why); a getone() then brings it back (WARNING: what
    happened) and the broker shows it holding the partition again."""
    caplog.set_level(logging.WARNING, logger="aiogroup")
    topic = await kafka_topic(partitions=1)
    group = unique_name("idle-group")
    consumer = idle_member(bootstrap_servers, group, protocol)
    consumer.subscribe([topic])
    async with admin(bootstrap_servers) as client, consumer:
        view = await until_view(
            client, group, protocol, "the member holding the partition", holds_the_partition
        )
        (before,) = view.values()
        await until_view(
            client,
            group,
            protocol,
            "the idle member gone",
            lambda state, seen: (
                before.member_id not in seen or seen[before.member_id].epoch != before.epoch
            ),
        )
        left = [r for r in caplog.records if "has not polled" in r.getMessage()]
        assert [r.levelno for r in left] == [logging.WARNING], caplog.text
        assert f"longer than max_poll_interval_ms ({MAX_POLL_MS / 1000:g}s)" in (
            left[0].getMessage()
        )
        assert not any("polled again" in r.getMessage() for r in caplog.records)

        wait = asyncio.ensure_future(consumer.getone())
        try:
            back = await until_view(
                client,
                group,
                protocol,
                "the member back, holding the partition",
                holds_the_partition,
            )
            (after,) = back.values()
            assert (after.member_id, after.epoch) != (before.member_id, before.epoch)
            rejoined = [r for r in caplog.records if "polled again" in r.getMessage()]
            assert [r.levelno for r in rejoined] == [logging.WARNING], caplog.text
            assert "rejoining" in rejoined[0].getMessage()
            assert not wait.done()
        finally:
            wait.cancel()
            await asyncio.gather(wait, return_exceptions=True)
