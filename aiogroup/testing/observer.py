"""The broker's view of a group, sampled from outside every member.

A member cannot be trusted to say that it was evicted: the defect this module was
written to catch (issue 12) is a member that was dropped by the broker and never
noticed.  :class:`GroupObserver` asks the group coordinator itself (DescribeGroups,
over its own bare aiokafka connection; ConsumerGroupDescribe for a KIP-848 group,
``protocol="consumer"``; whichever answers, for a group migrated online between the two,
``protocol="auto"``) every ``interval`` seconds which members the group has and
what each was assigned, and writes what changed into a
:class:`~aiogroup.testing.history.HistoryRecorder`:

* ``joined`` when a member id appears (``detail`` is the id),
* ``gone`` when it disappears - a fence, unless the member recorded ``leaving``
  first - with ``since`` = the send time of the last sample that still showed it
  and ``t`` = the arrival of the first that did not, so the real moment lies in
  ``[since, t]``.  An absence counts once a second sample confirms it (or the
  member's name comes back under another id): during a coordinator failover a node
  can answer one sample with the group but without its members, and the next shows
  them again under the same ids - no fence happened, as the broker's generation
  says.  Such a transient absence is counted (``transient_absences``) and logged,
* ``broker_assignment`` when a member's assignment changes in a Stable group,
* ``group_state`` (member :data:`~aiogroup.testing.history.GROUP`) when the group's
  state - or, for a KIP-848 group, its epoch (``detail`` "Stable epoch=7") - changes:
  the rebalances the broker ran, counted by
  :func:`~aiogroup.testing.history.broker_rebalances`.

On a secure cluster give the observer the members' own security options
(``security_protocol``, ``ssl_context``, ``sasl_*``: the keyword arguments
``GroupConsumer`` takes), so it judges the group over the listener the members use:
``GroupObserver(bootstrap, group, recorder, **cluster.client_options("admin"))``.  Its
principal needs DESCRIBE on the group (and on the topics, for KIP-848 assignments).

Members are named by their ``client_id`` (give every member the name it records
under as its client id).  Brokers that leave the client id out of DescribeGroups
(the embedded Tansu broker does) still build the member id the Kafka way,
``<client id>-<uuid>``, so the name is read from it.  A failed sample is retried
and never read as "gone".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import KafkaConnectionError
from aiokafka.protocol.admin import DescribeGroupsRequest

from aiogroup._protocol.classic_embedded import decode_assignment
from aiogroup._protocol.consumer_group import (
    ConsumerGroupDescribeRequest,
    parse_consumer_group_describe,
)
from aiogroup._support.bootstrap_errors import explain_bootstrap_failure
from aiogroup._support.client_security import check_security_options
from aiogroup._support.redaction import install_log_redaction
from aiogroup._support.timeouts import wait_for
from aiogroup.errors import MalformedProtocolDataError
from aiogroup.testing.history import GROUP, HistoryRecorder, Partition

__all__ = ["GroupObserver", "GroupSample", "describe_consumer_group", "describe_group"]

log = logging.getLogger(__name__)

_MEMBER_ID = re.compile(
    r"^(?P<client>.+)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)


def member_name(client_id: str, member_id: str) -> str:
    """The client id, or else the client id a Kafka-style member id starts with."""
    if client_id:
        return client_id
    match = _MEMBER_ID.match(member_id)
    return match.group("client") if match else member_id


@dataclass(frozen=True)
class GroupSample:
    """One DescribeGroups answer: the group state and its members by client id."""

    state: str
    #: client id -> (member id, assigned partitions)
    members: dict[str, tuple[str, tuple[Partition, ...]]]
    #: KIP-848: the group epoch (bumped once per membership change); None for classic.
    epoch: int | None = None
    #: The node that answered (for the log when a sample surprises).
    node: int | None = None


async def describe_group(client: AIOKafkaClient, group: str) -> GroupSample:
    """Ask the group's coordinator for its members and their assignments."""
    node = await client.coordinator_lookup(CoordinationType.GROUP, group)
    response: Any = await client.send(node, DescribeGroupsRequest([group]))
    groups = response.groups
    if not groups:
        raise RuntimeError(f"DescribeGroups answered no group for {group!r}")
    error_code, _group_id, state, _ptype, _protocol, raw_members = groups[0][:6]
    if error_code:
        raise RuntimeError(f"DescribeGroups for {group!r} failed with error code {error_code}")
    members: dict[str, tuple[str, tuple[Partition, ...]]] = {}
    for entry in raw_members:
        member_id, client_id = entry[0], entry[1]
        assignment_bytes = entry[-1]
        try:
            parts = decode_assignment(bytes(assignment_bytes or b"")).partitions
        except MalformedProtocolDataError:
            parts = ()
        members[member_name(str(client_id or ""), str(member_id))] = (
            str(member_id),
            tuple(sorted((tp.topic, tp.partition) for tp in parts)),
        )
    return GroupSample(str(state), members, node=int(node))


