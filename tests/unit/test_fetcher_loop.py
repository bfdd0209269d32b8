"""The fetch routine and ListOffsets helpers against a scripted in-memory broker.

The embedded test broker answers a fetch beyond the log end with an empty record
set instead of OFFSET_OUT_OF_RANGE, so Kafka's out-of-range behaviour is exercised
here, against a fake that follows the protocol.
"""

from __future__ import annotations

import asyncio
import struct
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import (
    ConsumerStoppedError,
    KafkaTimeoutError,
    OffsetOutOfRangeError,
    TopicAuthorizationFailedError,
)
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from aiogroup._fetch import offset_lookups as offsets
from aiogroup._fetch.fetcher import Fetcher
from aiogroup._state.subscription import PartitionState, SubscriptionState
from aiogroup.config import ConsumerConfig
from aiogroup.structs import OffsetAndTimestamp, OffsetResetStrategy, TopicPartition

TP = TopicPartition("t", 0)


def batch(base: int, count: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(count):
        builder.append(i, 1_000 + base + i, None, f"v{base + i}".encode(), [])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)  # base offset is outside the CRC
    return bytes(data)


class FakeLog:
    def __init__(self, start: int) -> None:
        self.start = start
        self.end = start
        self.batches: list[tuple[int, bytes]] = []

    def append(self, count: int) -> None:
        self.batches.append((self.end, batch(self.end, count)))
        self.end += count


class FakeBroker:
    """Just enough of AIOKafkaClient: cluster leaders, metadata refresh, send()."""

    def __init__(self, logs: dict[TopicPartition, FakeLog]) -> None:
        self.logs = logs
        self.leaders: dict[TopicPartition, int | None] = dict.fromkeys(logs, 0)
        self.cluster = SimpleNamespace(leader_for_partition=self.leaders.get)
        self.fetch_errors: dict[TopicPartition, list[int]] = {}
        self.offset_errors: dict[TopicPartition, list[int]] = {}
        self.metadata_updates = 0
        self.fetches = 0
        self.appended = asyncio.Event()

    def _done(self) -> asyncio.Future[bool]:
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(True)
        return fut

    def add_topic(self, topic: str) -> asyncio.Future[bool]:
        return self._done()

    def force_metadata_update(self) -> asyncio.Future[bool]:
        self.metadata_updates += 1
        return self._done()

    async def send(self, node: int, request: Any) -> Any:
        if isinstance(request, FetchRequest):
            return await self._fetch(request)
        if isinstance(request, OffsetRequest):
            return self._list_offsets(request)
        raise AssertionError(f"unexpected request {request!r}")

    async def _fetch(self, request: FetchRequest) -> Any:
        self.fetches += 1
        parts = [(topic, p, off) for topic, ps in request.topics for p, off, _ in ps]
        if all(
            self.logs[TopicPartition(t, p)].end <= off
            and not self.fetch_errors.get(TopicPartition(t, p))
            for t, p, off in parts
        ):
            # Long poll: wait for data (bounded by max_wait, like a broker).
            self.appended.clear()
            try:
                await asyncio.wait_for(self.appended.wait(), request._max_wait_ms / 1000)
            except asyncio.TimeoutError:
                pass
        topics: dict[str, list[tuple[Any, ...]]] = {}
        for topic, p, off in parts:
            tp = TopicPartition(topic, p)
            log = self.logs[tp]
            errors = self.fetch_errors.get(tp)
            code = errors.pop(0) if errors else 0
            if code == 0 and not log.start <= off <= log.end:
                code = OffsetOutOfRangeError.errno
            data = b""
            if code == 0:
                # Within the request's max_bytes, but at least one batch (KIP-74).
                room = getattr(request, "_max_bytes", 1 << 62)
                kept = []
                for _base, b in log.batches:
                    if _last(b) < off:
                        continue
                    if kept and len(b) > room:
                        break
                    kept.append(b)
                    room -= len(b)
                data = b"".join(kept)
            topics.setdefault(topic, []).append(
                (p, code, log.end, log.end, log.start, [], -1, data)
            )
        return SimpleNamespace(API_VERSION=11, topics=list(topics.items()))

    def _list_offsets(self, request: OffsetRequest) -> Any:
        topics = []
        for topic, ps in request._topics:
            answers = []
            for p, ts in ps:
                tp = TopicPartition(topic, p)
                errors = self.offset_errors.get(tp)
                if errors:
                    answers.append((p, errors.pop(0), -1, -1))
                    continue
                log = self.logs[tp]
                offset = log.start if ts == -2 else log.end
                answers.append((p, 0, -1, offset))
            topics.append((topic, answers))
        return SimpleNamespace(API_VERSION=1, topics=topics)


