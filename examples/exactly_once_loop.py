"""Exactly-once consume-transform-produce with ``TransformLoop``: a batch per transaction.

The same service as ``examples/exactly_once.py`` - one upper-cased record in
``OUTPUT_TOPIC`` per record of ``INPUT_TOPIC``, each exactly once for read_committed
readers - with the loop, the abort-and-reread after a refusal, and the rebalance duties
left to ``aiogroup.transactions.TransformLoop``: a revocation waits for the open
transaction to commit (aborting it after ``revoke_timeout_ms``), a loss aborts it.
Needs a broker with transactions (Apache Kafka)::

    export AIOGROUP_BOOTSTRAP=127.0.0.1:9092 INPUT_TOPIC=orders OUTPUT_TOPIC=orders-upper
    python examples/exactly_once_loop.py

Ctrl-C or SIGTERM ends it after the batch in hand and prints what it committed.
"""

import asyncio
import os
import signal
import uuid

from aiokafka import AIOKafkaProducer

from aiogroup import GroupConsumer
from aiogroup.transactions import TransformLoop

BOOTSTRAP = os.environ.get("AIOGROUP_BOOTSTRAP", "localhost:9092")
INPUT_TOPIC = os.environ.get("INPUT_TOPIC", "orders")
OUTPUT_TOPIC = os.environ.get("OUTPUT_TOPIC", "orders-upper")
GROUP_ID = os.environ.get("GROUP_ID", "orders-upper")
TRANSACTIONAL_ID = os.environ.get("TRANSACTIONAL_ID", f"orders-upper-{uuid.uuid4()}")


async def upper(producer, batch):
    """The transform: runs inside the batch's transaction.

    It need not await the deliveries: TransformLoop awaits every output sent through
    ``producer`` before it commits, and aborts the transaction if one failed.
    """
    for records in batch.values():
        for record in records:
            await producer.send(OUTPUT_TOPIC, record.value.upper(), key=record.key)


async def main():
    consumer = GroupConsumer(
        INPUT_TOPIC,
        bootstrap_servers=BOOTSTRAP,
        group_id=GROUP_ID,
        enable_auto_commit=False,  # offsets go into the transaction, nowhere else
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    )
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, transactional_id=TRANSACTIONAL_ID)
    await producer.start()
    await consumer.start()
    loop = TransformLoop(consumer, producer, upper, max_records=500)
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(
            sig, lambda: asyncio.ensure_future(loop.stop())
        )
    try:
        await loop.run()
    finally:
        await consumer.stop()
        await producer.stop()
    print(
        f"committed {loop.records_committed} records in {loop.transactions_committed} "
        f"transactions ({loop.transactions_aborted} aborted)",
        flush=True,
    )


if __name__ == "__main__":
    asyncio.run(main())
