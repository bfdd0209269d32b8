"""Wrappers that write a member's rebalance callbacks and its processing into a history.

Wrap the listener you already pass to ``subscribe()``; the wrapper records the
instant each callback starts (``assigned``, ``revoke_started``, ``lost``) and the
instant a revoke returns (``revoke_ended``), then calls yours.  The sync wrapper
stays sync, so aiogroup runs it exactly as it would run yours::

    history = HistoryRecorder("history.jsonl")
    me = history.member("worker-1")          # also the consumer's client_id
    consumer.subscribe([topic], listener=RecordingListener(me, MyListener()))
    ...
    batches = await consumer.getmany()
    for tp, records in batches.items():
        me.delivered(tp.topic, tp.partition, [r.offset for r in records])

With a :class:`~aiogroup.Processor`, wrap the handler instead of recording
deliveries: :func:`recording_handler` records each attempt's start and how it ended,
and :class:`CommitObserver` reads the group's committed offsets from outside, so the
checker can hold the processor to its processing rules::

    processor = Processor(consumer, recording_handler(me, handle), ordering="key")
    async with CommitObserver(bootstrap, group, history):
        ...
    check_history(load_history(path), ordering="key").assert_clean()
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.errors import KafkaConnectionError

from aiogroup._protocol.group import OffsetFetchRequest, parse_offset_fetch
from aiogroup._support.bootstrap_errors import explain_bootstrap_failure
from aiogroup._support.client_security import check_security_options
from aiogroup._support.redaction import install_log_redaction
from aiogroup._support.timeouts import wait_for
from aiogroup.errors import error_for_code
from aiogroup.listeners import (
    AsyncConsumerRebalanceListener,
    ConsumerRebalanceListener,
    StartOffsets,
)
from aiogroup.structs import TopicPartition
from aiogroup.testing.history import Commit, HistoryRecorder, MemberRecorder

__all__ = [
    "CommitObserver",
    "RecordingListener",
    "RecordingSyncListener",
    "fetch_committed",
    "record_commits",
    "recording_handler",
]

log = logging.getLogger(__name__)
R = TypeVar("R")


class RecordingListener(AsyncConsumerRebalanceListener):
    """An ``async`` listener that records around ``inner`` (default: one that does nothing)."""

    def __init__(
        self, member: MemberRecorder, inner: AsyncConsumerRebalanceListener | None = None
    ) -> None:
        self.member = member
        self.inner = inner or AsyncConsumerRebalanceListener()

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.member.revoke_started(revoked)
        try:
            await self.inner.on_partitions_revoked(revoked)
        finally:
            self.member.revoke_ended(revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> StartOffsets:
        self.member.assigned(assigned)
        return await self.inner.on_partitions_assigned(assigned)

    async def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.member.lost(lost)
        await self.inner.on_partitions_lost(lost)


class RecordingSyncListener(ConsumerRebalanceListener):
    """The same for a plain (sync) listener."""

    def __init__(
        self, member: MemberRecorder, inner: ConsumerRebalanceListener | None = None
    ) -> None:
        self.member = member
        self.inner = inner or ConsumerRebalanceListener()

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.member.revoke_started(revoked)
        try:
            self.inner.on_partitions_revoked(revoked)
        finally:
            self.member.revoke_ended(revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> StartOffsets:
        self.member.assigned(assigned)
        return self.inner.on_partitions_assigned(assigned)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.member.lost(lost)
        self.inner.on_partitions_lost(lost)


def recording_handler(
    member: MemberRecorder,
    handler: Callable[[Any], R],
    *,
    dead_letter_after: int | None = None,
) -> Callable[[Any], R]:
    """``handler`` with every attempt recorded: "started", then "finished" when it
    returns, or "abandoned" (cancelled, or the exception) when it does not.

    A sync handler stays sync (the processor runs it in its thread pool, as it would
    run yours).  ``dead_letter_after``: the processor's retry attempts when its
    ``on_failure`` is a dead-letter topic; the attempt that fails for the n-th time
    records the record "finished" as dead-lettered, as the processor counts it.
    """
    if not callable(handler):
        raise TypeError(f"handler must be callable, got {handler!r}")
    if dead_letter_after is not None and dead_letter_after < 1:
        raise ValueError(f"dead_letter_after must be at least 1, got {dead_letter_after!r}")
    failures: dict[tuple[str, int, int], int] = {}

    def where(record: Any) -> tuple[str, int, int, object]:
        return record.topic, record.partition, record.offset, getattr(record, "key", None)

    def failed(record: Any, exc: BaseException) -> None:
        topic, partition, offset, key = where(record)
        member.abandoned(topic, partition, offset, key, detail=repr(exc)[:200])
        n = failures[(topic, partition, offset)] = failures.get((topic, partition, offset), 0) + 1
        if dead_letter_after is not None and n >= dead_letter_after:
            member.finished(topic, partition, offset, key, detail=f"dead-lettered after {n}")

    if inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - an object with async __call__
    ):

        @functools.wraps(handler)
        async def recorded(record: Any) -> Any:
            topic, partition, offset, key = where(record)
            member.started(topic, partition, offset, key)
            try:
                result = await handler(record)  # type: ignore[misc]
            except asyncio.CancelledError:
                member.abandoned(topic, partition, offset, key, detail="cancelled")
                raise
            except BaseException as exc:
                failed(record, exc)
                raise
            member.finished(topic, partition, offset, key)
            return result

        return recorded  # type: ignore[return-value]

    @functools.wraps(handler)
    def recorded_sync(record: Any) -> R:
        topic, partition, offset, key = where(record)
        member.started(topic, partition, offset, key)
        try:
            result = handler(record)
        except BaseException as exc:
            failed(record, exc)
            raise
        member.finished(topic, partition, offset, key)
        return result

    return recorded_sync


def record_commits(consumer: Any, member: MemberRecorder) -> None:
    """Record every commit ``consumer`` makes that the broker accepts, stamped with
    when it was sent (wraps the instance's ``commit``): the commits a processor makes
    on its own, which the checker then judges from the moment they left."""
    commit = consumer.commit

    @functools.wraps(commit)
    async def recorded(offsets: Any = None, *args: Any, **kwargs: Any) -> Any:
        sent = member.recorder.now()
        result = await commit(offsets, *args, **kwargs)
        if offsets is not None:
            given = dict(offsets)
            rows = {tp: getattr(o, "offset", o) for tp, o in given.items()}
            metadata = {tp: str(getattr(o, "metadata", "") or "") for tp, o in given.items()}
            member.committed(rows, sent_at=sent, metadata=metadata)
        return result

    consumer.commit = recorded


async def fetch_committed(client: AIOKafkaClient, group: str) -> dict[tuple[str, int], int]:
    """Every committed offset of ``group``, asked of its coordinator (OffsetFetch for all
    partitions; aiogroup's request class, which both test brokers answer)."""
    node = await client.coordinator_lookup(CoordinationType.GROUP, group)
    result = parse_offset_fetch(await client.send(node, OffsetFetchRequest(group, None)))
    if result.error_code:
        raise error_for_code(result.error_code)(f"OffsetFetch for group {group!r}")
    return {tp: row[0] for tp, row in result.partitions.items() if row[0] >= 0 and not row[3]}


class CommitObserver:
    """Reads a group's committed offsets from outside every member (OffsetFetch over
    its own connection) every ``interval`` seconds, and records each change as a
    "broker_committed" event - the commits the checker judges as the broker saw them.

    ``async with CommitObserver(bootstrap, group, recorder):`` - leaving takes a last read.
    On a secure cluster pass the members' security options (``security_protocol``,
    ``ssl_context``, ``sasl_*``, as ``GroupConsumer`` takes them); the principal needs
    DESCRIBE on the group.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        group: str,
        recorder: HistoryRecorder,
        *,
        interval: float = 0.1,
        **security: Any,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval must be positive, got {interval!r}")
        self._security = check_security_options("CommitObserver", security)
        self.bootstrap_servers = bootstrap_servers
        self.group = group
        self.recorder = recorder
        self.interval = interval
        self.reads = 0
        self.failures = 0
        self.last: dict[tuple[str, int], int] = {}
        self._client: AIOKafkaClient | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> CommitObserver:
        install_log_redaction()
        self._client = AIOKafkaClient(
            bootstrap_servers=self.bootstrap_servers,
            client_id="aiogroup-commit-observer",
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
        self._task = asyncio.create_task(self._run(), name=f"observe-commits-{self.group}")
        return self

    async def read(self) -> dict[tuple[str, int], int]:
        """One read: record what changed, and return the committed offsets."""
        assert self._client is not None, "CommitObserver.start() first"
        now = await wait_for(fetch_committed(self._client, self.group), timeout=10.0)
        changed: list[Commit] = [
            (t, p, o) for (t, p), o in now.items() if self.last.get((t, p)) != o
        ]
        if changed:
            self.recorder.broker_committed(changed)
        self.last.update(now)
        self.reads += 1
        return dict(self.last)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self.read()
            await self._client.close()
            self._client = None

    async def __aenter__(self) -> CommitObserver:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _run(self) -> None:
        while True:
            try:
                await self.read()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the next read tries again
                self.failures += 1
                log.debug("OffsetFetch for %s failed: %r", self.group, exc)
            await asyncio.sleep(self.interval)
