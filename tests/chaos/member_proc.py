"""An aiogroup member in a process of its own, for faults only a process has.

``python -m tests.chaos.member_proc '<json spec>'`` joins the group and consumes,
recording into the shared history file, until it is killed (kill -9: a crash) or
stopped and continued (SIGSTOP/SIGCONT: a frozen member that must learn on waking
that it was fenced).  SIGTERM leaves the group cleanly.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from group_harness import Member

from aiogroup.testing.history import HistoryRecorder


def freeze_after_rejoin_sent(history: HistoryRecorder, client_id: str, member: Member) -> None:
    """Once armed (SIGUSR1), SIGSTOP this process the instant its next JoinGroup *while
    it owns partitions* is written to the socket (a cooperative rejoin, KIP-429): the
    answer then arrives while it is frozen, the case a harness-timed SIGSTOP hits only
    by chance."""
    from aiokafka.conn import AIOKafkaConnection

    original = AIOKafkaConnection.send
    armed = False

    def arm() -> None:
        nonlocal armed
        armed = True

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, arm)

    def send(self: AIOKafkaConnection, request: object, expect_response: bool = True) -> object:
        nonlocal armed
        result = original(self, request, expect_response)  # the bytes are written here
        if armed and type(request).__name__ == "JoinGroupRequest" and member.consumer.assignment():
            armed = False
            history.add(client_id, "frozen")
            os.kill(os.getpid(), signal.SIGSTOP)
        return result

    AIOKafkaConnection.send = send  # type: ignore[method-assign]


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
    if spec.get("freeze_after_rejoin_sent"):
        freeze_after_rejoin_sent(history, str(spec["client_id"]), member)
    await member.start()
    try:
        await stop.wait()
    finally:
        await member.stop()
        history.close()


if __name__ == "__main__":
    asyncio.run(run(json.loads(sys.argv[1])))
