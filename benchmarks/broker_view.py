"""The broker's view of one benchmark group: when it settled and how many rebalances it took.

A member's callbacks say what the member was told, not what the group went through: a
client may be assigned once and still have cost the group two generations.  So settle
time and the rebalance count are read from the coordinator, from outside every member:

* :class:`GroupWatch` samples the group every ``interval`` seconds over its own
  connection - DescribeGroups for a classic group, ConsumerGroupDescribe for a
  consumer-protocol (KIP-848) group - keeping the state, the members and, where the
  broker reports them, each member's assignment (Apache Kafka does; Tansu answers
  DescribeGroups with empty assignments) and the group epoch (KIP-848 only).
* :meth:`GroupWatch.generation` reads the broker's own record of a classic group's
  generations: every generation Apache Kafka completes is written to
  ``__consumer_offsets`` as a GroupMetadata record carrying its generation id, and a
  generation abandoned before it completed still uses up its number.  Tansu keeps no
  such topic; there the count falls back to the rounds the sampler saw (non-Stable,
  then Stable again), a lower bound: two rounds with no Stable sample between them
  count as one.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.client import AIOKafkaClient, CoordinationType

from aiogroup._protocol.consumer_group import (
    ConsumerGroupDescribeRequest,
    parse_consumer_group_describe,
)
from aiogroup.testing.observer import describe_group, member_name

OFFSETS_TOPIC = "__consumer_offsets"
#: ``__consumer_offsets`` key version of a GroupMetadata record (0/1 are offsets).
GROUP_METADATA_KEY = 2


@dataclass(frozen=True)
class Sample:
    """One answer of the coordinator about the group."""

    sent: float
    arrived: float
    state: str
    #: member name (client id) -> assigned partition numbers
    members: dict[str, frozenset[int]]
    #: KIP-848 group epoch; None for a classic group (DescribeGroups has no generation).
    epoch: int | None = None


def java_string_hash(s: str) -> int:
    """``String.hashCode()`` of Java: which ``__consumer_offsets`` partition holds a group."""
    h = 0
    units = s.encode("utf-16-be")  # Java hashes UTF-16 code units
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def offsets_partition(group: str, partitions: int) -> int:
    """Kafka's ``partitionFor(groupId)``: ``Utils.abs(hashCode) % partitions``."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def decode_group_metadata(key: bytes, value: bytes | None) -> tuple[str, int] | None:
    """(group, generation) of a GroupMetadata record; None for any other record or a
    tombstone.  Only the prefix every value version shares is read: version, protocol
    type, generation."""
    if len(key) < 4 or struct.unpack_from(">h", key, 0)[0] != GROUP_METADATA_KEY:
        return None
    (glen,) = struct.unpack_from(">h", key, 2)
    group = key[4 : 4 + glen].decode()
    if value is None or len(value) < 8:
        return None
    (plen,) = struct.unpack_from(">h", value, 2)
    offset = 4 + max(plen, 0)
    (generation,) = struct.unpack_from(">i", value, offset)
    return group, generation


