"""A share-group worker (KIP-932): many workers, one queue of records, per-record acks.

Needs a broker that serves share groups (Apache Kafka 4.1+; the embedded test broker
does not - ``AIOGROUP_BROKER=kafka python -m aiogroup.testing`` starts one).  A share
group starts reading at the latest offset unless told otherwise; to read what is
already in the topic, set the group's ``share.auto.offset.reset`` first::

    kafka-configs.sh --bootstrap-server $AIOGROUP_BOOTSTRAP --alter --entity-type groups \\
        --entity-name jobs-workers --add-config share.auto.offset.reset=earliest
    AIOGROUP_BOOTSTRAP=127.0.0.1:9092 python examples/share_worker.py

Run it several times: every worker reads the same partitions and each record goes to
one of them.  A record the handler fails on is released (delivered again, with a
higher ``delivery_count``); after three tries it is rejected (archived).  A slow
handler keeps its record: ``auto_renew`` renews the lock before it runs out.
Ctrl-C or SIGTERM stops it: unacknowledged records are released, the worker leaves.
"""

import asyncio
import os
import signal

from aiogroup import AcknowledgeType, ShareConsumer

BOOTSTRAP = os.environ.get("AIOGROUP_BOOTSTRAP", "localhost:9092")
TOPIC = os.environ.get("TOPIC", "jobs")
GROUP_ID = os.environ.get("GROUP_ID", "jobs-workers")
MAX_TRIES = 3


async def handle(record):
    """The work; raises on a bad record."""
    if record.value == b"poison":
        raise ValueError("cannot handle this record")
    await asyncio.sleep(0.01)  # an awaited call: a database, an HTTP API, ...


async def run(bootstrap, topic, group_id, stop, done=None):
    """Work until ``stop`` is set; ``done(record, ack_type)`` sees every decision."""
    consumer = ShareConsumer(
        topic,
        group_id=group_id,
        bootstrap_servers=bootstrap,
        acknowledgement_mode="explicit",
        auto_renew=True,
        max_poll_records=50,
    )
    await consumer.start()
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                for record in records:
                    try:
                        await handle(record)
                        ack = AcknowledgeType.ACCEPT
                    except ValueError:
                        last_try = record.delivery_count >= MAX_TRIES
                        ack = AcknowledgeType.REJECT if last_try else AcknowledgeType.RELEASE
                    consumer.acknowledge(record, ack)
                    if done is not None:
                        done(record, ack)
            await consumer.commit()
    finally:
        await consumer.stop()


async def main():
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)

    def show(record, ack):
        print(record.partition, record.offset, record.delivery_count, ack.name, flush=True)

    await run(BOOTSTRAP, TOPIC, GROUP_ID, stop, show)


if __name__ == "__main__":
    asyncio.run(main())
