"""A whole scripted cluster behind the client surface ``GroupConsumer`` uses.

The facade tests need one object that answers everything a started consumer asks
for: the group requests (``ScriptedBroker`` of the coordinator shell tests, which
this extends), Fetch and ListOffsets from in-memory partition logs, and the
metadata calls (``bootstrap``, ``fetch_all_metadata``, ``add_topic``).  It is
installed in place of aiokafka's ``AIOKafkaClient`` (the name ``consumer.py``
builds its client from), so the real fetcher and the real classic coordination
routine run against it and the test observes the facade's decisions, not a mock's.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable, Coroutine
from types import SimpleNamespace
from typing import Any, TypeVar

import pytest
from aiokafka.errors import OffsetOutOfRangeError
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from aiogroup.structs import TopicPartition
from tests.unit.test_coordinator_shell import FakeCluster, ScriptedBroker
from tests.unit.virtual_clock import run_virtual

T = TypeVar("T")

#: Timestamps of the scripted records: offset ``n`` was written at ``BASE_TS + n``.
BASE_TS = 1_000


def record_batch(base: int, values: list[bytes]) -> bytes:
    """A v2 record batch holding ``values`` from offset ``base`` on."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i, value in enumerate(values):
        builder.append(i, BASE_TS + base + i, b"k", value, [])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)  # the base offset is outside the CRC
    return bytes(data)


class PartitionLog:
    """One partition's records, as whole batches, from ``start`` to ``end``."""

    def __init__(self) -> None:
        self.start = 0
        self.end = 0
        self.batches: list[tuple[int, int, bytes]] = []  # (first, last, bytes)

    def append(self, count: int) -> None:
        values = [f"v{self.end + i}".encode() for i in range(count)]
        self.batches.append((self.end, self.end + count - 1, record_batch(self.end, values)))
        self.end += count

    def read(self, offset: int) -> bytes:
        return b"".join(data for _, last, data in self.batches if last >= offset)


class ScriptedCluster(FakeCluster):
    """The metadata view: every partition led by broker 0, no replica table."""

    def __init__(self) -> None:
        super().__init__()
        self._partitions: dict[str, dict[int, Any]] = {}  # the fetcher's replica view

    def leader_for_partition(self, tp: TopicPartition) -> int | None:
        parts = self.partitions_for_topic(tp.topic)
        return None if parts is None or tp.partition not in parts else 0

    def broker_metadata(self, node: int) -> object | None:
        return object() if node == 0 else None


class ScriptedClient(ScriptedBroker):
    """The classic group broker plus Fetch, ListOffsets and metadata, all in memory."""

    def __init__(self) -> None:
        super().__init__()
        self.cluster = ScriptedCluster()
        self.logs: dict[TopicPartition, PartitionLog] = {}
        #: Fetch answers wait (up to their max wait) for this after an empty read.
        self.appended = asyncio.Event()
        self.bootstrap_error: BaseException | None = None
        #: When set, bootstrap() waits for it (start() is "starting" until then).
        self.bootstrap_gate: asyncio.Event | None = None
        self.bootstraps = 0
        self.closed = 0
        self.metadata_fetches = 0
        #: Keyword arguments the consumer built its client with.
        self.options: dict[str, Any] = {}
        #: Requests of these APIs wait for their event before they are answered.
        self.held: dict[str, asyncio.Event] = {}
        #: How many requests of each held API are waiting now.
        self.holding: dict[str, int] = {}

    def log(self, tp: TopicPartition) -> PartitionLog:
        return self.logs.setdefault(tp, PartitionLog())

    def produce(self, tp: TopicPartition, count: int) -> None:
        """Append ``count`` records to ``tp`` and wake a waiting Fetch."""
        self.log(tp).append(count)
        self.appended.set()

    # -- the rest of the client surface ------------------------------------------------

    async def bootstrap(self) -> None:
        self.bootstraps += 1
        if self.bootstrap_gate is not None:  # a test holds start() in its connecting part
            await self.bootstrap_gate.wait()
        if self.bootstrap_error is not None:
            raise self.bootstrap_error

    async def close(self) -> None:
        self.closed += 1

    def add_topic(self, topic: str) -> asyncio.Future[bool]:
        return self.set_topics([*self.topics, topic])

    async def fetch_all_metadata(self) -> ScriptedCluster:
        self.metadata_fetches += 1
        return self.cluster

    async def send(self, node_id: int, request: Any, group: Any = None) -> Any:
        if isinstance(request, FetchRequest):
            return await self._fetch(request)
        if isinstance(request, OffsetRequest):
            return self._list_offsets(request)
        name = request.API.name
        if name in self.held:
            self.holding[name] = self.holding.get(name, 0) + 1
            try:
                await self.held[name].wait()
            finally:
                self.holding[name] -= 1
        return await super().send(node_id, request, group)

    async def _fetch(self, request: FetchRequest) -> Any:
        self.requests.append(("Fetch", {}, None))
        parts = [(topic, p, off) for topic, ps in request.topics for p, off, _ in ps]
        if all(self.log(TopicPartition(t, p)).end <= off for t, p, off in parts):
            # A broker's long poll: answer when records arrive or max_wait passes.
            self.appended.clear()
            try:
                await asyncio.wait_for(self.appended.wait(), request._max_wait_ms / 1000)
            except asyncio.TimeoutError:
                pass
        topics: dict[str, list[tuple[Any, ...]]] = {}
        for topic, p, off in parts:
            log = self.log(TopicPartition(topic, p))
            code = 0 if log.start <= off <= log.end else OffsetOutOfRangeError.errno
            data = log.read(off) if code == 0 else b""
            topics.setdefault(topic, []).append(
                (p, code, log.end, log.end, log.start, [], -1, data)
            )
        return SimpleNamespace(API_VERSION=11, topics=list(topics.items()))

    def _list_offsets(self, request: OffsetRequest) -> Any:
        self.requests.append(("ListOffsets", {}, None))
        topics = []
        for topic, ps in request._topics:
            answers = []
            for p, ts in ps:
                log = self.log(TopicPartition(topic, p))
                if ts == -2:
                    offset = log.start
                elif ts == -1:
                    offset = log.end
                else:  # the first record written at or after ts, else none (-1)
                    offset = next((o for o in range(log.start, log.end) if BASE_TS + o >= ts), -1)
                stamp = -1 if ts < 0 or offset < 0 else BASE_TS + offset
                answers.append((p, 0, stamp, offset))
            topics.append((topic, answers))
        return SimpleNamespace(API_VERSION=1, topics=topics)


def install(monkeypatch: pytest.MonkeyPatch, client: ScriptedClient) -> None:
    """Make ``GroupConsumer.start()`` build ``client`` instead of an AIOKafkaClient."""

    def build(**options: Any) -> ScriptedClient:
        client.options = options
        return client

    monkeypatch.setattr("aiogroup.consumer.AIOKafkaClient", build)


def virtual(scenario: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``scenario()`` on the virtual clock: timeouts and heartbeats pass at once."""
    return run_virtual(scenario())
