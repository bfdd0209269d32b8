"""The one interface every benchmarked client is driven through.

A new client is one module defining a subclass of :class:`Adapter` and a
``VARIANTS`` table; the scenarios never import a client library themselves.  The
interface is asynchronous because most clients are; synchronous clients run each
blocking call in a worker thread, which is how an asyncio application would use
them, and run their hot loops (``drain``) entirely in one thread so that the
thread hop is not charged per batch.
"""

from __future__ import annotations

import abc
import asyncio
import importlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar


class NotAvailable(RuntimeError):
    """The client cannot run here (not installed, or its API is not written yet)."""


@dataclass(frozen=True)
class Variant:
    """One configuration of a client: its label, why it is chosen and its options."""

    name: str
    description: str
    options: dict[str, Any] = field(default_factory=dict)
    columnar: bool = False
    #: Environment the worker process starts with (read before the interpreter runs,
    #: as glibc's MALLOC_* tunables are), on top of the harness's own.
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Polled:
    """What one poll delivered: counts, and per partition the first and last offset."""

    count: int = 0
    nbytes: int = 0
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)


AsyncCommit = Callable[[dict[int, int]], Awaitable[None]]
SyncCommit = Callable[[dict[int, int]], None]


@dataclass
class Hooks:
    """Rebalance callbacks a member process wants; the adapter adapts them to its client.

    ``event(kind, partitions, detail)`` is called as soon as the client reports the
    event ("assigned", "revoked", "lost").  On revoke the member commits what it has
    read from the revoked partitions (the usual commit-on-revoke, through the
    client's own commit inside its callback), then spends ``revoke_delay`` seconds
    there, the way a slow application flush would.
    """

    event: Callable[[str, list[int], str], None]
    revoke_delay: float = 0.0
    #: partition -> next offset to read, kept by the member loop; committed on revoke.
    positions: dict[int, int] = field(default_factory=dict)

    def revoked_offsets(self, partitions: list[int]) -> dict[int, int]:
        return {p: self.positions[p] for p in partitions if p in self.positions}

    def forget(self, partitions: list[int]) -> None:
        for p in partitions:
            self.positions.pop(p, None)

    async def on_async(
        self, kind: str, partitions: list[int], commit: AsyncCommit | None = None
    ) -> None:
        self.event(kind, partitions, "")
        if kind == "revoked":
            offsets = self.revoked_offsets(partitions)
            if commit is not None and offsets:
                try:
                    await commit(offsets)
                except Exception as exc:
                    self.event("commit_error", partitions, f"{type(exc).__name__}: {exc}")
            self.forget(partitions)
            if self.revoke_delay > 0:
                await asyncio.sleep(self.revoke_delay)
                self.event("revoke_done", partitions, "")
        elif kind == "lost":
            self.forget(partitions)

    def on_sync(self, kind: str, partitions: list[int], commit: SyncCommit | None = None) -> None:
        self.event(kind, partitions, "")
        if kind == "revoked":
            offsets = self.revoked_offsets(partitions)
            if commit is not None and offsets:
                try:
                    commit(offsets)
                except Exception as exc:
                    self.event("commit_error", partitions, f"{type(exc).__name__}: {exc}")
            self.forget(partitions)
            if self.revoke_delay > 0:
                time.sleep(self.revoke_delay)
                self.event("revoke_done", partitions, "")
        elif kind == "lost":
            self.forget(partitions)


class Adapter(abc.ABC):
    """A consumer of one client library in one configuration."""

    client: ClassVar[str]
    supports_cooperative: ClassVar[bool] = False
    #: What bounds the memory a stalled consumer may buffer, for the memory table.
    buffer_bound: ClassVar[str] = ""
    #: The client's modules, imported by ``preload`` so that memory baselines include them.
    imports: ClassVar[tuple[str, ...]] = ()

    def describe_bound(self) -> str:
        """``buffer_bound`` for this configuration (a variant may change the bound)."""
        return self.buffer_bound

    def preload(self) -> None:
        """Import what the client will use, so no timed span pays a first import."""
        modules = self.imports
        if self.variant.columnar:
            modules += ("pyarrow", "pyarrow.compute", "numpy")
        for module in modules:
            importlib.import_module(module)

    def __init__(self, bootstrap_servers: str, variant: Variant) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.variant = variant

    @property
    def label(self) -> str:
        return f"{self.client}/{self.variant.name}"

    @abc.abstractmethod
    async def assign(self, topic: str, partitions: list[int], group_id: str | None = None) -> None:
        """Consume ``partitions`` from their first offset without group management."""

    @abc.abstractmethod
    async def subscribe(
        self,
        topic: str,
        group_id: str,
        hooks: Hooks,
        *,
        cooperative: bool,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        client_id: str | None = None,
    ) -> None:
        """Join ``group_id`` for ``topic``, from the earliest offset when nothing is committed.

        ``client_id`` names the member to the broker (an outside observer tells members
        apart by it); None keeps the client's default."""

    @abc.abstractmethod
    async def poll(
        self, timeout: float, *, track: bool = False, max_records: int | None = None
    ) -> Polled:
        """One batch (at most ``max_records``, else the client's usual batch); ``track``
        also fills ``Polled.ranges`` (costs a little, so optional)."""

    @abc.abstractmethod
    async def commit(self, topic: str, offsets: dict[int, int]) -> None:
        """Commit ``offsets`` (partition -> next offset to read) and await the broker's answer."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Leave the group (if any) cleanly and release everything."""

    async def drain(self, records: int, timeout: float) -> tuple[int, int]:
        """Consume until ``records`` have arrived; return (records, value bytes).

        Raises TimeoutError if the target is not reached within ``timeout`` seconds:
        a benchmark that silently stops early would report a wrong rate.
        """
        deadline = time.monotonic() + timeout
        count = nbytes = 0
        while count < records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.label}: {count}/{records} records after {timeout}s")
            got = await self.poll(1.0)
            count += got.count
            nbytes += got.nbytes
        return count, nbytes


def merge_range(ranges: dict[int, tuple[int, int]], partition: int, first: int, last: int) -> None:
    old = ranges.get(partition)
    ranges[partition] = (first, last) if old is None else (min(old[0], first), max(old[1], last))
