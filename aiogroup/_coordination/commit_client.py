"""The commit / offset-fetch client: sends, waits and raises what ``offset_request`` decides.

One performer serves both group protocols.  What differs between them - which
request a commit is (group commit under the generation or member epoch, or a
"simple" commit for user-assigned partitions), how the coordinator is awaited, what
the machine is told - is the shell's, behind :class:`CommitPort`; what an answer
means is :mod:`aiogroup._coordination.commit_outcome`'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from aiokafka.errors import IncompatibleBrokerVersion, KafkaTimeoutError, RequestTimedOutError

from aiogroup._coordination.commit_outcome import (
    CommitRules,
    commit_verdict,
    fetch_verdict,
    positions_to_commit,
)
from aiogroup._coordination.offset_request import (
    AwaitEpoch,
    Done,
    Fail,
    OffsetRequest,
    Step,
)
from aiogroup._membership.backoff import RetryPolicy
from aiogroup._protocol.group import parse_offset_commit, parse_offset_fetch
from aiogroup._state.subscription import FetchStatus, SubscriptionState
from aiogroup.errors import KafkaError
from aiogroup.structs import OffsetAndMetadata, TopicPartition

__all__ = ["CommitClient", "CommitPort", "auto_commit", "failure_kind", "refresh_committed"]

log = logging.getLogger("aiogroup.coordinator")

Offsets = dict[TopicPartition, OffsetAndMetadata]
Committed = dict[TopicPartition, OffsetAndMetadata | None]


def failure_kind(exc: BaseException) -> str:
    """How a request without an answer failed, as the machines' ``…Failed`` events say it."""
    if isinstance(exc, RequestTimedOutError | KafkaTimeoutError | asyncio.TimeoutError):
        return "timeout"
    return "connection"


class CommitPort(Protocol):
    """What a coordination shell lends the commit client."""

    def check_running(self) -> None:
        """Raise when the routine has ended (a commit must not wait forever)."""

    async def coordinator_node(self) -> int:
        """The coordinator's node id, once known."""

    def commit_request(self, offsets: Offsets) -> tuple[Any, int]:
        """The OffsetCommit request and the generation (epoch) it commits under;
        raises CommitFailedError when the machine refuses."""

    def fetch_request(self, partitions: list[TopicPartition]) -> Any:
        """The OffsetFetch request."""

    async def send(self, node: int, request: Any) -> Any:
        """Send on the coordination connection (timed)."""

    def next_epoch(self) -> Callable[[], Awaitable[None]]:
        """Taken before a send: awaits the member epoch the next heartbeat brings."""

    def commit_answered(self, result: Any, generation: int) -> None:
        """Tell the machine an OffsetCommit answer arrived."""

    def offsets_request_failed(self, api: str, kind: str, generation: int, detail: str) -> None:
        """Tell the machine a commit or fetch got no answer (or the coordinator moved)."""


