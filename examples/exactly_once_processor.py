"""Exactly-once outputs from the processing layer: one transaction per committed prefix.

The service of ``examples/exactly_once.py`` - one upper-cased record in
``OUTPUT_TOPIC`` per record of ``INPUT_TOPIC``, each exactly once for read_committed
readers - written as a concurrent, key-ordered handler: ``Processor`` with a
transactional producer.  The handler awaits its own I/O and *returns* its output; the
processor sends it into the open transaction and commits it with the offsets that
count the record finished.  Needs a broker with transactions (Apache Kafka)::

    export AIOGROUP_BOOTSTRAP=127.0.0.1:9092 INPUT_TOPIC=orders OUTPUT_TOPIC=orders-upper
    python examples/exactly_once_processor.py

Ctrl-C or SIGTERM stops it: in-flight handlers finish, the last transaction commits.
"""

import asyncio
import os
import signal
import uuid

from aiokafka import AIOKafkaProducer

from aiogroup import GroupConsumer, Processor
from aiogroup.processing import Output

BOOTSTRAP = os.environ.get("AIOGROUP_BOOTSTRAP", "localhost:9092")
INPUT_TOPIC = os.environ.get("INPUT_TOPIC", "orders")
OUTPUT_TOPIC = os.environ.get("OUTPUT_TOPIC", "orders-upper")
GROUP_ID = os.environ.get("GROUP_ID", "orders-upper")
TRANSACTIONAL_ID = os.environ.get("TRANSACTIONAL_ID", f"orders-upper-{uuid.uuid4()}")


async def upper(record):
    """The handler: its own I/O, then the record's output (None, one Output or a list)."""
    await asyncio.sleep(0.001)  # stands in for a lookup the transform needs
    return Output(OUTPUT_TOPIC, record.value.upper(), key=record.key)


async def main():
    consumer = GroupConsumer(
        INPUT_TOPIC,
        bootstrap_servers=BOOTSTRAP,
        group_id=GROUP_ID,
        enable_auto_commit=False,  # offsets go into the transactions, nowhere else
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, transactional_id=TRANSACTIONAL_ID)
    await producer.start()
    await consumer.start()
    processor = Processor(
        consumer,
        upper,
        concurrency=50,
        ordering="key",
        commit_interval_ms=500,
        transactional_producer=producer,
    )
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(
            sig, lambda: asyncio.ensure_future(processor.stop())
        )
    try:
        await processor.run()
        stats = processor.metrics()["transactions"]
    finally:
        await consumer.stop()
        await producer.stop()
    print(
        f"committed {stats['records_committed']} records in "
        f"{stats['transactions_committed']} transactions "
        f"({stats['transactions_aborted']} aborted)",
        flush=True,
    )


if __name__ == "__main__":
    asyncio.run(main())
