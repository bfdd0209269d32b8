"""Finding the group's coordinator: one request, one event, for every group protocol.

FindCoordinator is the same call whichever protocol the member speaks, so both
shells perform the machines' ``FindCoordinator`` action with this one coroutine.
What an answer means - retry after a backoff, tell the application of a missing
ACL - is the machine's decision (the event carries the error code); here only the
request is sent, and a coordinator is reported found once a connection to it works.
"""

from __future__ import annotations

import logging

from aiokafka.client import AIOKafkaClient, ConnectionGroup

from aiogroup._membership import events as E
from aiogroup._protocol.group import FindCoordinatorRequest, parse_find_coordinator
from aiogroup.errors import KafkaError
from aiogroup.metrics import ConsumerMetrics

__all__ = ["look_up_coordinator"]

log = logging.getLogger("aiogroup.coordinator")


async def look_up_coordinator(
    client: AIOKafkaClient, group_id: str, metrics: ConsumerMetrics
) -> E.CoordinatorFound | E.CoordinatorLookupFailed:
    """Ask any broker for ``group_id``'s coordinator and connect to it."""
    try:
        node = client.get_random_node()
        if node is None:
            raise KafkaError("no broker known to ask for the coordinator")
        request = FindCoordinatorRequest(group_id)
        result = parse_find_coordinator(
            await metrics.timed_group_request(request, client.send(node, request))
        )
        if result.error_code != 0:
            return E.CoordinatorLookupFailed(result.error_code, result.error_message or "")
        if not await client.ready(result.node_id, group=ConnectionGroup.COORDINATION):
            return E.CoordinatorLookupFailed(-1, f"cannot connect to node {result.node_id}")
        log.info(
            "group %s: coordinator is node %d (%s:%d)",
            group_id,
            result.node_id,
            result.host,
            result.port,
        )
        return E.CoordinatorFound(result.node_id)
    except (KafkaError, OSError) as exc:
        log.debug("group %s: FindCoordinator failed: %r", group_id, exc)
        return E.CoordinatorLookupFailed(-1, repr(exc))