def _last(data: bytes) -> int:
    base, _length, _epoch, _magic, _crc, _attrs, delta = struct.unpack_from(">qiibIhi", data, 0)
    return int(base + delta)


async def start(
    broker: FakeBroker, **options: Any
) -> tuple[Fetcher, SubscriptionState, PartitionState]:
    config = ConsumerConfig(fetch_max_wait_ms=50, retry_backoff_ms=10, **options)
    sub = SubscriptionState(config.reset_strategy)
    fetcher = Fetcher(broker, sub, config)
    await fetcher.start()
    sub.assign_from_user([TP])
    assert sub.assignment is not None
    return fetcher, sub, sub.assignment.state(TP)


async def read(fetcher: Fetcher, want: int) -> list[int]:
    seen: list[int] = []
    while len(seen) < want:
        got = await fetcher.fetched_records((), 5.0)
        assert got, f"nothing after {seen}"
        seen += [r.offset for r in got[TP]]
    return seen


async def stop(fetcher: Fetcher, sub: SubscriptionState) -> None:
    await fetcher.close()
    sub.close()


def log_100_to_110() -> dict[TopicPartition, FakeLog]:
    log = FakeLog(100)
    log.append(4)
    log.append(6)
    return {TP: log}


async def test_out_of_range_resets_to_earliest() -> None:
    broker = FakeBroker(log_100_to_110())
    fetcher, sub, st = await start(broker, auto_offset_reset="earliest")
    st.seek(5)
    assert await read(fetcher, 10) == list(range(100, 110))
    assert st.position == 110
    await stop(fetcher, sub)


async def test_out_of_range_resets_to_latest() -> None:
    broker = FakeBroker(log_100_to_110())
    fetcher, sub, st = await start(broker, auto_offset_reset="latest")
    st.seek(500)
    while st.position != 110:
        assert await fetcher.fetched_records((), 0.05) == {}
    broker.logs[TP].append(3)
    broker.appended.set()
    assert await read(fetcher, 3) == [110, 111, 112]
    await stop(fetcher, sub)


async def test_out_of_range_without_strategy_raises_once() -> None:
    broker = FakeBroker(log_100_to_110())
    fetcher, sub, st = await start(broker, auto_offset_reset="none")
    st.seek(500)
    with pytest.raises(OffsetOutOfRangeError) as info:
        await fetcher.fetched_records((), 5.0)
    assert info.value.args[0] == {TP: 500}
    assert st.position is None
    assert await fetcher.fetched_records((), 0.1) == {}
    st.seek(107)
    assert await read(fetcher, 3) == [107, 108, 109]
    await stop(fetcher, sub)


async def test_reset_by_strategy_uses_list_offsets() -> None:
    broker = FakeBroker(log_100_to_110())
    fetcher, sub, st = await start(broker)
    st.await_reset(OffsetResetStrategy.EARLIEST)
    assert await asyncio.wait_for(st.wait_position(), 5) == 100
    assert await read(fetcher, 10) == list(range(100, 110))
    await stop(fetcher, sub)


