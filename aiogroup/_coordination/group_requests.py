"""The classic group requests, each performed as one child task ending in exactly one event.

FindCoordinator, JoinGroup (with the consumer-protocol metadata of every assignor),
the leader's assignment, SyncGroup (decoding the member's assignment), Heartbeat and
LeaveGroup: what to send comes from the machine's action, the wire format from
:mod:`aiogroup._protocol.group` and :mod:`aiogroup._protocol.classic_embedded`, and whatever
happens - an answer, a transport failure, no coordinator - becomes one event for the
routine's inbox.  Nothing here decides what the answer means: the machine does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.conn import CloseReason
from aiokafka.errors import (
    IncompatibleBrokerVersion,
    KafkaError,
    NodeNotReadyError,
    RequestTimedOutError,
)

from aiogroup._coordination.commit_client import failure_kind
from aiogroup._coordination.coordinator_lookup import look_up_coordinator
from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._protocol.classic_embedded import (
    ConsumerAssignment,
    ConsumerSubscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from aiogroup._protocol.group import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    SyncGroupRequest,
    parse_heartbeat,
    parse_join_group,
    parse_leave_group,
    parse_sync_group,
)
from aiogroup._state.subscription import SubscriptionState, SubscriptionType
from aiogroup.assignors.abc import ConsumerPartitionAssignor, MemberSubscription
from aiogroup.config import ConsumerConfig
from aiogroup.errors import MalformedProtocolDataError
from aiogroup.metrics import ConsumerMetrics

__all__ = ["PROTOCOL_TYPE", "ClassicRequests"]

log = logging.getLogger("aiogroup.coordinator")

PROTOCOL_TYPE = "consumer"


def _brief(item: Any) -> str:
    """A one-line account of a request or an answer event for the DEBUG request timeline
    (generation, member id, error code; no assignment or metadata bytes)."""
    fields = []
    for name in ("generation_id", "member_id", "error_code", "leader", "result"):
        value = getattr(item, name, None)
        if value is None:
            continue
        if name == "result":
            value = {
                k: getattr(value, k)
                for k in ("error_code", "generation_id", "member_id", "leader")
                if getattr(value, k, None) is not None
            }
        fields.append(f"{name}={value!r}")
    return f"{type(item).__name__}({', '.join(fields)})"


class _NoCoordinator(Exception):
    def __init__(self, api: str) -> None:
        super().__init__(f"{api}: coordinator unknown")


class ClassicRequests:
    """The classic protocol's request performers for one group member."""

    def __init__(
        self,
        client: AIOKafkaClient,
        subscription: SubscriptionState,
        config: ConsumerConfig,
        assignors: Sequence[ConsumerPartitionAssignor],
        *,
        put: Callable[[E.Event], None],
        coordinator_id: Callable[[], int | None],
        metrics: Callable[[], ConsumerMetrics],
    ) -> None:
        assert config.group_id is not None
        self._client = client
        self._subscription = subscription
        self._config = config
        self._group_id: str = config.group_id
        self._assignors = list(assignors)
        self._put = put
        self._coordinator_id = coordinator_id
        self._metrics = metrics
        #: The topics the group subscribes to, when this member last led an assignment.
        self.group_topics: frozenset[str] = frozenset()
        #: Partition counts the assignor saw, when this member last led an assignment.
        self.assignor_counts: dict[str, int | None] = {}

    async def leave_abandoned(self, node: int, member_id: str) -> None:
        """LeaveGroup after close() gave up a held JoinGroup; failures are only logged."""
        log.info("group %s: leaving the group - closing during a JoinGroup", self._group_id)
        request = LeaveGroupRequest(self._group_id, member_id, None, "the consumer is closing")
        # Not on the coordination connection: a broker answers one request per
        # connection at a time, so there the LeaveGroup would wait behind the held join.
        send = self._client.send(node, request, group=ConnectionGroup.DEFAULT)
        try:
            parse_leave_group(await self._metrics().timed_group_request(request, send))
        except (KafkaError, OSError) as exc:
            log.debug("group %s: LeaveGroup after an abandoned join: %r", self._group_id, exc)

    async def send(self, node_id: int, request: Any, timeout: float | None = None) -> Any:
        """Send on the coordination connection, timed (the group-request latency metric).

        ``timeout``: the machine's wait for this answer (None: ``request_timeout_ms``).
        """
        if timeout is None or not hasattr(self._client, "_conns"):
            # (A client without aiokafka's connection table is a test double.)
            send = self._client.send(node_id, request, group=ConnectionGroup.COORDINATION)
        else:
            send = self._send_awaiting(node_id, request, timeout)
        return await self._metrics().timed_group_request(request, send)

    async def _send_awaiting(self, node_id: int, request: Any, timeout: float) -> Any:
        """``AIOKafkaClient.send`` with a wait of ``timeout`` for this one request.

        aiokafka has one request timeout per connection; a JoinGroup the broker may
        hold for the rebalance timeout needs its own (the machine's
        ``join_group_timeout``).  The connection reads its timeout when the request is
        written, synchronously, so it is set just for that call; a timeout then closes
        the connection as ``AIOKafkaClient.send`` does (the answer may still come).
        """
        client = self._client
        group = ConnectionGroup.COORDINATION
        if not await client.ready(node_id, group=group):
            raise NodeNotReadyError(f"Attempt to send a request to node {node_id} not ready")
        conn = client._conns[(node_id, group)]
        default = conn._request_timeout
        conn._request_timeout = timeout
        try:
            waiter = conn.send(request)
        finally:
            conn._request_timeout = default
        try:
            return await waiter
        except asyncio.TimeoutError as exc:
            conn.close(reason=CloseReason.CONNECTION_TIMEOUT)
            raise RequestTimedOutError() from exc

    async def find_coordinator(self) -> None:
        self._put(await look_up_coordinator(self._client, self._group_id, self._metrics()))

    def _coordinator(self, api: str) -> int:
        node = self._coordinator_id()
        if node is None:
            raise _NoCoordinator(api)
        return node

    async def _request(
        self,
        api: str,
        generation_id: int,
        build: Callable[[], Any],
        on_response: Callable[[Any], E.Event],
        timeout: float | None = None,
    ) -> None:
        """Send one group request and turn whatever happens into exactly one event."""
        event: E.Event
        try:
            node = self._coordinator(api)
            request = build()
            log.debug(
                "group %s: %s sent to node %d: %s", self._group_id, api, node, _brief(request)
            )
            resp = await self.send(node, request, timeout)
            event = on_response(resp)
            log.debug("group %s: %s answered: %s", self._group_id, api, _brief(event))
        except _NoCoordinator:
            event = E.request_failed(api, "coordinator", generation_id, "coordinator unknown")
        except IncompatibleBrokerVersion as exc:
            self._put(E.BrokerIncompatible(api, exc))
            event = E.request_failed(api, "connection", generation_id, repr(exc))
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            log.debug("group %s: %s failed: %r", self._group_id, api, exc)
            event = E.request_failed(api, failure_kind(exc), generation_id, repr(exc))
        self._put(event)

    async def join_group(self, action: A.SendJoinGroup) -> None:
        cfg = self._config
        sub = self._subscription.subscription
        topics = sub.effective_topics
        owned = sorted(action.owned_partitions)
        protocols = []
        for assignor in self._assignors:
            meta = ConsumerSubscription(
                topics=tuple(sorted(topics)),
                user_data=assignor.subscription_user_data(frozenset(topics)),
                owned_partitions=tuple(owned),
                # The generation of the owned partitions, not the member's current one:
                # a rejoin after a refused SyncGroup must repeat the metadata it joined
                # with, or a Stable group starts a new round for it (issue 24).
                generation_id=action.owned_generation,
                rack_id=cfg.client_rack,
            )
            protocols.append((assignor.name, encode_subscription(meta)))
        await self._request(
            "JoinGroup",
            action.generation_id,
            lambda: JoinGroupRequest(
                self._group_id,
                cfg.session_timeout_ms,
                cfg.effective_rebalance_timeout_ms,
                action.member_id,
                cfg.group_instance_id,
                PROTOCOL_TYPE,
                protocols,
                reason=action.reason,
            ),
            lambda resp: E.JoinGroupResponseReceived(parse_join_group(resp)),
            action.timeout,
        )

    async def compute_assignment(self, action: A.ComputeAssignment) -> None:
        event: E.Event
        peer_errors: list[tuple[str, BaseException]] = []
        try:
            assignments = await self._assign(action, peer_errors)
            event = E.AssignmentComputed(
                tuple((member, encode_assignment(asg)) for member, asg in assignments.items()),
                peer_errors=tuple(peer_errors),
            )
        except Exception as exc:
            log.exception("group %s: assignment failed", self._group_id)
            event = E.AssignmentComputed(error=exc, peer_errors=tuple(peer_errors))
        self._put(event)

    async def _assign(
        self, action: A.ComputeAssignment, peer_errors: list[tuple[str, BaseException]]
    ) -> dict[str, ConsumerAssignment]:
        assignor = next((a for a in self._assignors if a.name == action.protocol_name), None)
        if assignor is None:
            raise KafkaError(
                f"the broker chose assignor {action.protocol_name!r}, which this member "
                f"does not have ({[a.name for a in self._assignors]})"
            )
        members: dict[str, MemberSubscription] = {}
        for member in action.members:
            try:
                subscription = decode_subscription(member.metadata)
            except MalformedProtocolDataError as exc:
                # One bad peer must not stop the group: it gets nothing this generation.
                log.error(
                    "group %s: member %s sent undecodable subscription metadata: %s; "
                    "treating it as subscribed to nothing",
                    self._group_id,
                    member.member_id,
                    exc,
                )
                peer_errors.append((member.member_id, exc))
                subscription = ConsumerSubscription(topics=())
            members[member.member_id] = MemberSubscription(
                member.member_id, member.group_instance_id, subscription
            )
        topics = frozenset(t for m in members.values() for t in m.subscription.topics)
        self.group_topics = topics
        if self._subscription.subscription.type is not SubscriptionType.AUTO_PATTERN:
            wanted = topics | self._subscription.subscription.effective_topics
            await self._client.set_topics(sorted(wanted))
        else:
            await self._client.force_metadata_update()
        cluster = self._client.cluster
        self.assignor_counts = {
            t: len(cluster.partitions_for_topic(t) or ()) or None for t in topics
        }
        result = assignor.assign(cluster, members)
        for member_id in members:
            result.setdefault(member_id, ConsumerAssignment(partitions=()))
        log.info(
            "group %s: assigned generation %d with %s: %s",
            self._group_id,
            action.generation_id,
            assignor.name,
            {mid: len(a.partitions) for mid, a in result.items()},
        )
        return result

    async def sync_group(self, action: A.SendSyncGroup) -> None:
        cfg = self._config

        def on_response(resp: Any) -> E.Event:
            result = parse_sync_group(resp)
            if result.error_code != 0:
                return E.SyncGroupResponseReceived(result, action.generation_id)
            try:
                if result.assignment:
                    assignment = decode_assignment(result.assignment)
                else:
                    assignment = ConsumerAssignment(partitions=())
            except MalformedProtocolDataError as exc:
                return E.SyncGroupResponseReceived(
                    result, action.generation_id, None, decode_error=exc
                )
            for assignor in self._assignors:
                if assignor.name == action.protocol_name:
                    assignor.on_assignment(assignment, action.generation_id)
            return E.SyncGroupResponseReceived(
                result, action.generation_id, frozenset(assignment.partitions)
            )

        await self._request(
            "SyncGroup",
            action.generation_id,
            lambda: SyncGroupRequest(
                self._group_id,
                action.generation_id,
                action.member_id,
                cfg.group_instance_id,
                PROTOCOL_TYPE,
                action.protocol_name,
                list(action.assignments),
            ),
            on_response,
        )

    async def heartbeat(self, action: A.SendHeartbeat) -> None:
        await self._request(
            "Heartbeat",
            action.generation_id,
            lambda: HeartbeatRequest(
                self._group_id,
                action.generation_id,
                action.member_id,
                self._config.group_instance_id,
            ),
            lambda resp: E.HeartbeatResponseReceived(parse_heartbeat(resp), action.generation_id),
        )

    async def leave_group(self, action: A.SendLeaveGroup) -> None:
        await self._request(
            "LeaveGroup",
            -1,
            lambda: LeaveGroupRequest(
                self._group_id, action.member_id, self._config.group_instance_id, action.reason
            ),
            lambda resp: E.LeaveGroupResponseReceived(parse_leave_group(resp)),
        )
