"""Partition assignors, chosen by name as in Kafka's partition.assignment.strategy."""

from __future__ import annotations

from collections.abc import Iterable

from aiogroup.assignors.abc import ClusterView, ConsumerPartitionAssignor, MemberSubscription
from aiogroup.assignors.adapter import AiokafkaAssignorAdapter, is_aiokafka_assignor
from aiogroup.assignors.cooperative import CooperativeStickyAssignor
from aiogroup.assignors.range import RangeAssignor
from aiogroup.assignors.roundrobin import RoundRobinAssignor
from aiogroup.assignors.sticky import StickyAssignor
from aiogroup.errors import ConfigurationError
from aiogroup.structs import RebalanceProtocol

__all__ = [
    "DEFAULT_ASSIGNORS",
    "AiokafkaAssignorAdapter",
    "ClusterView",
    "ConsumerPartitionAssignor",
    "CooperativeStickyAssignor",
    "MemberSubscription",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "inconsistent_protocol_hint",
    "resolve_assignors",
    "select_rebalance_protocol",
]

#: ``partition_assignment_strategy``'s default, in preference order.  ``range`` first:
#: the Java client's first choice, so an all-aiogroup group (and one with Java or
#: librdkafka members on their defaults) uses it.  ``roundrobin`` also: aiokafka's only
#: default, so an aiogroup member joins a group of aiokafka members left on theirs
#: (the broker picks a protocol every member lists; among several, the one most
#: members prefer).  Both are eager, so the rebalance protocol stays eager.
DEFAULT_ASSIGNORS: tuple[str, ...] = ("range", "roundrobin")

#: What other clients list by default, for the INCONSISTENT_GROUP_PROTOCOL hint.
_CLIENT_DEFAULTS = (
    "aiokafka: roundrobin; Java: range, cooperative-sticky; "
    "librdkafka/confluent-kafka: range, roundrobin"
)

ASSIGNORS_BY_NAME: dict[str, type[ConsumerPartitionAssignor]] = {
    cls.name: cls
    for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor)
}


def _resolve_one(strategy: str | type | object) -> ConsumerPartitionAssignor:
    if isinstance(strategy, str):
        cls = ASSIGNORS_BY_NAME.get(strategy)
        if cls is None:
            raise ConfigurationError(
                f"unknown partition assignor {strategy!r}; known names: "
                f"{', '.join(sorted(ASSIGNORS_BY_NAME))}"
            )
        return cls()
    if isinstance(strategy, ConsumerPartitionAssignor):
        return strategy
    if isinstance(strategy, type) and issubclass(strategy, ConsumerPartitionAssignor):
        try:
            return strategy()
        except TypeError as exc:
            raise ConfigurationError(
                f"partition assignor class {strategy.__name__} cannot be built without "
                f"arguments ({exc}); pass an instance instead"
            ) from None
    if is_aiokafka_assignor(strategy):
        return AiokafkaAssignorAdapter(strategy)
    raise ConfigurationError(
        f"partition assignor must be a name ({', '.join(sorted(ASSIGNORS_BY_NAME))}), a "
        f"ConsumerPartitionAssignor or an aiokafka AbstractPartitionAssignor, got {strategy!r}"
    )


def resolve_assignors(strategies: Iterable[str | type | object]) -> list[ConsumerPartitionAssignor]:
    """Turn ``partition_assignment_strategy`` into assignor instances, in preference order.

    Names must be unique: JoinGroup lists one protocol per name, and the broker could
    not tell two assignors with one name apart.
    """
    if isinstance(strategies, (str, bytes)):
        strategies = (strategies,)
    assignors = [_resolve_one(s) for s in strategies]
    if not assignors:
        raise ConfigurationError("partition_assignment_strategy must name at least one assignor")
    seen: set[str] = set()
    for assignor in assignors:
        if not isinstance(assignor.name, str) or not assignor.name:
            raise ConfigurationError(f"partition assignor {assignor!r} has no name")
        if assignor.name in seen:
            raise ConfigurationError(f"partition assignor {assignor.name!r} is listed twice")
        seen.add(assignor.name)
    return assignors


def select_rebalance_protocol(assignors: Iterable[ConsumerPartitionAssignor]) -> RebalanceProtocol:
    """COOPERATIVE only if every configured assignor supports it, as the Java client does.

    The broker may choose any of the configured assignors, so the member must already
    behave correctly for whichever one it picks; one eager-only assignor forces eager.
    """
    assignors = list(assignors)
    if not assignors:
        raise ConfigurationError("cannot choose a rebalance protocol without an assignor")
    if all(RebalanceProtocol.COOPERATIVE in a.supported_protocols for a in assignors):
        return RebalanceProtocol.COOPERATIVE
    return RebalanceProtocol.EAGER


def inconsistent_protocol_hint(offered: Iterable[str]) -> str:
    """The advice appended to a JoinGroup refused with INCONSISTENT_GROUP_PROTOCOL.

    The broker refuses a member that shares no assignor with the group's members; the
    bare error names neither side.  This says what this member offered and which
    setting to change (the group's own protocol is not in the answer).
    """
    return (
        f" - this member offered the assignors {', '.join(offered)} and the group's members "
        "list none of them: add one they use to partition_assignment_strategy (defaults: "
        f"{_CLIENT_DEFAULTS})"
    )
