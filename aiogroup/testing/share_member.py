"""One aiogroup share consumer in a process of its own, for faults only a process has.

Why: kill -9 and SIGSTOP/SIGCONT act on a process.  A share-group scenario that kills
or freezes an aiogroup :class:`~aiogroup.share.ShareConsumer` (issue 28) runs it here,
as :mod:`aiogroup.testing.share_peers` runs confluent-kafka's:

``python -m aiogroup.testing.share_member BOOTSTRAP TOPIC GROUP NAME HISTORY
[--outcomes FILE] [--handle-s S] [--max-records N]``

joins ``GROUP`` under the client id ``NAME`` (so :mod:`aiogroup.testing.share_observer`
knows it), feeds every acquisition and acknowledgement to a
:class:`~aiogroup.testing.share_checker.ShareRecorder` appending to ``HISTORY``, and
handles each record in explicit mode: it awaits ``S`` seconds (a handler that works),
then ACCEPTs it, and commits after each batch.  SIGTERM stops it cleanly (it releases
what it holds and leaves); kill -9 is a crash.

The history says what the *broker* answered; ``--outcomes`` says what the
*application* was told, one JSON object a line: ``{"t", "c", "k": "ack", "topic",
"partition", "offset", "ack", "outcome", "error", "via"}`` where ``outcome`` is "ok",
"failed" (an acknowledgement result with an error, from the acknowledgement callback
or ``commit()``, ``via`` saying which) or "refused" (``acknowledge()`` raised
:class:`~aiogroup.share.InvalidAcknowledgement`, ``error`` its message); plus
``{"k": "started", "member_id"}`` once joined.  A scenario that freezes the process
past its lock reads there whether aiogroup told the application its late
acknowledgements failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiogroup.share import AcknowledgeType, AckResult, InvalidAcknowledgement, ShareConsumer
from aiogroup.structs import TopicPartition
from aiogroup.testing.share_checker import ShareRecorder

__all__ = ["OutcomeLog", "load_outcomes", "run"]


class OutcomeLog:
    """What the application was told, appended as JSON lines (one ``O_APPEND`` write
    each, so a kill -9 leaves whole lines)."""

    def __init__(self, path: str | os.PathLike[str] | None, name: str) -> None:
        self.name = name
        self._fd = None if path is None else os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def write(self, kind: str, **fields: Any) -> None:
        if self._fd is None:
            return
        doc = {"t": time.monotonic(), "c": self.name, "k": kind, **fields}
        os.write(self._fd, (json.dumps(doc, separators=(",", ":")) + "\n").encode())

    def results(self, results: dict[TopicPartition, list[AckResult]], via: str) -> None:
        for rs in results.values():
            for r in rs:
                for offset in r.offsets:
                    self.write(
                        "ack",
                        topic=r.topic,
                        partition=r.partition,
                        offset=offset,
                        ack=r.ack_type.name.lower(),
                        outcome="ok" if r.ok else "failed",
                        error=None if r.ok else f"{r.error_code} {r.error_message or ''}".strip(),
                        via=via,
                    )

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def load_outcomes(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The outcome lines written so far (a missing file: none)."""
    p = Path(path)
    if not p.exists():
        return []
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


async def run(
    bootstrap: str,
    topic: str,
    group: str,
    name: str,
    history: str | os.PathLike[str],
    *,
    outcomes: str | os.PathLike[str] | None = None,
    handle_s: float = 0.0,
    max_records: int = 10,
) -> None:
    """Consume until SIGTERM, as the module docstring says."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    log = OutcomeLog(outcomes, name)
    recorder = ShareRecorder(history)
    consumer = ShareConsumer(
        topic,
        group_id=group,
        bootstrap_servers=bootstrap,
        client_id=name,
        acknowledgement_mode="explicit",
        max_poll_records=max_records,
        acknowledgement_callback=lambda results: log.results(results, "callback"),
        recorder=recorder,
        recorder_name=name,
    )
    await consumer.start()
    log.write("started", member_id=consumer.member_id)
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for record in records:
                    if handle_s:
                        await asyncio.sleep(handle_s)
                    try:
                        consumer.acknowledge(record, AcknowledgeType.ACCEPT)
                    except InvalidAcknowledgement as refused:
                        log.write(
                            "ack",
                            topic=record.topic,
                            partition=record.partition,
                            offset=record.offset,
                            ack="accept",
                            outcome="refused",
                            error=str(refused),
                            via="acknowledge",
                        )
            if batch:
                log.results(await consumer.commit(), "commit")
    finally:
        await consumer.stop(timeout=10)
        recorder.close()
        log.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m aiogroup.testing.share_member")
    for name in ("bootstrap", "topic", "group", "name", "history"):
        parser.add_argument(name)
    parser.add_argument("--outcomes", default=None)
    parser.add_argument("--handle-s", type=float, default=0.0)
    parser.add_argument("--max-records", type=int, default=10)
    args = parser.parse_args(argv)
    asyncio.run(
        run(
            args.bootstrap,
            args.topic,
            args.group,
            args.name,
            args.history,
            outcomes=args.outcomes,
            handle_s=args.handle_s,
            max_records=args.max_records,
        )
    )


if __name__ == "__main__":
    main()