async def describe_consumer_group(client: AIOKafkaClient, group: str) -> GroupSample:
    """The same view of a KIP-848 group: DescribeGroups does not describe it (Kafka
    answers a consumer-protocol group as Dead there), ConsumerGroupDescribe does.
    Each member's assignment is what the coordinator says it owns now."""
    node = await client.coordinator_lookup(CoordinationType.GROUP, group)
    described = parse_consumer_group_describe(
        await client.send(node, ConsumerGroupDescribeRequest(group))
    )
    if described.error_code:
        raise RuntimeError(
            f"ConsumerGroupDescribe for {group!r} failed with error code {described.error_code}"
        )
    members = {
        member_name(m.client_id, m.member_id): (m.member_id, tuple(sorted(m.assignment)))
        for m in described.members
    }
    return GroupSample(described.group_state, members, described.group_epoch, node=int(node))


async def describe_any_group(client: AIOKafkaClient, group: str) -> GroupSample:
    """Whichever protocol the group speaks now - for a group being migrated online.

    Kafka converts a classic group into a consumer-protocol group when the first
    KIP-848 member joins it (and back, with the ``bidirectional`` migration policy,
    when the last one leaves); DescribeGroups then answers Dead (or an error) and
    ConsumerGroupDescribe describes the group, classic members included.  A group
    neither call knows is sampled as Dead.
    """
    try:
        sample = await describe_group(client, group)
    except RuntimeError:
        sample = GroupSample("Dead", {})
    if sample.state != "Dead":
        return sample
    try:
        return await describe_consumer_group(client, group)
    except RuntimeError:  # GROUP_ID_NOT_FOUND: no consumer-protocol group either
        return sample


_DESCRIBERS = {
    "classic": describe_group,
    "consumer": describe_consumer_group,
    "auto": describe_any_group,
}