class CommitClient:
    """Commit and fetch committed offsets for one group; performs what
    :class:`~aiogroup._coordination.offset_request.OffsetRequest` decides."""

    def __init__(self, port: CommitPort, group_id: str, retry_backoff: float) -> None:
        self._port = port
        self._group_id = group_id
        self._policy = RetryPolicy.from_backoff(retry_backoff)

    async def commit(self, offsets: Offsets, rules: CommitRules) -> None:
        port = self._port
        op = OffsetRequest(
            "OffsetCommit", self._group_id, {tp.topic for tp in offsets}, self._policy
        )
        while True:
            port.check_running()
            request, generation = port.commit_request(offsets)
            node = await port.coordinator_node()
            epoch = port.next_epoch()
            try:
                resp = await port.send(node, request)
            except IncompatibleBrokerVersion:
                raise
            except (KafkaError, OSError) as exc:
                log.debug("group %s: OffsetCommit failed: %r", self._group_id, exc)
                port.offsets_request_failed(
                    "OffsetCommit", failure_kind(exc), generation, repr(exc)
                )
                step = op.unanswered()
            else:
                result = parse_offset_commit(resp)
                port.commit_answered(result, generation)
                verdict = commit_verdict(result, rules)
                if verdict.coordinator_moved:
                    port.offsets_request_failed("OffsetCommit", "coordinator", generation, "")
                step = op.answered(verdict)
            if await _perform(step, epoch) is not None:
                log.debug("group %s: committed %s", self._group_id, offsets)
                return

    async def fetch(self, partitions: list[TopicPartition], rules: CommitRules) -> Committed:
        port = self._port
        op = OffsetRequest(
            "OffsetFetch", self._group_id, {tp.topic for tp in partitions}, self._policy
        )
        while True:
            port.check_running()
            request = port.fetch_request(partitions)
            node = await port.coordinator_node()
            epoch = port.next_epoch()
            try:
                resp = await port.send(node, request)
            except IncompatibleBrokerVersion:
                raise
            except (KafkaError, OSError) as exc:
                port.offsets_request_failed("OffsetFetch", failure_kind(exc), -1, repr(exc))
                step = op.unanswered()
            else:
                parsed = parse_offset_fetch(resp)
                verdict = fetch_verdict(parsed, partitions, self._group_id, rules)
                if verdict.coordinator_moved:
                    port.offsets_request_failed("OffsetFetch", "coordinator", -1, "")
                step = op.answered(verdict)
            done = await _perform(step, epoch)
            if done is not None:
                return done.offsets


async def _perform(step: Step, epoch: Callable[[], Awaitable[None]]) -> Done | None:
    """Carry out ``step``: the result when done, None once the next try is due."""
    if isinstance(step, Done):
        return step
    if isinstance(step, Fail):
        raise step.error
    if isinstance(step, AwaitEpoch):
        await epoch()
    else:
        await asyncio.sleep(step.delay)
    return None


async def auto_commit(
    sub: SubscriptionState,
    partitions: Iterable[TopicPartition] | None,
    why: str,
    commit: Callable[[Mapping[TopicPartition, OffsetAndMetadata]], Awaitable[None]],
    group_id: str,
) -> None:
    """Commit the positions of ``partitions`` (None: all assigned); failures are logged only."""
    assignment = sub.assignment
    if assignment is None:
        return
    offsets = positions_to_commit(assignment.states(), partitions, revoking=False)
    if not offsets:
        return
    try:
        await commit(offsets)
        log.debug("group %s: auto-committed %s (%s)", group_id, offsets, why)
    except (KafkaError, asyncio.TimeoutError) as exc:
        log.warning("group %s: auto-commit %s failed: %r", group_id, why, exc)


async def refresh_committed(
    sub: SubscriptionState,
    fetch: Callable[[list[TopicPartition]], Awaitable[Committed]],
    failed: Callable[[BaseException], None],
) -> None:
    """Give partitions awaiting their committed offset a position (or hand them to reset).

    Runs for the routine's lifetime, woken by ``commit_refresh_needed`` (a new
    assignment, a seek to committed, or the machine's RefreshCommittedOffsets).  A
    failed lookup (its own tries spent within ``request_timeout_ms``, or a fatal
    answer) is handed to ``failed``: the machine decides whether the application
    hears of it and when to ask again.
    """
    while not sub.closed:
        await sub.commit_refresh_needed.wait()
        sub.commit_refresh_needed.clear()
        assignment = sub.assignment
        if sub.closed or assignment is None:
            continue
        tps = assignment.needing_committed()
        if not tps:
            continue
        try:
            committed = await fetch(tps)
        except (KafkaError, asyncio.TimeoutError) as exc:
            log.debug("committed-offset lookup failed: %r", exc)
            failed(exc)
            continue
        for tp, oam in committed.items():
            st = assignment.get(tp)
            if st is None or st.status is not FetchStatus.AWAITING_COMMITTED:
                continue  # moved on meanwhile (seek, new assignment)
            if oam is not None:
                st.seek(oam.offset)
            else:
                st.await_reset()
        if sub.assignment is not assignment:
            sub.request_commit_refresh()