async def test_leader_errors_refresh_metadata_and_retry() -> None:
    broker = FakeBroker(log_100_to_110())
    broker.fetch_errors[TP] = [6, 5, 3]  # NOT_LEADER, LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC
    fetcher, sub, st = await start(broker)
    st.seek(100)
    assert await read(fetcher, 10) == list(range(100, 110))
    assert broker.metadata_updates >= 3
    await stop(fetcher, sub)


async def test_authorization_error_reaches_the_application() -> None:
    broker = FakeBroker(log_100_to_110())
    broker.fetch_errors[TP] = [TopicAuthorizationFailedError.errno]
    fetcher, sub, st = await start(broker)
    st.seek(100)
    with pytest.raises(TopicAuthorizationFailedError):
        await fetcher.fetched_records((), 5.0)
    await stop(fetcher, sub)


async def test_close_wakes_a_waiting_reader() -> None:
    broker = FakeBroker({TP: FakeLog(0)})
    fetcher, sub, st = await start(broker)
    st.seek(0)
    waiter = asyncio.ensure_future(fetcher.next_record(()))
    await asyncio.sleep(0)
    assert not waiter.done()
    await fetcher.close()
    with pytest.raises(ConsumerStoppedError):
        await asyncio.wait_for(waiter, 5)
    sub.close()


async def test_position_from_elsewhere_wakes_the_fetcher() -> None:
    broker = FakeBroker(log_100_to_110())
    fetcher, sub, st = await start(broker)
    # No position: nothing is fetched until the coordinator (here: us) seeks.
    assert await fetcher.fetched_records((), 0.1) == {}
    assert broker.fetches == 0
    st.seek(108)
    assert await read(fetcher, 2) == [108, 109]
    await stop(fetcher, sub)


# -- offsets helpers ---------------------------------------------------------------------


async def test_list_offsets_answers_and_retries() -> None:
    broker = FakeBroker(log_100_to_110())
    broker.offset_errors[TP] = [6]  # NOT_LEADER once
    assert await offsets.beginning_offsets(broker, [TP], timeout=5) == {TP: 100}
    assert broker.metadata_updates == 1
    assert await offsets.end_offsets(broker, [TP], read_committed=True, timeout=5) == {TP: 110}
    found = await offsets.list_offsets(broker, {TP: -1}, read_committed=False, timeout=5)
    assert found == {TP: OffsetAndTimestamp(110, -1)}


async def test_list_offsets_timeout_names_partitions() -> None:
    broker = FakeBroker(log_100_to_110())
    broker.leaders[TP] = None  # leader unknown for ever
    with pytest.raises(KafkaTimeoutError, match="t-0"):
        await offsets.beginning_offsets(broker, [TP], timeout=0.2)


async def test_offsets_for_times_rejects_negative_timestamps() -> None:
    with pytest.raises(ValueError, match="timestamp"):
        await offsets.offsets_for_times(object(), {TP: -5}, read_committed=False, timeout=1)


async def test_list_offsets_rejects_non_partitions() -> None:
    with pytest.raises(TypeError, match="TopicPartition"):
        await offsets.list_offsets(object(), {("t", 0): -1}, read_committed=False, timeout=1)  # type: ignore[dict-item]


async def test_close_leaves_no_task_behind() -> None:
    before = asyncio.all_tasks()
    broker = FakeBroker(log_100_to_110())
    fetcher, sub, st = await start(broker)
    st.seek(100)
    sub.assignment.state(TP).pause()  # type: ignore[union-attr]
    assert await fetcher.fetched_records((), 0.05) == {}
    st.resume()
    assert await read(fetcher, 10) == list(range(100, 110))
    await fetcher.close()
    assert asyncio.all_tasks() - before == set()
    sub.close()


async def test_unassigning_everything_frees_the_read_ahead() -> None:
    broker = FakeBroker(log_100_to_110())
    fetcher, sub, st = await start(broker)
    st.seek(100)
    got = await fetcher.fetched_records((), 5.0, max_records=1)
    assert [r.offset for r in got[TP]] == [100]  # one record out, the rest buffered
    assert fetcher.buffered_bytes > 0
    sub.set_assignment(None)
    for _ in range(3):
        await asyncio.sleep(0)  # let the routine see the resolved `unassigned` future
    assert fetcher.buffered_bytes == 0
    await stop(fetcher, sub)


