"""Moving a live group from eager to cooperative rebalancing by two rolling restarts.

The documented Kafka procedure (KIP-429): members on ``["range"]`` are restarted one
by one with ``["cooperative-sticky", "range"]`` (still eager, because ``range`` is
eager-only, but ready for the new assignor), then one by one with
``["cooperative-sticky"]``.  The group consumes under steady production all along.

Kafka re-selects the group's assignor at every rebalance, so after the first
rolling restart it runs ``cooperative-sticky``, and on Apache Kafka the test takes
ONE group through both rolling restarts, as a user would.  A broker that pins the
assignor when the group forms (``caps.pins_group_assignor``: Tansu answers
INCONSISTENT_GROUP_PROTOCOL to a later member that does not list it) makes a group
born on ``range`` unable to take the second step; there each rolling restart runs
on its own group (both at once, on one topic), the second starting from the state
the first ends in on Kafka - every member on ``["cooperative-sticky", "range"]``,
eager, with ``cooperative-sticky`` chosen.
"""

from __future__ import annotations

import asyncio

import pytest
from group_harness import (
    Key,
    Load,
    Member,
    all_or_nothing,
    committed_offsets,
    exactly_once_cover,
    overlaps_by_generation,
    wait_until,
)

from aiogroup.testing import KafkaBroker
from aiogroup.testing.plugin import TopicFactory

pytestmark = pytest.mark.integration

PARTITIONS = 6
WAIT = 60.0

EAGER_ONLY = ("range",)
BOTH = ("cooperative-sticky", "range")
COOPERATIVE = ("cooperative-sticky",)


def last_generation(m: Member) -> int | None:
    assigned = m.of("assigned")
    return assigned[-1].generation if assigned else None


