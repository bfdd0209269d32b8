"""A member that runs aiogroup's ``Processor``, in a process of its own.

``python -m tests.chaos.processing_member '<json spec>'`` joins the group and
processes records until SIGTERM (then ``processor.stop()``: drain, commit, leave),
kill -9 (a crash) or SIGSTOP/SIGCONT (a frozen member).  Its rebalance callbacks go
into the shared history through ``RecordingListener``, and every handler attempt
(started, finished, abandoned) through ``recording_handler``.

The handler awaits ``handler_ms``; records whose key is ``slow_key`` await
``slow_ms`` instead; records whose key is ``poison_key`` always raise.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from typing import Any

from aiogroup import ConsumerRecord, DeadLetter, GroupConsumer, Processor, RetryPolicy
from aiogroup.testing.history import HistoryRecorder
from aiogroup.testing.recording import RecordingListener, record_commits, recording_handler


class Poison(Exception):
    """The handler's failure for a poison record."""


async def run(spec: dict[str, Any]) -> None:
    history = HistoryRecorder(str(spec["history"]))
    me = history.member(spec["client_id"])
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    delay = spec.get("handler_ms", 5) / 1000
    slow_key = spec.get("slow_key")
    slow = spec.get("slow_ms", 0) / 1000
    poison_key = spec.get("poison_key")

    async def handle(record: ConsumerRecord) -> None:
        key = None if record.key is None else record.key.decode()
        if poison_key is not None and key == poison_key:
            raise Poison(f"poison record {record.topic}[{record.partition}]@{record.offset}")
        await asyncio.sleep(slow if slow_key is not None and key == slow_key else delay)

    attempts = int(spec.get("attempts", 2))
    dead_letter = spec.get("dead_letter")
    consumer = GroupConsumer(
        bootstrap_servers=spec["bootstrap"],
        group_id=spec["group"],
        client_id=spec["client_id"],
        partition_assignment_strategy=(spec["strategy"],),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=int(spec["session_timeout_ms"]),
        heartbeat_interval_ms=int(spec["session_timeout_ms"]) // 3,
    )
    consumer.subscribe([spec["topic"]], listener=RecordingListener(me))
    record_commits(consumer, me)  # the processor's commits, stamped when sent
    await consumer.start()
    processor = Processor(
        consumer,
        recording_handler(me, handle, dead_letter_after=attempts if dead_letter else None),
        concurrency=int(spec.get("concurrency", 20)),
        ordering=spec.get("ordering", "key"),
        retry=RetryPolicy(attempts=attempts, backoff_ms=20, max_backoff_ms=100),
        on_failure=DeadLetter(topic=dead_letter) if dead_letter else "stop",
        commit_interval_ms=int(spec.get("commit_interval_ms", 200)),
        drain_timeout_ms=int(spec.get("drain_timeout_ms", 30_000)),
        max_uncommitted=spec.get("max_uncommitted"),
    )
    running = asyncio.ensure_future(processor.run())
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not running.done():
            await processor.stop()
        await running
    finally:
        stopping.cancel()
        me.leaving()
        await consumer.stop()
        history.close()


if __name__ == "__main__":
    asyncio.run(run(json.loads(sys.argv[1])))
