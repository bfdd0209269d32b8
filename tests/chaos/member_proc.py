"""An aiogroup member in a process of its own, for faults only a process has.

``python -m tests.chaos.member_proc '<json spec>'`` joins the group and consumes,
recording into the shared history file, until it is killed (kill -9: a crash) or
stopped and continued (SIGSTOP/SIGCONT: a frozen member that must learn on waking
that it was fenced).  SIGTERM leaves the group cleanly.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys

from group_harness import Member

from aiogroup.testing.history import HistoryRecorder


async def run(spec: dict[str, object]) -> None:
    history = HistoryRecorder(str(spec["history"]))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    strategy = str(spec["strategy"])
    options: dict[str, object] = {}
    if spec.get("group_protocol", "classic") == "consumer":
        options["group_protocol"] = "consumer"
    else:
        options["session_timeout_ms"] = int(spec["session_timeout_ms"])  # type: ignore[call-overload]
    member = Member(
        str(spec["client_id"]),
        str(spec["bootstrap"]),
        str(spec["group"]),
        str(spec["topic"]),
        (strategy,),
        asyncio.Event(),
        history=history,
        client_id=str(spec["client_id"]),
        process_delay=float(spec.get("process_delay", 0.0)),  # type: ignore[arg-type]
        **options,
    )
    await member.start()
    try:
        await stop.wait()
    finally:
        await member.stop()
        history.close()


if __name__ == "__main__":
    asyncio.run(run(json.loads(sys.argv[1])))
