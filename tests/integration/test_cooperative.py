"""Cooperative incremental rebalancing (KIP-429) against the real broker.

Member A consumes a 6-partition topic under steady production; member B joins.
The same scenario runs at the same time for an eager group (``sticky``) and a
cooperative one (``cooperative-sticky``) reading the same topic, so the stall the
cooperative protocol removes is measured against the eager stall in the same run
instead of against a fixed number of seconds.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from itertools import pairwise

import pytest
from group_harness import (
    Load,
    Member,
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


@dataclass
class JoinRun:
    a: Member
    b: Member
    kept: frozenset[int]
    moved: frozenset[int]
    #: From A's first revoke callback after B started to the completion of the
    #: generation that gave B its partitions.
    window: tuple[float, float]
    b_started: float
    settled: float

    def kept_deliveries_in_window(self) -> dict[int, int]:
        lo, hi = self.window
        return {p: sum(lo <= t <= hi for t in self.a.deliveries[p]) for p in self.kept}

    def all_deliveries_in_window(self) -> int:
        lo, hi = self.window
        return sum(lo <= t <= hi for ts in self.a.deliveries.values() for t in ts)

    def longest_kept_gap(self) -> float:
        """Longest pause in A's delivery of a kept partition, from B's start to settling."""
        worst = 0.0
        for p in self.kept:
            times = [self.b_started] + [
                t for t in self.a.deliveries[p] if self.b_started <= t <= self.settled
            ]
            times.append(self.settled)
            worst = max(worst, max(later - earlier for earlier, later in pairwise(times)))
        return worst


async def join_scenario(
    bootstrap: str, group: str, topic: str, strategy: str, load: Load
) -> JoinRun:
    progress = asyncio.Event()
    loop = asyncio.get_running_loop()
    a = Member("a", bootstrap, group, topic, [strategy], progress)
    b = Member("b", bootstrap, group, topic, [strategy], progress)
    await a.start()
    await wait_until(
        lambda: a.owned == set(range(PARTITIONS)) and len(a.deliveries) == PARTITIONS,
        progress,
        WAIT,
        f"{strategy}: A to own and deliver every partition",
    )
    revokes_before = len(a.of("revoked"))
    b_started = loop.time()
    await b.start()
    await wait_until(
        lambda: (
            exactly_once_cover([a.owned, b.owned], PARTITIONS)
            and bool(b.of("assigned"))
            and a.of("assigned")[-1].generation == b.of("assigned")[-1].generation
        ),
        progress,
        WAIT,
        f"{strategy}: A and B to split the partitions",
        describe=lambda: (a.calls, b.calls),
    )
    b_first = next(c for c in b.of("assigned") if c.partitions)
    kept = frozenset(a.owned)
    # Some records of every kept partition after B got its share, so the gap
    # measurement has an end on both sides.
    await wait_until(
        lambda: all(any(t > b_first.at for t in a.deliveries[p]) for p in kept),
        progress,
        WAIT,
        f"{strategy}: A to go on delivering its partitions",
    )
    first_revoke = a.of("revoked")[revokes_before]
    # The window closes when the generation that gives B its share completes: at the
    # first assigned callback of that generation, whichever member runs it first.
    window_end = min(
        c.at for m in (a, b) for c in m.of("assigned") if c.generation == b_first.generation
    )
    return JoinRun(
        a,
        b,
        kept,
        frozenset(range(PARTITIONS)) - kept,
        (first_revoke.at, window_end),
        b_started,
        loop.time(),
    )


async def finish(run: JoinRun, load: Load, bootstrap: str, group: str, topic: str) -> None:
    """Drain everything produced, stop both members (commit on stop), check the group."""
    progress = run.a.progress
    expected = load.expected()
    await wait_until(
        lambda: expected <= set(run.a.seen) | set(run.b.seen),
        progress,
        WAIT,
        "every produced record to be consumed",
        describe=lambda: len(expected - (set(run.a.seen) | set(run.b.seen))),
    )
    await run.b.stop()
    await run.a.stop()
    committed = await committed_offsets(bootstrap, group, topic, PARTITIONS)
    assert committed == {p: load.end[p] for p in range(PARTITIONS)}


async def test_kept_partitions_are_delivered_through_a_cooperative_rebalance(
    bootstrap_servers: str, kafka_topic: TopicFactory, group_id: str, kafka_broker: KafkaBroker
) -> None:
    caps = kafka_broker.caps
    topic = await kafka_topic(partitions=PARTITIONS)
    async with Load(bootstrap_servers, topic, PARTITIONS) as load:
        eager, coop = await asyncio.gather(
            join_scenario(bootstrap_servers, f"{group_id}-eager", topic, "sticky", load),
            join_scenario(bootstrap_servers, f"{group_id}-coop", topic, "cooperative-sticky", load),
        )
        assert eager.a.rebalance_protocol == "eager"
        assert coop.a.rebalance_protocol == "cooperative"
        assert coop.a.protocol_name == coop.b.protocol_name == "cooperative-sticky"
    # Production stopped: load.end is final.  Drain and check both groups concurrently.
    await asyncio.gather(
        finish(eager, load, bootstrap_servers, f"{group_id}-eager", topic),
        finish(coop, load, bootstrap_servers, f"{group_id}-coop", topic),
    )

    # Delivery through the rebalance.  Eager: A revoked everything before rejoining,
    # so it handed out nothing between its revoke and B's assignment.  Cooperative:
    # every partition A kept went on being delivered inside that same window.
    assert len(coop.kept) == len(coop.moved) == PARTITIONS // 2
    assert eager.all_deliveries_in_window() == 0
    in_window = coop.kept_deliveries_in_window()
    assert all(n > 0 for n in in_window.values()), in_window
    if caps.holds_join_half_session:
        # The eager stall lasts as long as the broker holds the join (half a session
        # here), so the kept partitions' longest silence must be shorter under
        # cooperative.  Kafka answers the join at once: the eager stall is a few
        # milliseconds and comparing the gaps would measure scheduling noise.
        assert coop.longest_kept_gap() < eager.longest_kept_gap(), (
            coop.longest_kept_gap(),
            eager.longest_kept_gap(),
        )

    a, b = coop.a, coop.b
    # on_partitions_revoked: once on A, with exactly the partitions that moved to B;
    # never on B, never with an empty set (stop() is checked separately).
    assert [c.partitions for c in a.of("revoked")] == [coop.moved]
    assert b.of("revoked") == []
    # on_partitions_assigned: only new partitions, once per completed rebalance.
    assert a.of("assigned")[0].partitions == frozenset(range(PARTITIONS))
    for m in (a, b):
        gens = [c.generation for c in m.of("assigned")]
        assert gens == sorted(set(gens)), (m.name, gens)  # once per generation
        owned: set[int] = set()
        for c in m.of("assigned"):
            assert not c.partitions & owned, (m.name, c)  # only newly added ones
            owned |= c.partitions
    # A completed each rebalance B completed, with nothing new for A.
    a_by_gen = {c.generation: c.partitions for c in a.of("assigned")}
    for c in b.of("assigned"):
        assert a_by_gen.get(c.generation) == frozenset(), (c, a.of("assigned"))
    # B received exactly what A released, once.
    assert [c.partitions for c in b.of("assigned") if c.partitions] == [coop.moved]
    # ... and only in a later generation than the one in which A released them.
    [released] = a.of("revoked")
    [received] = [c for c in b.of("assigned") if c.partitions]
    assert received.generation is not None and released.generation is not None
    if caps.cooperative_joiner_extra_generation:
        # A SyncGroup race may cost B the generation in which A released them (the
        # broker answers B's SyncGroup of it with REBALANCE_IN_PROGRESS).
        assert received.generation > released.generation
    else:
        # Kafka: B completes the generation in which A releases them with nothing new,
        # and gets them in the one follow-up rebalance.
        assert received.generation == released.generation + 1, b.calls
        assert [c.generation for c in b.of("assigned")] == [
            released.generation,
            received.generation,
        ], b.calls
    assert a.of("lost") == b.of("lost") == []
    # No partition held by two members in one generation, in either group.
    assert overlaps_by_generation([a, b]) == []
    assert overlaps_by_generation([eager.a, eager.b]) == []
    # stop(): revoked once with exactly what the member still held (B stopped first,
    # so A may have taken B's partitions back by then).
    assert [c.partitions for c in b.of("revoked", stopping=True)] == [coop.moved]
    [a_stop] = a.of("revoked", stopping=True)
    assert a_stop.partitions == a_stop.held and coop.kept <= a_stop.partitions
    assert not (a.errors or b.errors or eager.a.errors or eager.b.errors)
