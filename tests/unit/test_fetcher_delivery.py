"""Fetcher delivery logic without a broker: chunks built from real record-batch bytes."""

from __future__ import annotations

import asyncio
import struct
from collections import deque
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from aiogroup._fetch import delivery
from aiogroup._fetch.fetcher import Chunk, Fetcher
from aiogroup._fetch.native import native_records
from aiogroup._fetch.walker import RecordSink, walk
from aiogroup._state.subscription import PartitionState, SubscriptionState
from aiogroup.config import ConsumerConfig
from aiogroup.structs import ConsumerRecord, TopicPartition
from tests.unit.chunks import chunk_of

TOPIC = "t"
_ATTR_POS = 21  # baseOffset(8) length(4) leaderEpoch(4) magic(1) crc(4)
_TRANSACTIONAL = 0x10
_CONTROL = 0x20


#: The record path both ways: the native module's (when it is built) and the pure one.
RECORD_PATHS = ["pure", *(["native"] if native_records() is not None else [])]


@pytest.fixture(autouse=True, params=RECORD_PATHS)
def record_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs on both record paths (``AIOGROUP_NATIVE``)."""
    path: str = request.param
    monkeypatch.setenv("AIOGROUP_NATIVE", "1" if path == "native" else "0")
    assert (RecordSink(None, None).takes_raw) is (path == "native")
    return path


def batch_bytes(
    base: int,
    values: list[bytes],
    *,
    pid: int = -1,
    transactional: bool = False,
    control: bool = False,
    headers: list[tuple[str, bytes]] | None = None,
    keys: list[bytes | None] | None = None,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        2, 0, int(transactional), pid, 0 if pid >= 0 else -1, 0, 1 << 20
    )
    for i, v in enumerate(values):
        key = keys[i] if keys is not None else None
        builder.append(i, 1_700_000_000_000 + base + i, key, v, headers or [])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    if control:
        attrs = struct.unpack_from(">h", data, _ATTR_POS)[0] | _CONTROL
        struct.pack_into(">h", data, _ATTR_POS, attrs)
    struct.pack_into(">I", data, 17, calc_crc32c(bytes(data[_ATTR_POS:])))
    return bytes(data)


def abort_marker(base: int, pid: int) -> bytes:
    # Control record key: version 0, type 0 (abort); value: version, coordinator epoch.
    builder = DefaultRecordBatchBuilder(2, 0, 1, pid, 0, 0, 1 << 20)
    builder.append(0, 1, struct.pack(">hh", 0, 0), struct.pack(">hi", 0, 0), [])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    attrs = struct.unpack_from(">h", data, _ATTR_POS)[0] | _CONTROL
    struct.pack_into(">h", data, _ATTR_POS, attrs)
    struct.pack_into(">I", data, 17, calc_crc32c(bytes(data[_ATTR_POS:])))
    return bytes(data)


def values(n: int, start: int = 0) -> list[bytes]:
    return [f"v{i}".encode() for i in range(start, start + n)]


def take_records(
    chunk: Chunk, limit: int, out: list[ConsumerRecord], kd: Any = None, vd: Any = None
) -> int:
    """Walk ``chunk`` into ConsumerRecords appended to ``out``; returns how many."""
    sink = RecordSink(kd, vd)
    n = walk(chunk, limit, sink)
    out.extend(sink.result.get(chunk.tp, []))
    return n


def take_all(chunk: Chunk, limit: int = 1 << 30) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    take_records(chunk, limit, out)
    return out


@pytest.fixture
def ready_state() -> PartitionState:
    st = PartitionState(TopicPartition(TOPIC, 0), SubscriptionState().default_reset)
    st.seek(0)
    return st


def test_whole_chunk_in_order(ready_state: PartitionState) -> None:
    data = batch_bytes(0, values(5)) + batch_bytes(5, values(5, 5))
    chunk = chunk_of(ready_state, data, 0)
    recs = take_all(chunk)
    assert [r.offset for r in recs] == list(range(10))
    assert [r.value for r in recs] == values(10)
    assert recs[3].serialized_value_size == len(b"v3")
    assert recs[3].serialized_key_size == -1
    assert recs[0].topic == TOPIC and recs[0].partition == 0
    assert chunk.done and chunk.next_offset == 10


def test_records_before_fetch_offset_are_skipped(ready_state: PartitionState) -> None:
    chunk = chunk_of(ready_state, batch_bytes(100, values(10)), 104)
    assert [r.offset for r in take_all(chunk)] == list(range(104, 110))


def test_limit_splits_a_batch_and_resumes(ready_state: PartitionState) -> None:
    chunk = chunk_of(ready_state, batch_bytes(0, values(7)) + batch_bytes(7, values(3, 7)), 0)
    first = take_all(chunk, 3)
    second = take_all(chunk, 5)
    rest = take_all(chunk)
    assert [r.offset for r in first] == [0, 1, 2]
    assert [r.offset for r in second] == [3, 4, 5, 6, 7]
    assert [r.offset for r in rest] == [8, 9]
    assert chunk.done


def test_deserializers_and_headers(ready_state: PartitionState) -> None:
    data = batch_bytes(0, values(2), headers=[("h", b"x")], keys=[b"k0", None])
    chunk = chunk_of(ready_state, data, 0)
    out: list[ConsumerRecord] = []
    take_records(chunk, 10, out, lambda k: k.decode().upper(), lambda v: v.decode())
    assert [(r.key, r.value) for r in out] == [("K0", "v0"), (None, "v1")]
    assert out[0].headers == (("h", b"x"),)
    assert out[0].serialized_key_size == 2


def test_control_batches_are_skipped_and_position_passes_them(ready_state: PartitionState) -> None:
    data = batch_bytes(0, values(3)) + abort_marker(3, pid=7) + batch_bytes(4, values(2, 4))
    chunk = chunk_of(ready_state, data, 0)
    recs = take_all(chunk)
    assert [r.offset for r in recs] == [0, 1, 2, 4, 5]
    assert chunk.next_offset == 6


def test_read_committed_drops_aborted_transaction(ready_state: PartitionState) -> None:
    data = (
        batch_bytes(0, values(2), pid=7, transactional=True)  # aborted
        + batch_bytes(2, values(2, 2), pid=8, transactional=True)  # committed
        + abort_marker(4, pid=7)
        + batch_bytes(5, values(1, 5), pid=7, transactional=True)  # a later, clean txn
    )
    chunk = chunk_of(ready_state, data, 0, aborted=[(7, 0)])
    recs = take_all(chunk)
    assert [r.offset for r in recs] == [2, 3, 5]
    assert chunk.next_offset == 6


def test_read_committed_stops_at_last_stable_offset(ready_state: PartitionState) -> None:
    chunk = chunk_of(ready_state, batch_bytes(0, values(10)), 0, end=6, aborted=[])
    assert [r.offset for r in take_all(chunk)] == list(range(6))
    assert chunk.done and chunk.next_offset == 6


def test_only_control_records_still_advance(ready_state: PartitionState) -> None:
    chunk = chunk_of(ready_state, abort_marker(0, pid=1) + abort_marker(1, pid=2), 0)
    assert take_all(chunk) == []
    assert chunk.done and chunk.next_offset == 2


def test_crc_failure_raises(ready_state: PartitionState) -> None:
    data = bytearray(batch_bytes(0, values(3)))
    data[-1] ^= 0xFF
    chunk = chunk_of(ready_state, bytes(data), 0)
    from aiokafka.errors import CorruptRecordException

    with pytest.raises(CorruptRecordException, match="CRC"):
        take_all(chunk)


# -- the Fetcher's buffer and delivery filter ------------------------------------------------


class _NoClient:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the unit under test touched the client ({name})")


async def _fetcher_with(
    partitions: int, per_partition: int, **cfg: Any
) -> tuple[Fetcher, SubscriptionState, list[TopicPartition]]:
    config = ConsumerConfig(**cfg)
    sub = SubscriptionState(config.reset_strategy)
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    sub.assign_from_user(tps)
    fetcher = Fetcher(_NoClient(), sub, config)
    assert sub.assignment is not None
    for tp in tps:
        st = sub.assignment.state(tp)
        st.seek(0)
        chunk = chunk_of(st, batch_bytes(0, values(per_partition)), 0)
        fetcher._buffers[tp] = deque([chunk])
        fetcher.buffered_bytes += chunk.size
    return fetcher, sub, tps


async def test_max_records_is_shared_round_robin() -> None:
    fetcher, _, tps = await _fetcher_with(4, 10)
    got = await fetcher.fetched_records((), 0, max_records=8)
    assert {tp: len(r) for tp, r in got.items()} == dict.fromkeys(tps, 2)
    # Every later call continues each partition where it stopped.
    got2 = await fetcher.fetched_records((), 0, max_records=8)
    for tp in tps:
        assert [r.offset for r in got2[tp]] == [2, 3]


async def test_partition_filter_and_positions() -> None:
    fetcher, sub, tps = await _fetcher_with(3, 5)
    got = await fetcher.fetched_records([tps[1]], 0)
    assert list(got) == [tps[1]]
    assert sub.assignment is not None
    assert sub.assignment.state(tps[1]).position == 5
    assert sub.assignment.state(tps[0]).position == 0


async def test_buffer_accounting_releases_delivered_chunks() -> None:
    fetcher, _, _ = await _fetcher_with(2, 5)
    assert fetcher.buffered_bytes > 0
    await fetcher.fetched_records((), 0)
    assert fetcher.buffered_bytes == 0
    assert fetcher.buffered_partitions() == frozenset()


async def test_decoded_records_of_a_partly_read_batch_count_against_the_bound(
    record_path: str,
) -> None:
    """A batch cut by max_records is decoded whole and kept: its records are memory too."""
    fetcher, _, tps = await _fetcher_with(2, 50)
    got = await fetcher.fetched_records((), 0, max_records=10)
    assert sorted(len(r) for r in got.values()) == [5, 5]
    # 45 decoded records wait in each partition's batch: counted until handed out (the
    # native module's ConsumerRecords weigh more than aiokafka's records).
    decoded = fetcher._budget.decoded
    overhead = (
        delivery.NATIVE_DECODED_RECORD_OVERHEAD
        if record_path == "native"
        else delivery.DECODED_RECORD_OVERHEAD
    )
    assert 2 * 45 * overhead <= decoded < 2 * 45 * (overhead + 100)
    assert fetcher.peak_bytes >= fetcher.buffered_bytes + decoded
    await fetcher.fetched_records([tps[0]], 0)
    assert 0 < fetcher._budget.decoded < decoded  # tps[0]'s went out
    await fetcher.fetched_records((), 0)
    assert fetcher._budget.decoded == 0 and fetcher.buffered_bytes == 0


@pytest.mark.parametrize("change", ["revoking", "paused", "seek", "unassigned", "reset"])
async def test_stale_data_is_never_delivered(change: str) -> None:
    fetcher, sub, tps = await _fetcher_with(2, 5)
    assert sub.assignment is not None
    st = sub.assignment.state(tps[0])
    if change == "revoking":
        sub.mark_revoking([tps[0]])
    elif change == "paused":
        st.pause()
    elif change == "seek":
        st.seek(0)  # same offset, new epoch: read-ahead of the old epoch is void
    elif change == "unassigned":
        sub.set_assignment([tps[1]])
    elif change == "reset":
        st.await_reset()
    got = await fetcher.fetched_records((), 0)
    assert tps[0] not in got
    assert [r.offset for r in got[tps[1]]] == list(range(5))
    assert tps[0] not in fetcher.buffered_partitions()
    assert fetcher.buffered_bytes == 0


async def test_chunk_not_at_position_is_dropped() -> None:
    fetcher, sub, tps = await _fetcher_with(1, 5)
    assert sub.assignment is not None
    sub.assignment.state(tps[0]).consumed_to(3)  # someone else moved the position
    assert await fetcher.fetched_records((), 0) == {}
    assert fetcher.buffered_bytes == 0


@pytest.mark.parametrize("app_enabled", [True, False])
async def test_collector_is_paused_while_records_are_built(app_enabled: bool) -> None:
    import gc

    fetcher, _, _ = await _fetcher_with(2, 5)
    seen: list[bool] = []
    real_walk = delivery.walk

    def spy(*args: Any) -> int:
        seen.append(gc.isenabled())
        return real_walk(*args)

    was = gc.isenabled()
    if not app_enabled:
        gc.disable()
    try:
        delivery.walk = spy
        got = await fetcher.fetched_records((), 0)
        # The application's own choice survives the call, either way.
        assert gc.isenabled() is app_enabled
    finally:
        delivery.walk = real_walk
        if was:
            gc.enable()
    assert sum(len(r) for r in got.values()) == 10
    assert seen and not any(seen)


async def test_bad_max_records_is_rejected() -> None:
    fetcher, _, _ = await _fetcher_with(1, 1)
    with pytest.raises(ValueError, match="max_records"):
        await fetcher.fetched_records((), 0, max_records=0)


async def test_closed_fetcher_refuses() -> None:
    from aiokafka.errors import ConsumerStoppedError

    fetcher, _, _ = await _fetcher_with(1, 1)
    await fetcher.close()
    await fetcher.close()  # idempotent
    with pytest.raises(ConsumerStoppedError):
        await fetcher.fetched_records((), 0)


# -- the Arrow path ----------------------------------------------------------------------


async def test_arrow_batch_equals_consumer_records() -> None:
    from aiogroup._fetch.arrow import records_to_arrow

    a, _, _ = await _fetcher_with(3, 7)
    b, _, _ = await _fetcher_with(3, 7)
    records = await a.fetched_records((), 0, max_records=10)
    batch = await b.fetched_arrow((), 0, max_records=10)
    assert batch is not None
    flat = [r for recs in records.values() for r in recs]
    expected = records_to_arrow(flat)
    assert batch.schema == expected.schema
    assert sorted(batch.to_pylist(), key=lambda d: (d["partition"], d["offset"])) == sorted(
        expected.to_pylist(), key=lambda d: (d["partition"], d["offset"])
    )
    assert batch.num_rows == 10


def test_arrow_headers_and_partial_batches(ready_state: PartitionState) -> None:
    from aiogroup._fetch.arrow import ColumnBuilder, records_to_arrow

    data = batch_bytes(
        0, values(4), headers=[("h", b"1"), ("g", b"2")], keys=[b"a", None, b"c", b"d"]
    )
    cols = ColumnBuilder()
    chunk = chunk_of(ready_state, data, 1)
    assert walk(chunk, 2, cols) == 2  # partial batch: the per-record path
    assert walk(chunk, 10, cols) == 1
    batch = cols.to_record_batch()
    expected = records_to_arrow(take_all(chunk_of(ready_state, data, 1)))
    assert batch.to_pylist() == expected.to_pylist()
    assert batch.column("headers").to_pylist()[0] == [
        {"key": "h", "value": b"1"},
        {"key": "g", "value": b"2"},
    ]
    assert batch.column("key").to_pylist() == [None, b"c", b"d"]


def test_arrow_run_length_columns_across_batches_and_partitions() -> None:
    # Header-less rows before and after rows with headers, two partitions, and a
    # batch with an offset gap (compaction): the run-length columns expand to what
    # the ConsumerRecord path produces, row for row.
    from aiogroup._fetch.arrow import ColumnBuilder, records_to_arrow

    sub = SubscriptionState()
    states = [PartitionState(TopicPartition(TOPIC, p), sub.default_reset) for p in (0, 1)]
    for st in states:
        st.seek(0)
    gapped = bytearray(batch_bytes(6, values(3, 6)))
    # lastOffsetDelta 4 with 3 records: offsets 6, 7, 8 and a gap before 11.
    gapped[23:27] = (4).to_bytes(4, "big")
    struct.pack_into(">I", gapped, 17, calc_crc32c(bytes(gapped[_ATTR_POS:])))
    data0 = batch_bytes(0, values(3)) + batch_bytes(3, values(3, 3), headers=[("h", b"x")])
    data1 = batch_bytes(0, values(2, 10)) + bytes(gapped)
    cols = ColumnBuilder()
    expected: list[ConsumerRecord] = []
    for st, data, n in zip(states, (data0, data1), (6, 5), strict=True):
        assert walk(chunk_of(st, data, 0), 100, cols) == n
        expected += take_all(chunk_of(st, data, 0))
    batch = cols.to_record_batch()
    assert len(cols) == batch.num_rows == 11
    assert batch.to_pylist() == records_to_arrow(expected).to_pylist()
    assert batch.column("partition").to_pylist() == [0] * 6 + [1] * 5
    assert batch.column("offset").to_pylist()[6:] == [0, 1, 6, 7, 8]
    assert [len(h) for h in batch.column("headers").to_pylist()] == [0] * 3 + [1] * 3 + [0] * 5


async def test_unlimited_call_hands_out_one_chunk_per_partition() -> None:
    fetcher, sub, tps = await _fetcher_with(1, 5)
    assert sub.assignment is not None
    st = sub.assignment.state(tps[0])
    second = chunk_of(st, batch_bytes(5, values(3, 5)), 5)
    fetcher._buffers[tps[0]].append(second)
    fetcher.buffered_bytes += second.size
    first_call = await fetcher.fetched_records((), 0)
    assert [r.offset for r in first_call[tps[0]]] == [0, 1, 2, 3, 4]
    second_call = await fetcher.fetched_records((), 0)
    assert [r.offset for r in second_call[tps[0]]] == [5, 6, 7]
    assert st.position == 8
    assert fetcher.buffered_bytes == 0


def test_arrow_without_pyarrow_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from aiogroup._fetch.arrow import require_pyarrow

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"pip install 'aiogroup\[spark\]'"):
        require_pyarrow()


def test_deserializers_on_a_split_batch(ready_state: PartitionState) -> None:
    chunk = chunk_of(ready_state, batch_bytes(0, values(3), keys=[b"a", b"b", None]), 0)
    out: list[ConsumerRecord] = []
    assert take_records(chunk, 1, out, bytes.upper, len) == 1  # per-record path
    assert take_records(chunk, 5, out, bytes.upper, len) == 2
    assert [(r.key, r.value) for r in out] == [(b"A", 2), (b"B", 2), (None, 2)]


@pytest.mark.parametrize("call", ["next_record", "fetched_records", "fetched_arrow"])
async def test_error_reported_while_waiting_wakes_the_poll(call: str) -> None:
    """A listener exception or fatal group error reported while the application is
    already waiting surfaces from that wait (getone has no deadline to end it)."""
    fetcher, sub, _ = await _fetcher_with(1, 0)
    fetcher._buffers.clear()
    fetcher.buffered_bytes = 0
    if call == "next_record":
        waiting = asyncio.ensure_future(fetcher.next_record(()))
    elif call == "fetched_records":
        waiting = asyncio.ensure_future(fetcher.fetched_records((), 3600))
    else:
        waiting = asyncio.ensure_future(fetcher.fetched_arrow((), 3600))
    await asyncio.sleep(0)  # let it reach its wait
    assert not waiting.done()
    boom = RuntimeError("listener failed")
    sub.report_error(boom)
    with pytest.raises(RuntimeError, match="listener failed"):
        await asyncio.wait_for(waiting, 5)
    assert sub.pending_error is None  # raised once, not again at the next poll
    assert await fetcher.fetched_records((), 0) == {}


@pytest.mark.parametrize("timeout", [3600.0, None], ids=["getmany", "getone"])
async def test_cancel_while_data_arrives_is_not_swallowed(timeout: float | None) -> None:
    """Data arriving in the same loop iteration as the cancellation of a waiting
    poll must not win: the task has to end cancelled (asyncio.wait_for before 3.12
    returned the inner result instead, and the poll went on)."""
    fetcher, _, _ = await _fetcher_with(1, 0)
    fetcher._buffers.clear()
    fetcher.buffered_bytes = 0
    if timeout is None:
        poll = asyncio.ensure_future(fetcher.next_record(()))
    else:
        poll = asyncio.ensure_future(fetcher.fetched_records((), timeout))
    for _ in range(3):
        await asyncio.sleep(0)  # let it reach its wait
    assert not poll.done()
    fetcher._data_ready.set()  # nothing buffered: a spurious wake-up, as after a seek
    poll.cancel()
    done, _ = await asyncio.wait({poll}, timeout=5)
    assert poll in done, "the poll swallowed its cancellation and went on waiting"
    assert poll.cancelled()


async def test_nothing_is_handed_out_past_the_membership_deadline() -> None:
    """A process frozen past its session (SIGSTOP) wakes with records buffered: none
    reaches the application until the routine has judged the membership."""
    fetcher, sub, tps = await _fetcher_with(1, 5)
    now = asyncio.get_running_loop().time()
    sub.set_membership_valid_until(now - 0.001)  # the session deadline has passed
    assert await fetcher.fetched_records((), 0) == {}
    waiting = asyncio.ensure_future(fetcher.fetched_records((), 5))
    await asyncio.sleep(0)  # the poll is parked, not spinning
    assert not waiting.done()
    # The routine found the membership alive (a heartbeat answered): the waiting poll
    # is woken and delivers.
    sub.set_membership_valid_until(now + 30)
    got = await asyncio.wait_for(waiting, 5)
    assert [r.offset for r in got[tps[0]]] == [0, 1, 2, 3, 4]
    sub.set_membership_valid_until(None)  # no session bounds delivery (joining, no group)
    assert sub.membership_current(now + 10**6)


def _sized(key: bytes | None, value: bytes | None) -> ConsumerRecord:
    return ConsumerRecord(
        "t",
        0,
        0,
        0,
        0,
        key,
        value,
        None,
        -1 if key is None else len(key),
        -1 if value is None else len(value),
        (),
    )


def test_records_and_bytes_counts_key_and_value_bytes_missing_ones_as_zero() -> None:
    shapes = [(None, None), (b"", b""), (b"k", None), (None, b"vv"), (b"key", b"x" * 100)]
    records = [_sized(k, v) for k, v in shapes]
    # The definition: key + value bytes, a missing key or value (size -1) counting 0.
    expected = sum(max(0, r.serialized_key_size) + max(0, r.serialized_value_size) for r in records)
    assert expected == 1 + 2 + 3 + 100
    assert delivery.records_and_bytes([records[:2], [], records[2:]]) == (5, expected)
    assert delivery.records_and_bytes([]) == (0, 0)
    assert [delivery.record_bytes(r) for r in records] == [0, 0, 1, 2, 103]
