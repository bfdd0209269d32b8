"""An append-only log of time-stamped events, in memory and optionally in a file.

The checkers judge groups from histories that several processes write at once: each
member (in-process or in a child process) appends events, and the observer of the
broker appends its own.  What makes that safe is shared by the group-history and
share-history recorders, so it lives here once: every event is one ``write(2)`` on
an ``O_APPEND`` descriptor (concurrent appenders never interleave inside a line),
and a lock makes one process's recorder thread-safe (rebalance listeners and sync
handlers may run in worker threads).  What an event *is* stays the recorder's.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar


class JsonEvent(Protocol):
    """What the log needs of an event: its one-line JSON form."""

    def to_json(self) -> str: ...


E = TypeVar("E", bound=JsonEvent)
L = TypeVar("L", bound="EventLog[Any]")


class EventLog(Generic[E]):
    """Events kept in order of recording; with a ``path``, also appended to that file
    as JSON lines (read back with the recorder's ``load_*`` function)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.path = None if path is None else Path(path)
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._events: list[E] = []
        self._fd: int | None = None
        if self.path is not None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def now(self) -> float:
        """The recorder's clock (``time.monotonic`` unless given): one clock for every
        process on the machine, so events from separate processes line up."""
        return self._clock()

    def record(self, event: E) -> E:
        line = (event.to_json() + "\n").encode()
        with self._lock:
            self._events.append(event)
            if self._fd is not None:
                os.write(self._fd, line)
        return event

    def events(self) -> list[E]:
        """What this recorder wrote (in this process only; a file several processes
        appended to is read back with the recorder's ``load_*`` function)."""
        with self._lock:
            return list(self._events)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self: L) -> L:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