@dataclass
class GroupWatch:
    """Samples one group from outside (see the module doc); ``start``/``stop``."""

    bootstrap: str
    group: str
    protocol: str = "classic"  # or "consumer"
    interval: float = 0.05
    samples: list[Sample] = field(default_factory=list)
    failures: int = 0
    _client: AIOKafkaClient | None = None
    _task: asyncio.Task[None] | None = None
    _offsets_partitions: int | None = None

    async def start(self) -> GroupWatch:
        self._client = AIOKafkaClient(
            bootstrap_servers=self.bootstrap, client_id="bench-observer", request_timeout_ms=5000
        )
        await self._client.bootstrap()
        self._task = asyncio.create_task(self._run(), name=f"watch-{self.group}")
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _run(self) -> None:
        assert self._client is not None
        while True:
            sent = time.monotonic()
            try:
                sample = await self._sample(self._client, sent)
            except asyncio.CancelledError:
                raise
            except Exception:  # a failed sample is a gap, not a state
                self.failures += 1
                sample = None
            if sample is not None:
                self.samples.append(sample)
            await asyncio.sleep(max(0.0, self.interval - (time.monotonic() - sent)))

    async def _sample(self, client: AIOKafkaClient, sent: float) -> Sample | None:
        if self.protocol == "consumer":
            node = await client.coordinator_lookup(CoordinationType.GROUP, self.group)
            described = parse_consumer_group_describe(
                await client.send(node, ConsumerGroupDescribeRequest(self.group))
            )
            if described.error_code:
                return None
            return Sample(
                sent,
                time.monotonic(),
                described.group_state,
                {
                    member_name(m.client_id, m.member_id): frozenset(p for _t, p in m.assignment)
                    for m in described.members
                },
                described.group_epoch,
            )
        gs = await describe_group(client, self.group)
        if gs.state == "Dead":
            return None
        return Sample(
            sent,
            time.monotonic(),
            gs.state,
            {n: frozenset(p for _t, p in parts) for n, (_m, parts) in gs.members.items()},
        )

    # -- the broker's generations ---------------------------------------------------------

    async def generation(self) -> int | None:
        """The newest generation of this classic group recorded in ``__consumer_offsets``
        (None where the broker keeps no such topic, as Tansu)."""
        assert self._client is not None
        if self._offsets_partitions is None:
            self._client.add_topic(OFFSETS_TOPIC)
            with contextlib.suppress(Exception):
                await self._client.force_metadata_update()
            parts = self._client.cluster.partitions_for_topic(OFFSETS_TOPIC)
            self._offsets_partitions = len(parts) if parts else 0
        if not self._offsets_partitions:
            return None
        tp = TopicPartition(OFFSETS_TOPIC, offsets_partition(self.group, self._offsets_partitions))
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, enable_auto_commit=False, group_id=None
        )
        await consumer.start()
        newest: int | None = None
        try:
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            deadline = time.monotonic() + 10
            while await consumer.position(tp) < end and time.monotonic() < deadline:
                for records in (await consumer.getmany(tp, timeout_ms=500)).values():
                    for r in records:
                        got = decode_group_metadata(r.key or b"", r.value)
                        if got is not None and got[0] == self.group:
                            newest = got[1] if newest is None else max(newest, got[1])
        finally:
            await consumer.stop()
        return newest

    # -- judgments over the samples ---------------------------------------------------------

    def reports_assignments(self) -> bool:
        """Whether the broker names each member's partitions (Tansu's DescribeGroups
        does not: every assignment comes back empty)."""
        return any(p for s in self.samples if s.state == "Stable" for p in s.members.values())

    def settled_at(
        self, since: float, names: set[str], partitions: int, members_even: float | None = None
    ) -> float | None:
        """Arrival of the first sample sent at or after ``since`` that shows the group
        Stable with exactly ``names`` as members, each holding its even share of
        ``partitions`` and every partition owned once.  Where the broker reports no
        assignments, the shares are the members' own reports: the first Stable sample
        with every member sent after ``members_even`` (when they reported the split)."""
        share, extra = divmod(partitions, len(names))
        by_broker = self.reports_assignments()
        for s in self.samples:
            if s.sent < since or s.state != "Stable" or set(s.members) != names:
                continue
            if by_broker:
                sizes = sorted(len(p) for p in s.members.values())
                owned = set().union(*s.members.values())
                want = sorted([share] * (len(names) - extra) + [share + 1] * extra)
                if sizes != want or owned != set(range(partitions)):
                    continue
            elif members_even is None or s.sent < members_even:
                continue
            return s.arrived
        return None

    def epoch_before(self, t: float) -> int | None:
        before = [s.epoch for s in self.samples if s.arrived <= t and s.epoch is not None]
        return before[-1] if before else None

    def epoch_last(self) -> int | None:
        seen = [s.epoch for s in self.samples if s.epoch is not None]
        return max(seen) if seen else None

    def rounds_seen(self, since: float, until: float) -> int:
        """Rebalance rounds the sampler saw between ``since`` and ``until``: each return
        to Stable after a non-Stable sample (a lower bound, see the module doc)."""
        rounds = 0
        unsettled = False
        for s in self.samples:
            if s.sent < since or s.sent > until:
                continue
            if s.state != "Stable":
                unsettled = True
            elif unsettled:
                rounds += 1
                unsettled = False
        return rounds + (1 if unsettled else 0)


async def rebalance_count(
    watch: GroupWatch, since: float, until: float, generation_before: int | None
) -> tuple[float, str]:
    """How many rebalances the group went through in [since, until], and how that was
    counted: ``generations`` (classic, the broker's log), ``epochs`` (KIP-848 group
    epoch) or ``rounds seen`` (classic on a broker without the log; a lower bound)."""
    if watch.protocol == "consumer":
        before, after = watch.epoch_before(since), watch.epoch_last()
        if before is None or after is None:
            return float("nan"), "epochs"
        return float(after - before), "epochs"
    if generation_before is not None:
        after_gen = await watch.generation()
        if after_gen is not None:
            return float(after_gen - generation_before), "generations"
    return float(watch.rounds_seen(since, until)), "rounds seen"


#: Seconds the watch keeps looking after the members report the new split: a
#: rebalance that follows a settled split (a second round, a storm) is counted too.
TAIL = 3.0


async def judge_change(
    watch: GroupWatch,
    since: float,
    names: set[str],
    partitions: int,
    members_even: float,
    generation_before: int | None,
) -> dict[str, Any]:
    """Settle time and rebalance count of one membership change that began at ``since``
    (the joining member's ``starting``), once the members report the new split at
    ``members_even``; waits :data:`TAIL` seconds first."""
    await asyncio.sleep(max(0.0, members_even + TAIL - time.monotonic()))
    t_settle = watch.settled_at(since, names, partitions, members_even)
    count, how = await rebalance_count(watch, since, time.monotonic(), generation_before)
    return {
        "settle_s": float("nan") if t_settle is None else t_settle - since,
        "rebalances": count,
        "rebalances_counted_as": how,
        "settle_from": "broker" if watch.reports_assignments() else "broker+members",
    }


async def open_watch(bootstrap: str, group: str, variant: str) -> tuple[GroupWatch, int | None]:
    """A running watch on ``group`` and the generation the broker recorded so far
    (None for a consumer-protocol group or a broker without the log)."""
    watch = await GroupWatch(
        bootstrap, group, "consumer" if variant == "kip848" else "classic"
    ).start()
    generation = None if watch.protocol == "consumer" else await watch.generation()
    # A few samples of the group as it was, so an epoch "before" exists.
    await asyncio.sleep(3 * watch.interval)
    return watch, generation
