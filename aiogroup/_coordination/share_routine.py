"""The share-group (KIP-932) membership routine: performs what the share machine decides.

Shaped like :class:`~aiogroup._coordination.routine.CoordinationRoutine` - one inbox,
one routine task that is the machine's single writer, children that report back as
events, ``close`` bounded and shielded, ``abort`` as when a process dies - without
its commit surface, listeners and subscription board, which a share member does not
have (acknowledgements go to partition leaders, not to the coordinator; a share
assignment has no callbacks).  The machine is
:class:`~aiogroup._membership.share_group.ShareMembership`; here are only its
performers (:data:`_PERFORMERS`) and the wire calls - ShareGroupHeartbeat,
FindCoordinator, topic ids (Metadata) and the group's share session timeout
(DescribeConfigs).  What the machine decides about records (install an assignment,
drop every acquired record, the delivery gate) goes to the fetch side through
:class:`ShareMemberSink`.  Nothing is decided here.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from aiokafka.client import AIOKafkaClient, ConnectionGroup
from aiokafka.errors import IncompatibleBrokerVersion

from aiogroup._coordination.commit_client import failure_kind
from aiogroup._coordination.coordinator_lookup import look_up_coordinator
from aiogroup._membership import actions as A
from aiogroup._membership import events as E
from aiogroup._membership import share_group as sg
from aiogroup._membership.codes import ErrorCode, code_name
from aiogroup._protocol.consumer_group import TopicIdsRequest, parse_topic_ids
from aiogroup._protocol.group_configs import (
    parse_share_session_timeout,
    share_session_timeout_request,
)
from aiogroup._protocol.share import ShareGroupHeartbeatRequest, parse_share_group_heartbeat
from aiogroup._support.supervision import TaskScope
from aiogroup._support.timeouts import wait_for
from aiogroup.errors import IllegalStateError, KafkaError, error_for_code
from aiogroup.metrics import ConsumerMetrics

__all__ = ["ShareGroupRoutine", "ShareMemberSink"]

log = logging.getLogger("aiogroup.share")


class ShareMemberSink(Protocol):
    """Where the machine's decisions about records go (the share fetcher)."""

    def set_assignment(self, partitions: dict[tuple[str, int], uuid.UUID]) -> None:
        """Read these partitions (name -> topic id) from now on."""

    def drop_acquired(self, reason: str) -> None:
        """The membership ended: forget every acquired record, reopen sessions."""

    def set_membership_valid_until(self, deadline: float | None) -> None:
        """The delivery gate: no record is handed out past it (None: none at all)."""

    def report_error(self, exc: BaseException, *, fatal: bool) -> None:
        """The application's next poll raises ``exc``."""


