"""Read an exactly-once loop's output topic the way its readers do, into a history.

Why: exactly-once is a promise to ``isolation_level="read_committed"`` readers of the
output, so it is judged on what such a reader sees (the output rules of
:mod:`aiogroup.testing.history`), not on what the loop believes it wrote.  Each output
record names the input record it was made from and the transaction that wrote it in
two headers (:func:`output_headers`); :func:`record_outputs` reads the topic to its
end and appends one "output" event per record.

Reading "to the end" needs care: an EndTxn answer means the outcome is decided, but
the transaction coordinator writes the markers afterwards, so until then the last
stable offset trails the log end and a read_committed read would stop short.  The
read first waits until no transaction is open on any partition of the topic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

from aiogroup._support.timeouts import wait_for
from aiogroup.consumer import GroupConsumer
from aiogroup.structs import TopicPartition
from aiogroup.testing.history import HistoryRecorder

__all__ = [
    "INPUT_HEADER",
    "TXN_HEADER",
    "group_committed",
    "output_headers",
    "read_committed",
    "record_outputs",
]

#: Header naming the input record an output was made from: ``topic/partition/offset``.
INPUT_HEADER = "aiogroup-input"
#: Header naming the transaction that wrote the output (any label unique per transaction).
TXN_HEADER = "aiogroup-txn"

#: How often the open-transaction wait asks the broker again (no event exists for it).
_POLL_S = 0.1


def output_headers(topic: str, partition: int, offset: int, txn: str) -> list[tuple[str, bytes]]:
    """The headers an output record carries for :func:`record_outputs`."""
    return [
        (INPUT_HEADER, f"{topic}/{partition}/{offset}".encode()),
        (TXN_HEADER, txn.encode()),
    ]


async def read_committed(
    bootstrap_servers: str,
    topic: str,
    *,
    partitions: int | None = None,
    timeout: float = 60.0,
    **options: Any,
) -> list[Any]:
    """Every record of ``topic`` a read_committed reader sees, once no transaction is
    open on it (``partitions``: how many; None: ask the broker).  ``options`` go to
    both consumers (security settings, say).  Raises ``TimeoutError`` after
    ``timeout`` seconds of either wait."""
    async with (
        GroupConsumer(
            bootstrap_servers=bootstrap_servers,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            **options,
        ) as reader,
        GroupConsumer(bootstrap_servers=bootstrap_servers, **options) as uncommitted,
    ):
        if partitions is None:
            await reader.topics()
            found = reader.partitions_for_topic(topic)
            if not found:
                raise ValueError(f"read_committed: topic {topic!r} does not exist")
            tps = [TopicPartition(topic, p) for p in sorted(found)]
        else:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
        reader.assign(tps)

        async def all_decided() -> dict[TopicPartition, int]:
            while True:  # a bounded poll of broker state: there is no event to await
                stable = await reader.end_offsets(tps)
                if stable == await uncommitted.end_offsets(tps):
                    return stable
                await asyncio.sleep(_POLL_S)

        ends = await wait_for(all_decided(), timeout)
        records: list[Any] = []

        async def drain() -> None:
            for tp in tps:
                while await reader.position(tp) < ends[tp]:
                    for batch in (await reader.getmany(tp, timeout_ms=500)).values():
                        records.extend(batch)

        await wait_for(drain(), timeout)
        return records


def record_outputs(recorder: HistoryRecorder, records: Sequence[Any]) -> int:
    """One "output" event per record carrying :func:`output_headers`; how many.

    A record without the input header is a test bug, not a finding: ``ValueError``.
    """
    for record in records:
        headers = {k: bytes(v) for k, v in (record.headers or ())}
        source = headers.get(INPUT_HEADER)
        if source is None:
            raise ValueError(
                f"output record {record.topic}[{record.partition}]@{record.offset} has no "
                f"{INPUT_HEADER!r} header: produce outputs with output_headers()"
            )
        topic, partition, offset = source.decode().rsplit("/", 2)
        txn = headers.get(TXN_HEADER, b"").decode()
        recorder.output(topic, int(partition), int(offset), txn)
    return len(records)


async def group_committed(
    bootstrap_servers: str,
    group_id: str,
    partitions: Iterable[TopicPartition],
    *,
    timeout: float = 60.0,
    **options: Any,
) -> dict[TopicPartition, int]:
    """The group's committed offsets, read from outside the group (it joins nothing):
    the lookup asks with ``require_stable``, so it waits out a pending transactional
    commit rather than answer the offset from before it.  Partitions without a
    committed offset are left out."""
    async with GroupConsumer(
        bootstrap_servers=bootstrap_servers, group_id=group_id, **options
    ) as reader:

        async def lookups() -> dict[TopicPartition, int]:
            found = {tp: await reader.committed(tp) for tp in partitions}
            return {tp: o for tp, o in found.items() if o is not None}

        return await wait_for(lookups(), timeout)