class RollingGroup:
    """Two members of one group that are restarted one at a time."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.progress = asyncio.Event()
        self.members: list[Member] = []

    def member(self, name: str, strategy: tuple[str, ...]) -> Member:
        m = Member(name, self.bootstrap, self.group, self.topic, strategy, self.progress)
        self.members.append(m)
        return m

    def seen(self) -> set[Key]:
        return {key for m in self.members for key in m.seen}

    def per_partition(self) -> dict[int, int]:
        counts = dict.fromkeys(range(PARTITIONS), 0)
        for p, _ in self.seen():
            counts[p] += 1
        return counts

    async def start(self, strategy: tuple[str, ...]) -> tuple[Member, Member]:
        a, b = self.member("a0", strategy), self.member("b0", strategy)
        await asyncio.gather(a.start(), b.start())
        await self.converged(a, b, f"{self.group}: both on {list(strategy)}")
        return a, b

    async def restart(self, old: Member, strategy: tuple[str, ...], other: Member) -> Member:
        """Stop ``old``, start its successor, wait until the group works again."""
        before = self.per_partition()
        await old.stop()
        new = self.member(f"{old.name[0]}{len(self.members)}", strategy)
        await new.start()
        await self.converged(new, other, f"{self.group}: {new.name} on {list(strategy)}", before)
        return new

    async def converged(
        self, x: Member, y: Member, phase: str, before: dict[int, int] | None = None
    ) -> None:
        """Both completed one generation, owning each partition once between them, and
        every partition was consumed again since ``before``."""
        await wait_until(
            lambda: (
                exactly_once_cover([x.owned, y.owned], PARTITIONS)
                and last_generation(x) is not None
                and last_generation(x) == last_generation(y)
            ),
            self.progress,
            WAIT,
            f"{phase}: {x.name} and {y.name} to split the partitions",
            describe=lambda: (x.calls, y.calls, x.errors, y.errors),
        )
        counts = before or dict.fromkeys(range(PARTITIONS), 0)
        await wait_until(
            lambda: all(n > counts[p] for p, n in self.per_partition().items()),
            self.progress,
            WAIT,
            f"{phase}: every partition consumed again",
        )

    async def abort(self) -> None:
        """After a failure: drop whatever still runs so the test ends promptly."""
        await asyncio.gather(*(m.abort() for m in self.members))

    async def finish(self, load: Load, live: tuple[Member, Member]) -> None:
        expected = load.expected()
        await wait_until(
            lambda: expected <= self.seen(),
            self.progress,
            WAIT,
            f"{self.group}: every produced record to be consumed",
            describe=lambda: len(expected - self.seen()),
        )
        await asyncio.gather(*(m.stop() for m in live))
        assert overlaps_by_generation(self.members) == []
        assert all(not m.of("lost") for m in self.members), [m.calls for m in self.members]
        assert all(not m.errors for m in self.members), [m.errors for m in self.members]
        committed = await committed_offsets(self.bootstrap, self.group, self.topic, PARTITIONS)
        assert committed == {p: load.end[p] for p in range(PARTITIONS)}


async def first_rolling_restart(g: RollingGroup, pinned: bool) -> tuple[Member, Member]:
    a, b = await g.start(EAGER_ONLY)
    assert a.protocol_name == b.protocol_name == "range"
    a = await g.restart(a, BOTH, b)
    assert a.rebalance_protocol == "eager"  # range is eager-only
    assert a.protocol_name == b.protocol_name == "range"  # b cannot speak the other one
    b = await g.restart(b, BOTH, a)
    assert a.rebalance_protocol == b.rebalance_protocol == "eager"
    # Kafka switches to everyone's first choice now; a pinning broker stays on range.
    assert a.protocol_name == b.protocol_name == ("range" if pinned else "cooperative-sticky")
    return a, b


async def second_rolling_restart(
    g: RollingGroup, started: tuple[Member, Member] | None = None
) -> tuple[Member, Member]:
    """From every member on BOTH (``started``, or two fresh ones) to every member cooperative."""
    a, b = started or await g.start(BOTH)
    assert a.rebalance_protocol == b.rebalance_protocol == "eager"
    assert a.protocol_name == b.protocol_name == "cooperative-sticky"
    a = await g.restart(a, COOPERATIVE, b)
    # One member rebalances cooperatively, the other still eagerly, same assignor.
    assert (a.rebalance_protocol, b.rebalance_protocol) == ("cooperative", "eager")
    assert a.protocol_name == b.protocol_name == "cooperative-sticky"
    b = await g.restart(b, COOPERATIVE, a)
    assert a.rebalance_protocol == b.rebalance_protocol == "cooperative"
    assert a.protocol_name == b.protocol_name == "cooperative-sticky"
    return a, b


async def test_rolling_upgrade_from_eager_to_cooperative(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str, kafka_broker: KafkaBroker
) -> None:
    topic = await kafka_topic(partitions=PARTITIONS)
    if kafka_broker.caps.pins_group_assignor:
        await two_groups_one_step_each(bootstrap_servers, topic, group_id)
        return
    g = RollingGroup(bootstrap_servers, group_id, topic)
    try:
        async with Load(bootstrap_servers, topic, PARTITIONS) as load:
            live = await second_rolling_restart(g, await first_rolling_restart(g, pinned=False))
        await g.finish(load, live)
    finally:
        await g.abort()
    # Six members over time (a0 b0 on range, a2 b3 on both, a4 b5 cooperative): the
    # eager member still on BOTH during the first cooperative restart revoked all it
    # held; the cooperative survivor kept its partitions through the last restart.
    assert [m.name for m in g.members] == ["a0", "b0", "a2", "b3", "a4", "b5"]
    check_final_restart(eager_b=g.members[3], survivor=live[0])


async def two_groups_one_step_each(bootstrap_servers: str, topic: str, group_id: str) -> None:
    """``caps.pins_group_assignor``: each rolling restart on its own group (both at once)."""
    first = RollingGroup(bootstrap_servers, f"{group_id}-1", topic)
    second = RollingGroup(bootstrap_servers, f"{group_id}-2", topic)
    try:
        async with Load(bootstrap_servers, topic, PARTITIONS) as load:
            live_first, live_second = await all_or_nothing(
                first_rolling_restart(first, pinned=True), second_rolling_restart(second)
            )
        await all_or_nothing(first.finish(load, live_first), second.finish(load, live_second))
    finally:
        await asyncio.gather(first.abort(), second.abort())
    check_final_restart(eager_b=second.members[1], survivor=live_second[0])


def check_final_restart(eager_b: Member, survivor: Member) -> None:
    """Eager members revoked everything they held at every rebalance; the cooperative
    member went through the final restart keeping its partitions (at most the ones
    that moved were revoked)."""
    assert eager_b.of("revoked"), eager_b.calls
    assert all(c.partitions == c.held for c in eager_b.of("revoked")), eager_b.calls
    assert len(survivor.of("assigned")) >= 2, survivor.calls  # it saw the last restart
    for call in survivor.of("revoked"):
        assert call.partitions and call.partitions < call.held, call
