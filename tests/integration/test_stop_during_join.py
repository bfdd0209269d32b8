"""stop() while the broker holds this member's JoinGroup leaves at once (issue 17, item 10)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from fault_proxy import FaultProxy, ProxiedClient, route

from aiogroup import (
    AsyncConsumerRebalanceListener,
    ConsumerStoppedError,
    GroupConsumer,
    TopicPartition,
)
from aiogroup import consumer as consumer_module
from aiogroup.testing import KafkaBroker
from aiogroup.testing.broker import unique_name
from aiogroup.testing.plugin import TopicFactory

JOIN_GROUP_API_KEY = 11
LEAVE_GROUP_API_KEY = 13


@pytest.fixture
def proxied(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(consumer_module, "AIOKafkaClient", ProxiedClient)
    yield


class JoinWatch:
    """Counts JoinGroup requests and responses on the wire; an event while one is held."""

    def __init__(self, proxy: FaultProxy) -> None:
        self.requests = 0
        self.responses = 0
        #: Set at every JoinGroup request or response.
        self.changed = asyncio.Event()
        self._correlations: set[int] = set()
        note, rewrite = proxy._note_request, proxy._rewrite_response

        def note_request(payload: bytes, inflight: dict[int, tuple[int, int]]) -> bytes:
            out = note(payload, inflight)
            api, _, correlation = int.from_bytes(payload[:2], "big"), 0, payload[4:8]
            if api == JOIN_GROUP_API_KEY:
                self.requests += 1
                self._correlations.add(int.from_bytes(correlation, "big"))
                self.changed.set()
            return out

        def rewrite_response(payload: bytes, inflight: dict[int, tuple[int, int]]) -> bytes:
            correlation = int.from_bytes(payload[:4], "big")
            if correlation in self._correlations:
                self._correlations.discard(correlation)
                self.responses += 1
                self.changed.set()
            return rewrite(payload, inflight)

        proxy._note_request = note_request  # type: ignore[method-assign]
        proxy._rewrite_response = rewrite_response  # type: ignore[method-assign]


async def group_members(bootstrap: str, group: str) -> list[Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        (resp,) = await admin.describe_consumer_groups([group])
        (g,) = resp.to_object()["groups"]
        return list(g["members"])
    finally:
        await admin.close()


async def member_ids(bootstrap: str, group: str) -> list[str]:
    return [m["member_id"] for m in await group_members(bootstrap, group)]


async def test_stop_during_an_in_flight_join_leaves_at_once(
    bootstrap_servers: str,
    kafka_topic: TopicFactory,
    group_id: str,
    proxied: None,
    kafka_broker: KafkaBroker,
) -> None:
    topic = await kafka_topic(partitions=2)
    # A stable member first, whose (eager) revoke listener waits for the test: it
    # cannot rejoin until released, so the broker holds the newcomer's JoinGroup
    # for as long as the test needs (Tansu: up to about half the session timeout).
    release = asyncio.Event()

    class HoldRevoke(AsyncConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            if revoked:
                await release.wait()

        async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
            pass

    first = GroupConsumer(
        topic,
        listener=HoldRevoke(),
        bootstrap_servers=bootstrap_servers,
        group_id=group_id,
        session_timeout_ms=30_000,
        heartbeat_interval_ms=1000,
    )
    await first.start()
    host, port = bootstrap_servers.split(",")[0].rsplit(":", 1)
    proxy = await FaultProxy(host, int(port)).start()
    watch = JoinWatch(proxy)
    client_id = unique_name("joiner")
    consumer = GroupConsumer(
        topic,
        bootstrap_servers=f"127.0.0.1:{proxy.port}",
        client_id=client_id,
        group_id=group_id,
        session_timeout_ms=30_000,
        heartbeat_interval_ms=1000,
    )
    try:
        with route(client_id, proxy):
            starting = asyncio.ensure_future(consumer.start())
            # Until a JoinGroup with a member id (after KIP-394's MEMBER_ID_REQUIRED
            # round) is held by the broker.
            while not (watch.responses < watch.requests and consumer.member_id):
                watch.changed.clear()
                await watch.changed.wait()
            assert not starting.done()
            leaving = consumer.member_id
            # Forwarded is not yet received: on a loaded machine the broker may not have
            # read the JoinGroup yet, and a LeaveGroup on another connection would then
            # overtake it. Wait until the broker itself lists the joining member.
            async with asyncio.timeout(30):
                while leaving not in await member_ids(bootstrap_servers, group_id):  # noqa: ASYNC110
                    await asyncio.sleep(0.05)  # the broker's view has no event to await
            assert not starting.done()
            held = watch.requests
            await asyncio.wait_for(consumer.stop(), 30)
            # stop() returned while the broker still held the join: no answer came back.
            # (Apache Kafka answers a member's pending JoinGroup as soon as its LeaveGroup
            # lands, so there the answer can race stop()'s return; the round itself is
            # still waiting for the held member, and the checks below hold on both.)
            if kafka_broker.caps.holds_join_half_session:
                assert watch.responses < held
            with pytest.raises(ConsumerStoppedError):
                await starting
            # From outside: the member is gone now, not when its session expires.
            assert leaving not in await member_ids(bootstrap_servers, group_id)
            assert proxy.requests[LEAVE_GROUP_API_KEY] == 1
    finally:
        release.set()
        await consumer.stop()
        await first.stop()
        await proxy.close()
