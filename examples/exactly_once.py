"""Exactly-once consume-transform-produce: each input's output once, for read_committed readers.

Reads ``INPUT_TOPIC`` in group ``GROUP_ID``, writes one upper-cased record per input
to ``OUTPUT_TOPIC``, and commits each batch's outputs and input offsets in one
transaction of aiokafka's producer.  The offsets carry this member's group metadata
(KIP-447), so if the group replaced this process while it was frozen or cut off,
its commit is refused and its outputs are aborted.  Needs a broker with
transactions (Apache Kafka)::

    export AIOGROUP_BOOTSTRAP=127.0.0.1:9092 INPUT_TOPIC=orders OUTPUT_TOPIC=orders-upper
    python examples/exactly_once.py

Ctrl-C or SIGTERM ends the loop after the batch in hand; ``TRANSACTIONAL_ID`` and
``GROUP_ID`` override the defaults.  Prints ``committed N`` after each transaction.
"""

import asyncio
import os
import signal
import uuid

from aiokafka import AIOKafkaProducer

from aiogroup import GroupConsumer
from aiogroup.errors import CommitFailedError, TransactionFencedError
from aiogroup.transactions import send_offsets_to_transaction, transaction

BOOTSTRAP = os.environ.get("AIOGROUP_BOOTSTRAP", "localhost:9092")
INPUT_TOPIC = os.environ.get("INPUT_TOPIC", "orders")
OUTPUT_TOPIC = os.environ.get("OUTPUT_TOPIC", "orders-upper")
GROUP_ID = os.environ.get("GROUP_ID", "orders-upper")
# Unique per process: since KIP-447 the group metadata, not the transactional id,
# fences a zombie, so instances need no fixed id per partition.
TRANSACTIONAL_ID = os.environ.get("TRANSACTIONAL_ID", f"orders-upper-{uuid.uuid4()}")


async def main():
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    consumer = GroupConsumer(
        INPUT_TOPIC,
        bootstrap_servers=BOOTSTRAP,
        group_id=GROUP_ID,
        enable_auto_commit=False,  # offsets go into the transaction, nowhere else
        isolation_level="read_committed",  # inputs from other transactions: committed only
        auto_offset_reset="earliest",
    )
    producer = AIOKafkaProducer(bootstrap_servers=BOOTSTRAP, transactional_id=TRANSACTIONAL_ID)
    await producer.start()
    await consumer.start()
    committed = 0
    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=500, max_records=500)
            if not batch:
                continue
            try:
                async with transaction(producer):
                    for records in batch.values():
                        for record in records:
                            await producer.send(OUTPUT_TOPIC, record.value.upper(), key=record.key)
                    next_offsets = {tp: records[-1].offset + 1 for tp, records in batch.items()}
                    await send_offsets_to_transaction(producer, next_offsets, consumer)
            except (TransactionFencedError, CommitFailedError) as exc:
                # The group gave (some of) these partitions to another member, which
                # redoes the batch: our outputs were aborted.  Resume from the group's
                # offsets for what we still own.
                print("fenced:", exc, flush=True)
                if isinstance(exc, TransactionFencedError) and exc.producer_fenced:
                    break
                await consumer.seek_to_committed()
                continue
            committed += sum(len(records) for records in batch.values())
            print("committed", committed, flush=True)
    finally:
        await consumer.stop()
        await producer.stop()


if __name__ == "__main__":
    asyncio.run(main())
