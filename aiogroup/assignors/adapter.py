"""Run an aiokafka partition assignor inside aiogroup.

Applications migrating from aiokafka may have written their own
``AbstractPartitionAssignor``.  aiokafka calls those with its own metadata structs
(and usually as classes, since their methods are classmethods), so the adapter
converts our subscriptions to aiokafka's structs on the way in and their assignments
back on the way out, and calls the assignor the way aiokafka would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiokafka.coordinator.assignors.abstract import AbstractPartitionAssignor
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)

from aiogroup._protocol.classic_embedded import LATEST_ASSIGNMENT_VERSION, ConsumerAssignment
from aiogroup.assignors.abc import ClusterView, ConsumerPartitionAssignor, MemberSubscription
from aiogroup.errors import ConfigurationError
from aiogroup.structs import TopicPartition

__all__ = ["AiokafkaAssignorAdapter", "is_aiokafka_assignor"]


def is_aiokafka_assignor(obj: object) -> bool:
    """True for an aiokafka ``AbstractPartitionAssignor`` subclass or instance."""
    if isinstance(obj, type):
        return issubclass(obj, AbstractPartitionAssignor)
    return isinstance(obj, AbstractPartitionAssignor)


class AiokafkaAssignorAdapter(ConsumerPartitionAssignor):
    """Presents an aiokafka assignor (class or instance) as a ConsumerPartitionAssignor."""

    name = ""  # replaced per instance by the wrapped assignor's name

    def __init__(self, assignor: Any) -> None:
        if not is_aiokafka_assignor(assignor):
            raise ConfigurationError(
                f"{assignor!r} is not an aiokafka AbstractPartitionAssignor class or instance"
            )
        name = getattr(assignor, "name", None)
        if not isinstance(name, str) or not name:
            raise ConfigurationError(
                f"aiokafka assignor {assignor!r} has no name; set a class attribute `name`"
            )
        self._inner = assignor
        self.name = name  # type: ignore[misc]  # the name belongs to the wrapped assignor
        inner_version = getattr(assignor, "version", 0)
        self._inner_version = inner_version if isinstance(inner_version, int) else 0

    @property
    def wrapped(self) -> Any:
        return self._inner

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        metadata = self._inner.metadata(sorted(topics))
        user_data: bytes | None = metadata.user_data
        return user_data

    def assign(
        self, cluster: ClusterView, members: Mapping[str, MemberSubscription]
    ) -> dict[str, ConsumerAssignment]:
        their_members = {
            member_id: ConsumerProtocolMemberMetadata(
                m.subscription.version, list(m.subscription.topics), m.subscription.user_data
            )
            for member_id, m in members.items()
        }
        result = self._inner.assign(cluster, their_members)
        if not isinstance(result, Mapping):
            raise TypeError(
                f"aiokafka assignor {self.name!r} returned {type(result).__name__}, "
                "expected a dict of member id to ConsumerProtocolMemberAssignment"
            )
        unknown = set(result) - set(members)
        if unknown:
            raise ValueError(
                f"aiokafka assignor {self.name!r} assigned to unknown members {sorted(unknown)}"
            )
        return {
            member_id: _from_aiokafka(self.name, result.get(member_id)) for member_id in members
        }

    def on_assignment(self, assignment: ConsumerAssignment, generation_id: int) -> None:
        by_topic: dict[str, list[int]] = {}
        for tp in assignment.partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        theirs = ConsumerProtocolMemberAssignment(
            assignment.version, sorted(by_topic.items()), assignment.user_data
        )
        self._inner.on_assignment(theirs)
        # aiokafka's own sticky assignor learns the generation through a separate hook.
        on_generation = getattr(self._inner, "on_generation_assignment", None)
        if callable(on_generation):
            on_generation(generation_id)


def _from_aiokafka(name: str, theirs: Any) -> ConsumerAssignment:
    if theirs is None:
        return ConsumerAssignment(partitions=())
    entries = getattr(theirs, "assignment", None)
    if entries is None:
        raise TypeError(
            f"aiokafka assignor {name!r} returned {theirs!r}, "
            "expected a ConsumerProtocolMemberAssignment"
        )
    partitions = tuple(
        sorted(TopicPartition(topic, int(p)) for topic, parts in entries for p in parts)
    )
    version = getattr(theirs, "version", None)
    if not isinstance(version, int) or not 0 <= version <= LATEST_ASSIGNMENT_VERSION:
        version = 0
    user_data = getattr(theirs, "user_data", None)
    if not isinstance(user_data, bytes):
        user_data = None
    return ConsumerAssignment(partitions=partitions, user_data=user_data, version=version)
