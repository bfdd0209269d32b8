"""An at-least-once asyncio worker with graceful shutdown.

    KAFKA_BOOTSTRAP=localhost:9092 TOPIC=orders GROUP_ID=order-worker python examples/worker.py

At least once: offsets are committed only after the records before them were
processed, so a crash re-delivers what was being worked on but never skips it.
SIGTERM/SIGINT stop taking new batches; the batch in hand is finished and
committed, then ``stop()`` leaves the group (the partitions move at once instead
of after a session timeout).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from aiogroup import ConsumerRecord, GroupConsumer

log = logging.getLogger("worker")


async def handle(record: ConsumerRecord) -> None:
    """The application's work for one record (here: print it)."""
    print(f"processed {record.topic} {record.partition} {record.offset}", flush=True)


async def run(stop: asyncio.Event) -> None:
    consumer = GroupConsumer(
        os.environ.get("TOPIC", "orders"),
        bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP", "localhost:9092"),
        group_id=os.environ.get("GROUP_ID", "order-worker"),
        enable_auto_commit=False,  # commit after processing, not on a timer
        auto_offset_reset="earliest",
        max_poll_records=100,
    )
    await consumer.start()  # returns once the first partitions are assigned
    print("ready", flush=True)
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for record in records:
                    await handle(record)
            if batch:
                # Exactly the offsets handed out in this batch, all processed by now.
                await consumer.commit({tp: records[-1].offset + 1 for tp, records in batch.items()})
    finally:
        await consumer.stop()  # commits nothing more (auto-commit off), leaves the group
        print("stopped", flush=True)


def main() -> None:
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "WARNING"))

    async def entry() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run(stop)

    asyncio.run(entry())


if __name__ == "__main__":
    main()
