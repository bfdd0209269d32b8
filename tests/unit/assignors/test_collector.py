"""Assignors pause the cyclic collector while they run and leave its state as found."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from aiogroup._protocol.classic_embedded import ConsumerSubscription
from aiogroup.assignors import (
    ConsumerPartitionAssignor,
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)
from aiogroup.assignors.abc import collector_paused
from tests.unit.assignors.support import Cluster


@pytest.fixture
def restore_collector() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


ASSIGNORS = [RangeAssignor, RoundRobinAssignor, StickyAssignor, CooperativeStickyAssignor]


@pytest.mark.parametrize("cls", ASSIGNORS, ids=lambda c: c.name)
@pytest.mark.parametrize("enabled", [True, False])
def test_collector_state_is_left_as_found(
    restore_collector: None, cls: type[ConsumerPartitionAssignor], enabled: bool
) -> None:
    (gc.enable if enabled else gc.disable)()
    seen: list[bool] = []

    class Spy(Cluster):
        def partitions_for_topic(self, topic: str) -> set[int] | None:
            seen.append(gc.isenabled())
            return super().partitions_for_topic(topic)

    members = {"m": MemberSubscription("m", None, ConsumerSubscription(topics=("t",)))}
    result = cls().assign(Spy({"t": 3}), members)
    assert len(result["m"].partitions) == 3
    assert seen and not any(seen)  # paused while assigning
    assert gc.isenabled() is enabled


def test_an_error_inside_still_restores_the_collector(restore_collector: None) -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()
