"""The consumer-group session timeout, asked of the broker (DescribeConfigs).

A KIP-848 member's session is the broker's, not the client's: the group's own
``consumer.session.timeout.ms`` (a dynamic group config, KIP-848) when one is set,
else the broker's ``group.consumer.session.timeout.ms``.  The member needs it to
know until when it is surely still in the group (the delivery gate, see
:mod:`aiogroup._membership.consumer_group`).  One DescribeConfigs request to one
broker asks for both resources: the GROUP resource (type 32) and that broker's
BROKER resource (type 4, named by its node id - a broker answers for itself).
Newer brokers clamp a group's value into the broker's
``group.consumer.{min,max}.session.timeout.ms`` (GroupConfig.evaluate) and may
report the raw value, so the answer is capped at the broker's maximum: the gate
built on it must never close later than the broker's session.
"""

from __future__ import annotations

from typing import Any

from aiokafka.protocol.admin import DescribeConfigsRequest

__all__ = [
    "BROKER_MAX_SESSION_CONFIG",
    "BROKER_SESSION_CONFIG",
    "GROUP_SESSION_CONFIG",
    "SHARE_SESSION_CONFIGS",
    "parse_session_timeout",
    "parse_share_session_timeout",
    "session_timeout_request",
    "share_session_timeout_request",
]

#: ConfigResource.Type ids (DescribeConfigsRequest.json).
_BROKER = 4
_GROUP = 32
GROUP_SESSION_CONFIG = "consumer.session.timeout.ms"
BROKER_SESSION_CONFIG = "group.consumer.session.timeout.ms"
BROKER_MAX_SESSION_CONFIG = "group.consumer.max.session.timeout.ms"


def session_timeout_request(
    group_id: str, node_id: int, names: tuple[str, str, str] | None = None
) -> DescribeConfigsRequest:
    """Ask node ``node_id`` for the group's and its own consumer session timeout
    (``names``: the (group, broker, broker maximum) config names to ask instead)."""
    group, broker, cap = names or (
        GROUP_SESSION_CONFIG,
        BROKER_SESSION_CONFIG,
        BROKER_MAX_SESSION_CONFIG,
    )
    return DescribeConfigsRequest(
        [(_GROUP, group_id, [group]), (_BROKER, str(node_id), [broker, cap])]
    )


#: A share group's session (KIP-932): the group's ``share.session.timeout.ms``, else the
#: broker's ``group.share.session.timeout.ms``, capped at its maximum - same rules.
SHARE_SESSION_CONFIGS = (
    "share.session.timeout.ms",
    "group.share.session.timeout.ms",
    "group.share.max.session.timeout.ms",
)


def share_session_timeout_request(group_id: str, node_id: int) -> DescribeConfigsRequest:
    """Ask node ``node_id`` for a share group's session timeout and its own default."""
    return session_timeout_request(group_id, node_id, SHARE_SESSION_CONFIGS)


def parse_share_session_timeout(response: Any) -> int | None:
    """:func:`parse_session_timeout` for a share group's configs."""
    return parse_session_timeout(response, SHARE_SESSION_CONFIGS)


def parse_session_timeout(response: Any, names: tuple[str, str, str] | None = None) -> int | None:
    """The group's session timeout in ms, else the broker's, capped at the broker's
    maximum; None when neither answered (an error on a resource, e.g. no
    DESCRIBE_CONFIGS permission, skips it)."""
    group, broker, cap_name = names or (
        GROUP_SESSION_CONFIG,
        BROKER_SESSION_CONFIG,
        BROKER_MAX_SESSION_CONFIG,
    )
    found: dict[str, int] = {}
    for resource in response.resources:
        error_code, _message, resource_type, _name, entries = resource[:5]
        if error_code:
            continue
        wanted = (group,) if resource_type == _GROUP else (broker, cap_name)
        for entry in entries:
            name, value = entry[0], entry[1]
            if name not in wanted or value is None:
                continue
            try:
                ms = int(value)
            except ValueError:
                continue
            if ms > 0:
                found[name] = ms
    session = found.get(group, found.get(broker))
    cap = found.get(cap_name)
    return session if session is None or cap is None else min(session, cap)
