"""One aiogroup share consumer in a process of its own, for kill -9 and SIGSTOP scenarios.

``python share_member.py BOOTSTRAP TOPIC GROUP HISTORY NAME``: explicit acknowledgement,
never acknowledges (it stands for a handler that hangs), writes its acquisitions to the
share history file ``HISTORY`` under ``NAME`` (the ShareRecorder hook) and prints one line
``acquired <offset>`` per record handed to it, so the test knows what it holds.
"""

from __future__ import annotations

import asyncio
import sys

from aiogroup import ShareConsumer
from aiogroup.testing.share_checker import ShareRecorder


async def main(bootstrap: str, topic: str, group: str, history: str, name: str) -> None:
    recorder = ShareRecorder(history)
    consumer = ShareConsumer(
        topic,
        group_id=group,
        bootstrap_servers=bootstrap,
        acknowledgement_mode="explicit",
        recorder=recorder,
        recorder_name=name,
    )
    await consumer.start()
    while True:
        for records in (await consumer.getmany(timeout_ms=500)).values():
            for r in records:
                print("acquired", r.offset, flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