async def test_a_response_that_fills_the_bound_trims_the_heap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # After a response, when what is held plus the allocator's free bytes would pass
    # the bound, the free pages go back to the kernel (aiogroup._support.allocator);
    # without a count of free bytes, when fetching pauses at the bound.
    from aiogroup._fetch import fetcher as fetcher_module

    trims: list[int] = []
    monkeypatch.setattr(fetcher_module, "trim", lambda: trims.append(1) or True)
    cases = [  # (bound, free heap bytes, trimmed?)
        (1 << 20, 0, False),  # far from the bound
        (1 << 20, 1 << 20, True),  # held + free > bound
        (4096, None, True),  # no count: the budget cannot request any more
        (1 << 20, None, False),  # no count, room left
        (0, 1 << 30, False),  # unbounded
    ]
    for bound, free, expected in cases:
        trims.clear()
        monkeypatch.setattr(fetcher_module, "free_heap_bytes", lambda free=free: free)
        broker = FakeBroker(log_100_to_110())
        fetcher, sub, st = await start(
            broker, max_buffered_bytes=bound, max_partition_fetch_bytes=1024
        )
        st.seek(100)
        got = await fetcher.fetched_records((), 5.0, max_records=1)
        assert [r.offset for r in got[TP]] == [100]
        assert bool(trims) is expected, (bound, free, trims)
        await stop(fetcher, sub)


async def test_the_next_fetch_is_sent_before_the_application_is_woken() -> None:
    # The broker idles between answering a Fetch and receiving the next one: the
    # application woken by an answer must find the next request already sent, not
    # build the answer's records first (a third of a Tansu 1 KiB drain's wall time,
    # docs/benchmarks/profile.md).  The second Fetch (at the log end) waits in the
    # fake broker's long poll, so it is counted when sent.
    broker = FakeBroker(log_100_to_110())
    fetcher, sub, st = await start(broker)
    st.seek(100)
    got = await fetcher.fetched_records((), 5.0)
    assert [r.offset for r in got[TP]] == list(range(100, 110))
    assert broker.fetches == 2
    await stop(fetcher, sub)


class _WireBroker(FakeBroker):
    """Answers a Fetch a few loop turns after it was sent, as a broker over a wire:
    the application reads while the request is in flight."""

    async def _fetch(self, request: FetchRequest) -> Any:
        for _ in range(3):
            await asyncio.sleep(0)  # latency of the wire, not synchronisation
        return await super()._fetch(request)


@pytest.mark.parametrize("margin", [True, False])
async def test_reads_that_cut_batches_stay_within_the_bound(
    margin: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The next Fetch goes out before the application reads the answer just buffered;
    # a read that stops inside a batch then decodes and keeps the rest of it.  The
    # request left room for that (the decode margin), so the bound holds; without
    # the margin it does not (the check that this test can fail).
    log = FakeLog(0)
    for _ in range(12):
        log.append(200)
    broker = _WireBroker({TP: log})
    if not margin:
        monkeypatch.setattr(Fetcher, "_decode_margin", lambda self: 0)
    bound = 96 * 1024
    fetcher, sub, st = await start(
        broker, max_buffered_bytes=bound, max_partition_fetch_bytes=16 * 1024
    )
    st.seek(0)
    seen: list[int] = []
    while len(seen) < 2400:
        got = await fetcher.fetched_records((), 5.0, max_records=7)
        assert got, f"nothing after {len(seen)}"
        seen += [r.offset for r in got[TP]]
    assert seen == list(range(2400))
    await stop(fetcher, sub)
    assert (fetcher.peak_bytes <= bound) is margin, fetcher.peak_bytes
