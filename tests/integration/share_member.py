"""One aiogroup share consumer in a process of its own, for kill -9 and SIGSTOP scenarios.

``python share_member.py BOOTSTRAP TOPIC GROUP HISTORY NAME [HANDLE_S MAX_POLL]``: explicit
acknowledgement, never acknowledges (it stands for a handler that hangs), writes its
acquisitions to the share history file ``HISTORY`` under ``NAME`` (the ShareRecorder hook;
``NAME`` is its client id too, so an observer's ``gone`` events match) and prints one line
``acquired <offset> <delivery count>`` per record handed to it, so the test knows what it
holds.  With
``HANDLE_S`` it takes one record per poll and spends that long on each, so the records a
fetch acquired (``MAX_POLL`` at most) wait in its buffer.
"""

from __future__ import annotations

import asyncio
import sys

from aiogroup import ShareConsumer
from aiogroup.testing.share_checker import ShareRecorder


async def main(
    bootstrap: str,
    topic: str,
    group: str,
    history: str,
    name: str,
    handle_s: str = "0",
    max_poll: str = "500",
) -> None:
    recorder = ShareRecorder(history)
    consumer = ShareConsumer(
        topic,
        group_id=group,
        bootstrap_servers=bootstrap,
        client_id=name,
        acknowledgement_mode="explicit",
        max_poll_records=int(max_poll),
        recorder=recorder,
        recorder_name=name,
    )
    await consumer.start()
    slow = float(handle_s)
    while True:
        got = await consumer.getmany(timeout_ms=500, max_records=1 if slow else None)
        for records in got.values():
            for r in records:
                print("acquired", r.offset, r.delivery_count, flush=True)
                await asyncio.sleep(slow)  # the handler's work


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:8]))