class ShareGroupRoutine:
    """Keeps one share consumer in its share group: heartbeat, assignment, leave."""

    def __init__(
        self,
        client: AIOKafkaClient,
        group_id: str,
        sink: ShareMemberSink,
        *,
        rack_id: str | None,
        retry_backoff: float,
        retry_backoff_max: float,
        metrics: ConsumerMetrics,
    ) -> None:
        self._client = client
        self._group_id = group_id
        self._sink = sink
        self._rack_id = rack_id
        self.metrics = metrics
        # KIP-1082: the client names itself, once, and keeps the id across rejoins.
        self.machine = sg.ShareMembership(
            group_id,
            str(uuid.uuid4()),
            retry_backoff=retry_backoff,
            retry_backoff_max=retry_backoff_max,
            learn_session_timeout=True,
        )
        self._inbox: asyncio.Queue[Any] = asyncio.Queue()
        self._routine: asyncio.Task[None] | None = None
        self._children = TaskScope(lambda exc: self._inbox.put_nowait(_Crashed(exc)))
        self._node: int | None = None
        #: Set whenever the machine's state may have changed (start() waits on it).
        self.changed = asyncio.Event()

    @property
    def member_id(self) -> str:
        return self.machine.member_id

    @property
    def member_epoch(self) -> int:
        return self.machine.member_epoch

    # -- lifecycle --------------------------------------------------------------------

    async def start(self, topics: frozenset[str]) -> None:
        if self._routine is not None:
            raise IllegalStateError("ShareGroupRoutine.start() called twice")
        self._inbox.put_nowait(E.Subscribed(topics))
        name = f"aiogroup-share-{self._group_id}"
        self._routine = asyncio.get_running_loop().create_task(self._run(), name=name)

    def subscribe(self, topics: frozenset[str]) -> None:
        self._inbox.put_nowait(E.Subscribed(topics))

    async def close(self, *, timeout: float) -> None:
        """Leave the group (epoch -1), bounded by ``timeout``; shielded from cancellation."""
        routine = self._routine
        if routine is None or routine.done():
            await self._finish()
            return
        self._inbox.put_nowait(E.CloseRequested())
        try:
            await wait_for(asyncio.shield(routine), timeout)
        except asyncio.TimeoutError:
            log.warning(
                "share group %s: leaving did not finish within %.1fs; the session timeout "
                "will remove the member",
                self._group_id,
                timeout,
            )
        except Exception:
            pass  # reported already
        finally:
            await self._finish()

    async def abort(self) -> None:
        await self._finish()

    async def _finish(self) -> None:
        routine = self._routine
        if routine is not None and not routine.done():
            routine.cancel()
        if routine is not None:
            await asyncio.wait({routine})
        await self._children.aclose()

    # -- the routine ------------------------------------------------------------------

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        getter: asyncio.Task[Any] | None = None
        try:
            while not self.machine.finished:
                deadline = self.machine.next_deadline()
                timeout = None if deadline is None else max(0.0, deadline - loop.time())
                if getter is None:
                    getter = loop.create_task(self._inbox.get())
                done, _ = await asyncio.wait({getter}, timeout=timeout)
                if getter in done:
                    item, getter = getter.result(), None
                else:
                    item = E.TimerFired()
                if isinstance(item, _Crashed):
                    raise item.exc
                self._feed(item)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("share group %s: routine failed", self._group_id)
            message = f"share group coordination failed: {exc!r}"
            try:
                self._feed(E.RoutineFailed(message, KafkaError(message)))
            except Exception:
                self._sink.report_error(KafkaError(message), fatal=True)
            raise
        finally:
            if getter is not None:
                getter.cancel()
            await self._children.aclose()
            self.changed.set()

    def _feed(self, event: E.Event) -> None:
        now = asyncio.get_running_loop().time()
        for action in self.machine.handle(event, now):
            performer = _PERFORMERS.get(type(action))
            if performer is None:  # pragma: no cover - a new action without a performer
                raise TypeError(f"no performer for {action!r}")
            performer(self, action)
        self._sink.set_membership_valid_until(self.machine.membership_valid_until())
        self.changed.set()
        self.changed = asyncio.Event()

    # -- performers -------------------------------------------------------------------

    def _send_heartbeat(self, action: A.SendShareGroupHeartbeat) -> None:
        self._children.spawn(self._heartbeat(action), "ShareGroupHeartbeat")

    def _find(self, action: A.FindCoordinator) -> None:
        self._children.spawn(self._find_coordinator(), "FindCoordinator")

    def _set_assignment(self, action: A.SetAssignment) -> None:
        names = self.machine.names
        ids = {name: tid for tid, name in names.items()}
        parts = {tp: ids[tp[0]] for tp in action.partitions or () if tp[0] in ids}
        log.info(
            "share group %s: epoch %d reads %s",
            self._group_id,
            self.machine.member_epoch,
            sorted(parts) or "nothing",
        )
        if parts:
            self._client.set_topics(sorted({t for t, _ in parts}))
        self._sink.set_assignment(parts)

    def _drop(self, action: A.DropAcquiredRecords) -> None:
        self._sink.drop_acquired(action.reason)

    def _request_metadata(self, action: A.RequestMetadata) -> None:
        self._children.spawn(self._resolve_topic_ids(), "Metadata")

    def _lookup_session(self, action: A.LookupSessionTimeout) -> None:
        self._children.spawn(self._learn_session_timeout(), "DescribeConfigs")

    def _raise(self, action: A.RaiseToApplication) -> None:
        exc: BaseException
        if action.exception is not None:
            exc = action.exception
        elif action.error_code is not None and action.error_code > 0:
            exc = error_for_code(action.error_code)(action.message)
        else:
            exc = KafkaError(action.message)
        level = logging.ERROR if action.fatal else logging.WARNING
        log.log(level, "share group %s: %s", self._group_id, action.message)
        self._sink.report_error(exc, fatal=action.fatal)

    # -- requests (each a child task ending in one event) ------------------------------

    async def _find_coordinator(self) -> None:
        event = await look_up_coordinator(self._client, self._group_id, self.metrics)
        if isinstance(event, E.CoordinatorFound):
            self._node = event.node_id
        self._inbox.put_nowait(event)

    async def _heartbeat(self, action: A.SendShareGroupHeartbeat) -> None:
        event: E.Event
        request = ShareGroupHeartbeatRequest(
            self._group_id,
            action.member_id,
            action.member_epoch,
            rack_id=self._rack_id if action.member_epoch == sg.JOIN_EPOCH else None,
            subscribed_topic_names=action.subscribed_topic_names,
        )
        try:
            if self._node is None:
                raise KafkaError("coordinator unknown")
            resp = await self.metrics.timed_group_request(
                request,
                self._client.send(self._node, request, group=ConnectionGroup.COORDINATION),
            )
            r = parse_share_group_heartbeat(resp)
            if r.error_code == 0:
                self.metrics.last_heartbeat_ok = time.monotonic()
                log.debug(
                    "share group %s: heartbeat epoch %d answered: epoch %d, assignment %s",
                    self._group_id,
                    action.member_epoch,
                    r.member_epoch,
                    r.assignment,
                )
            else:
                log.debug(
                    "share group %s: heartbeat answered %s: %s",
                    self._group_id,
                    code_name(r.error_code),
                    r.error_message,
                )
            event = E.ShareGroupHeartbeatResponseReceived(
                r.error_code,
                r.member_epoch,
                r.heartbeat_interval_ms,
                r.member_id,
                r.assignment,
                r.error_message,
            )
        except IncompatibleBrokerVersion as exc:
            event = E.ShareGroupHeartbeatResponseReceived(
                ErrorCode.UNSUPPORTED_VERSION, error_message=str(exc)
            )
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            log.debug("share group %s: heartbeat failed: %r", self._group_id, exc)
            event = E.ShareGroupHeartbeatFailed(failure_kind(exc), action.member_epoch, repr(exc))
        self._inbox.put_nowait(event)

    async def _resolve_topic_ids(self) -> None:
        node = self._client.get_random_node()
        try:
            if node is None:
                raise KafkaError("no broker known")
            names = parse_topic_ids(await self._client.send(node, TopicIdsRequest(None)))
        except IncompatibleBrokerVersion as exc:
            self._inbox.put_nowait(E.BrokerIncompatible("Metadata", exc))
            return
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            self._inbox.put_nowait(E.TopicNamesLookupFailed(exc))
            return
        self._inbox.put_nowait(E.TopicNamesResolved(names))

    async def _learn_session_timeout(self) -> None:
        node = self._client.get_random_node()
        try:
            if node is None:
                raise KafkaError("no broker known")
            resp = await self._client.send(
                node, share_session_timeout_request(self._group_id, node)
            )
            ms = parse_share_session_timeout(resp)
        except (KafkaError, OSError, asyncio.TimeoutError) as exc:
            self._inbox.put_nowait(E.SessionTimeoutLookupFailed(exc))
            return
        self._inbox.put_nowait(E.SessionTimeoutLearned(ms or 0))


class _Crashed:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_PERFORMERS: dict[type[A.Action], Callable[[ShareGroupRoutine, Any], None]] = {
    A.SendShareGroupHeartbeat: ShareGroupRoutine._send_heartbeat,
    A.FindCoordinator: ShareGroupRoutine._find,
    A.SetAssignment: ShareGroupRoutine._set_assignment,
    A.DropAcquiredRecords: ShareGroupRoutine._drop,
    A.RequestMetadata: ShareGroupRoutine._request_metadata,
    A.LookupSessionTimeout: ShareGroupRoutine._lookup_session,
    A.RaiseToApplication: ShareGroupRoutine._raise,
}
assert set(_PERFORMERS) == sg.ACTION_TYPES