class GroupObserver:
    """Samples a group's membership from the broker into a history (see module doc).

    ``async with GroupObserver(bootstrap, group, recorder):`` - or ``start()``/``stop()``.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        group: str,
        recorder: HistoryRecorder,
        *,
        interval: float = 0.1,
        request_timeout_ms: int = 5000,
        protocol: str = "classic",
        **security: Any,
    ) -> None:
        """``security``: the connection options ``GroupConsumer`` takes (see module doc)."""
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval!r}")
        if protocol not in _DESCRIBERS:
            raise ValueError(f"protocol must be 'classic', 'consumer' or 'auto', got {protocol!r}")
        self._security = check_security_options("GroupObserver", security)
        self._describe = _DESCRIBERS[protocol]
        self.bootstrap_servers = bootstrap_servers
        self.group = group
        self.recorder = recorder
        self.interval = interval
        self.samples = 0
        self.failures = 0
        self._request_timeout_ms = request_timeout_ms
        self._client: AIOKafkaClient | None = None
        self._task: asyncio.Task[None] | None = None
        self._sampled = asyncio.Event()
        self._last_state: str | None = None
        #: name -> (member id, last seen, arrival of the first sample without it, state
        #: of that sample): absences waiting for the next sample to confirm them.
        self._absent: dict[str, tuple[str, float, float, str]] = {}
        #: client id -> (member id, assignment, send time of the last sample showing it)
        self._known: dict[str, tuple[str, tuple[Partition, ...], float]] = {}
        #: Absences the next sample disproved (the same member id was back).
        self.transient_absences = 0
        #: The sample before the one being applied (for the log).
        self._previous: GroupSample | None = None

    async def start(self) -> GroupObserver:
        install_log_redaction()  # aiokafka's DEBUG log prints SASL bytes otherwise
        self._client = AIOKafkaClient(
            bootstrap_servers=self.bootstrap_servers,
            client_id="aiogroup-observer",
            request_timeout_ms=self._request_timeout_ms,
            **self._security,
        )
        try:
            await self._client.bootstrap()
        except KafkaConnectionError as exc:  # "Unable to bootstrap": say why
            await self._client.close()
            self._client = None
            raise await explain_bootstrap_failure(
                self.bootstrap_servers, self._security, exc
            ) from exc
        self._task = asyncio.create_task(self._run(), name=f"observe-{self.group}")
        return self

    async def sampled(self, timeout: float = 30.0) -> None:
        """Until the next successful sample has been recorded (bounded by ``timeout``)."""
        self._sampled.clear()
        await wait_for(self._sampled.wait(), timeout)

    async def stop(self) -> None:
        """One last sample (so a leave just before the end is seen), then close."""
        if self._task is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await self.sampled(timeout=max(2.0, 5 * self.interval))
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            self._flush_absences(self._known)
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def __aenter__(self) -> GroupObserver:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _confirm(self, sample: GroupSample) -> list[tuple[str, tuple[str, float, float]]]:
        """Absences of the sample before, settled by this one: those still absent (or
        back under another id) are returned as gone; those back under the same id
        were a transient gap in the coordinator's answer, and are dropped."""
        gone: list[tuple[str, tuple[str, float, float]]] = []
        for name, (member_id, last_seen, first_absent_at, state) in list(self._absent.items()):
            del self._absent[name]
            now = sample.members.get(name)
            if now is not None and now[0] == member_id:
                self.transient_absences += 1
                log.warning(
                    "group %s: %s (%s) was missing from one %s sample and is back under "
                    "the same id: not a fence",
                    self.group,
                    name,
                    member_id,
                    state,
                )
                continue
            log.debug(
                "group %s: %s (%s) missing from two samples in a row (%s from node %s, then "
                "%s from node %s with members %s): counted as gone",
                self.group,
                name,
                member_id,
                state,
                self._previous.node if self._previous else None,
                sample.state,
                sample.node,
                {n: m for n, (m, _) in sample.members.items()},
            )
            gone.append((name, (member_id, last_seen, first_absent_at)))
        return gone

    def _flush_absences(self, known: dict[str, tuple[str, tuple[Partition, ...], float]]) -> None:
        """At the end no sample can confirm an absence any more: each counts as gone."""
        for name, (member_id, last_seen, first_absent_at, _state) in self._absent.items():
            self.recorder.add(name, "gone", t=first_absent_at, since=last_seen, detail=member_id)
            known.pop(name, None)
        self._absent.clear()

    async def _run(self) -> None:
        assert self._client is not None
        # client id -> (member id, assignment, send time of the last sample showing it)
        known = self._known
        while True:
            sent = time.monotonic()
            try:
                sample = await self._describe(self._client, self.group)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the next sample tries again; a gap is not a "gone"
                self.failures += 1
                log.debug("DescribeGroups for %s failed: %r", self.group, exc)
                await asyncio.sleep(self.interval)
                continue
            arrived = time.monotonic()
            if sample.state == "Dead":
                # The answering coordinator does not hold the group (yet): during a
                # coordinator failover a node can answer before it loaded the group.  A
                # live group with members is never Dead, so this is a gap, not "gone".
                self.failures += 1
                await asyncio.sleep(self.interval)
                continue
            self.samples += 1
            self._apply(known, sample, sent, arrived)
            self._sampled.set()
            await asyncio.sleep(max(0.0, self.interval - (arrived - sent)))

    def _apply(
        self,
        known: dict[str, tuple[str, tuple[Partition, ...], float]],
        sample: GroupSample,
        sent: float,
        arrived: float,
    ) -> None:
        rec = self.recorder
        state = sample.state if sample.epoch is None else f"{sample.state} epoch={sample.epoch}"
        if state != self._last_state:
            rec.add(GROUP, "group_state", t=arrived, detail=state)
            self._last_state = state
        for name, (member_id, last_seen, first_absent_at) in self._confirm(sample):
            rec.add(name, "gone", t=first_absent_at, since=last_seen, detail=member_id)
            known.pop(name, None)
        for name, (member_id, _parts, last_seen) in list(known.items()):
            now = sample.members.get(name)
            if name in self._absent:
                continue
            if now is None:
                self._absent[name] = (member_id, last_seen, arrived, sample.state)
            elif now[0] != member_id:  # a new id under the name: the old one is surely gone
                rec.add(name, "gone", t=arrived, since=last_seen, detail=member_id)
                del known[name]
        for name, (member_id, parts) in sample.members.items():
            if name in self._absent:
                continue  # absent in the sample before, present now: see _confirm
            previous = known.get(name)
            if previous is None:
                rec.add(name, "joined", t=arrived, detail=member_id)
                previous = (member_id, (), sent)
            if sample.state == "Stable" and parts != previous[1]:
                rec.add(name, "broker_assignment", t=arrived, partitions=parts)
                previous = (member_id, parts, sent)
            known[name] = (member_id, previous[1], sent)
        self._previous = sample
