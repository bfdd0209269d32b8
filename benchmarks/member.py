"""One consumer-group member in a process of its own, reporting what happens to it.

``python -m benchmarks.member '<json spec>'`` subscribes and polls until it reads
``stop`` on stdin (then it leaves the group cleanly) or is killed (a crash: the
group only notices when the session expires).  Every event is one JSON line on
stdout stamped with ``time.monotonic()``, which on Linux is one clock for every
process, so the orchestrator can line up events from several members.

Events: ``loaded`` (with ``"wait_go": true``: modules loaded, waiting for ``go`` on
stdin), ``starting`` (the member is about to call into its client: construct, ``start()``,
``subscribe()`` - the clock of every join figure starts here, after the interpreter and
the client's modules are loaded), ``ready``,
``assigned``/``revoked``/``lost``/``revoke_done`` (partitions),
``batch`` (per partition: first and last offset delivered), ``commit_error``,
``error``, ``closed``; with ``"timeline": true`` in the spec, ``req`` for every group
request an aiokafka-based client (aiogroup, aiokafka) sends: API, send and answer time and
the answer's error code (:mod:`benchmarks.timeline`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from typing import Any

from benchmarks import adapters
from benchmarks.adapters.base import Hooks, NotAvailable

_out_lock = threading.Lock()


def emit(kind: str, **fields: Any) -> None:
    line = json.dumps({"t": time.monotonic(), "ev": kind, **fields})
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _watch_stdin(loop: asyncio.AbstractEventLoop, stop: asyncio.Event, go: asyncio.Event) -> None:
    for line in sys.stdin:
        if line.strip() == "go":
            loop.call_soon_threadsafe(go.set)
        if line.strip() == "stop":
            break
    loop.call_soon_threadsafe(go.set)
    loop.call_soon_threadsafe(stop.set)  # "stop" or the orchestrator went away


async def run(spec: dict[str, Any]) -> None:
    stop = asyncio.Event()
    go = asyncio.Event()
    threading.Thread(
        target=_watch_stdin, args=(asyncio.get_running_loop(), stop, go), daemon=True
    ).start()
    try:
        adapter = adapters.make(spec["client"], spec["variant"], spec["bootstrap"])
    except NotAvailable as exc:
        emit("unavailable", detail=str(exc))
        return
    # Imports are not joining: load the client's modules before the clock starts.
    adapter.preload()
    if spec.get("timeline"):
        from benchmarks import timeline

        timeline.install(emit)
    hooks = Hooks(
        event=lambda kind, parts, detail: emit(kind, p=parts, detail=detail),
        revoke_delay=spec.get("revoke_delay", 0.0),
    )
    topic = spec["topic"]
    if spec.get("wait_go"):
        # Loaded, not started: the orchestrator picks the moment the join begins.
        emit("loaded")
        await go.wait()
        if stop.is_set():
            return
    emit("starting")
    await adapter.subscribe(
        topic,
        spec["group_id"],
        hooks,
        cooperative=spec["cooperative"],
        session_timeout_ms=spec["session_timeout_ms"],
        heartbeat_interval_ms=spec["heartbeat_interval_ms"],
        client_id=spec.get("client_id"),
    )
    emit("ready")
    # Periodic commits bound what a crash re-delivers, but a blocking commit issued
    # mid-rebalance stalls some clients' delivery; scenarios that measure delivery
    # gaps turn them off and rely on commit-on-revoke.
    commit_every: float | None = spec.get("commit_interval")
    last_commit = time.monotonic()
    committed: dict[int, int] = {}
    try:
        while not stop.is_set():
            got = await adapter.poll(0.1, track=True)
            if got.count:
                emit("batch", n=got.count, r={str(p): r for p, r in got.ranges.items()})
                for p, (_first, last) in got.ranges.items():
                    hooks.positions[p] = last + 1
            now = time.monotonic()
            if commit_every is not None and now - last_commit >= commit_every:
                last_commit = now
                # Periodic commit, like auto-commit: bounds what a crash re-delivers.
                pending = {p: o for p, o in hooks.positions.items() if committed.get(p) != o}
                if pending:
                    try:
                        await adapter.commit(topic, pending)
                        committed.update(pending)
                    except Exception as exc:
                        emit("commit_error", p=sorted(pending), detail=f"{type(exc).__name__}")
    finally:
        await adapter.close()
        emit("closed")


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    try:
        asyncio.run(run(spec))
    except Exception as exc:
        emit("error", detail=f"{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
