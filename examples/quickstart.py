"""The README's quickstart: consume a topic in a group, commit, stop cleanly.

Run a test broker in another terminal and paste the ``export`` line it prints::

    python -m aiogroup.testing --port 9092 --topic orders --partitions 3
    export AIOGROUP_BOOTSTRAP=127.0.0.1:9092
    python examples/quickstart.py

Ctrl-C or SIGTERM (what ``kill``, systemd and Kubernetes send) ends the loop; the
consumer then revokes, commits and leaves the group, and the process exits 0 with
no traceback.  ``TOPIC`` and ``GROUP_ID`` override the names.
"""

import asyncio
import os
import signal

from aiogroup import AsyncConsumerRebalanceListener, GroupConsumer

BOOTSTRAP = os.environ.get("AIOGROUP_BOOTSTRAP", "localhost:9092")
TOPIC = os.environ.get("TOPIC", "orders")
GROUP_ID = os.environ.get("GROUP_ID", "orders-service")


class Listener(AsyncConsumerRebalanceListener):
    def __init__(self, consumer):
        self.consumer = consumer

    async def on_partitions_revoked(self, revoked):
        await self.consumer.commit()  # still ours: commit what we processed

    async def on_partitions_assigned(self, assigned):
        print("now own", sorted(tp.partition for tp in assigned), flush=True)

    async def on_partitions_lost(self, lost):
        print("lost", sorted(tp.partition for tp in lost), flush=True)  # do not commit


async def main():
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)  # Ctrl-C / SIGTERM: leave the loop below
    consumer = GroupConsumer(
        bootstrap_servers=BOOTSTRAP,
        group_id=GROUP_ID,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    consumer.subscribe([TOPIC], listener=Listener(consumer))
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for record in records:
                    print(record.topic, record.partition, record.offset, record.value, flush=True)
            if batches:
                await consumer.commit()
    finally:
        await consumer.stop()  # revoke, commit, leave the group
    print("stopped", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
