"""The delivered-bytes metric: the key + value bytes of exactly the records handed out.

The record path counts the bytes as it builds the records (``RecordSink.sizes``; with
the native module from the sizes its parse found, and for a batch read in part from
the running sums the chunk keeps) instead of reading each record's sizes back.  These
tests hold that count to an oracle computed independently - the lengths of the raw
keys and values the batches were built from - over every way a read can start, stop
or be cut short: getmany whole and cut by ``max_records``, a fetch that starts inside
a batch, ``async for`` (counted once a second and at the ends of runs), a seek in the
middle of a chunk, a pause and a new assignment that drop buffered or held records,
and a deserializer's refusal.  Each runs on the pure path, the native path, and the
native path of a build older than ``consumer_records_sized`` (the wrapper).
"""

from __future__ import annotations

import struct
import types
from collections import deque
from typing import Any

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from aiogroup._fetch import native
from aiogroup._fetch.fetcher import Fetcher
from aiogroup._fetch.iteration import HeldRecords
from aiogroup._fetch.walker import RecordSink, key_value_bytes, walk
from aiogroup._state.subscription import PartitionState, SubscriptionState
from aiogroup.config import ConsumerConfig
from aiogroup.errors import RecordDeserializationError
from aiogroup.structs import ConsumerRecord, TopicPartition
from tests.unit.chunks import chunk_of

TOPIC = "t"
_BUILT = native.native_records() is not None
PATHS = ["pure", *(["native", "native-prebuilt"] if _BUILT else [])]


@pytest.fixture(autouse=True, params=PATHS)
def record_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs on each record path.

    ``native-prebuilt``: the native module as a build without ``consumer_records_sized``
    (the shared environment's until it is reinstalled): the wrapper counts the bytes.
    """
    path: str = request.param
    monkeypatch.setenv("AIOGROUP_NATIVE", "0" if path == "pure" else "1")
    if path == "native-prebuilt":
        mod = native._load()
        names = [n for n in dir(mod) if not n.startswith("__") and n != "consumer_records_sized"]
        shim = types.SimpleNamespace(**{n: getattr(mod, n) for n in names})
        monkeypatch.setattr(native, "_module", shim)
        monkeypatch.setattr(native, "_tried", True)
    sink = RecordSink(None, None)
    assert sink.takes_raw is (path != "pure")
    if path == "native":
        built = getattr(native._load(), "consumer_records_sized", None)
        if built is None:
            pytest.fail("aiogroup_native has no consumer_records_sized: rebuild it (make install)")
        assert native.native_records_sized() is built
    return path


#: Raw key and value per (partition, offset): the oracle's source.
Raw = dict[tuple[int, int], tuple[bytes | None, bytes | None]]


def _key(i: int) -> bytes | None:
    return None if i % 4 == 1 else b"" if i % 4 == 2 else b"k" * (i % 7 + 1)


def _value(i: int) -> bytes | None:
    return None if i % 9 == 5 else bytes([65 + i % 26]) * (i * 37 % 301)


def _batch(partition: int, base: int, count: int, raw: Raw) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(count):
        k, v = _key(base + i + partition), _value(base + i + 3 * partition)
        builder.append(i, 1_700_000_000_000 + base + i, k, v, [])
        raw[(partition, base + i)] = (k, v)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    struct.pack_into(">I", data, 17, calc_crc32c(bytes(data[21:])))
    return bytes(data)


def expected(records: list[ConsumerRecord], raw: Raw) -> int:
    """The oracle: the raw keys' and values' lengths (a missing one counts 0)."""
    total = 0
    for r in records:
        k, v = raw[(r.partition, r.offset)]
        total += len(k or b"") + len(v or b"")
    return total


class _NoClient:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the unit under test touched the client ({name})")


#: Per partition: the batch sizes (records) of its one buffered chunk.
SHAPE = [7, 1, 12, 5]


def _fetcher(
    partitions: int = 3, fetch_offset: int = 0, **cfg: Any
) -> tuple[Fetcher, SubscriptionState, list[TopicPartition], Raw]:
    config = ConsumerConfig(**cfg)
    sub = SubscriptionState(config.reset_strategy)
    tps = [TopicPartition(TOPIC, p) for p in range(partitions)]
    sub.assign_from_user(tps)
    fetcher = Fetcher(_NoClient(), sub, config)
    assert sub.assignment is not None
    raw: Raw = {}
    for tp in tps:
        data = b""
        base = 0
        for count in SHAPE:
            data += _batch(tp.partition, base, count, raw)
            base += count
        st = sub.assignment.state(tp)
        st.seek(fetch_offset)
        chunk = chunk_of(st, data, fetch_offset)
        fetcher._buffers[tp] = deque([chunk])
        fetcher.buffered_bytes += chunk.size
    return fetcher, sub, tps, raw


def _flat(result: dict[TopicPartition, list[ConsumerRecord]]) -> list[ConsumerRecord]:
    return [r for records in result.values() for r in records]


# -- getmany ----------------------------------------------------------------------------------


async def test_getmany_counts_the_bytes_of_the_records_it_returns() -> None:
    fetcher, _, _, raw = _fetcher()
    result, nbytes = await fetcher.fetched_records_and_bytes((), 0)
    records = _flat(result)
    assert len(records) == 3 * sum(SHAPE)
    assert nbytes == expected(records, raw) > 0


@pytest.mark.parametrize("max_records", [1, 2, 3, 5, 8, 13, 100])
async def test_getmany_cut_by_max_records_counts_each_cut_exactly(max_records: int) -> None:
    """Cuts inside batches: the partly read batch's slices are counted from its sums."""
    fetcher, _, _, raw = _fetcher()
    seen: list[ConsumerRecord] = []
    for _ in range(1000):
        result, nbytes = await fetcher.fetched_records_and_bytes((), 0, max_records)
        if not result:
            break
        records = _flat(result)
        assert len(records) <= max_records
        assert nbytes == expected(records, raw)
        seen += records
    assert len(seen) == 3 * sum(SHAPE)
    assert len({(r.partition, r.offset) for r in seen}) == len(seen)


@pytest.mark.parametrize("fetch_offset", [3, 7, 9, 20])
async def test_a_fetch_starting_inside_a_batch_counts_only_what_follows(fetch_offset: int) -> None:
    fetcher, _, _, raw = _fetcher(fetch_offset=fetch_offset)
    total = 0
    seen: list[ConsumerRecord] = []
    while True:
        result, nbytes = await fetcher.fetched_records_and_bytes((), 0, 4)
        if not result:
            break
        seen += _flat(result)
        total += nbytes
    assert min(r.offset for r in seen) == fetch_offset
    assert len(seen) == 3 * (sum(SHAPE) - fetch_offset)
    assert total == expected(seen, raw)


async def test_a_pause_drops_a_partly_read_batch_and_its_bytes_are_never_counted() -> None:
    fetcher, sub, tps, raw = _fetcher()
    first, first_bytes = await fetcher.fetched_records_and_bytes((), 0, 6)  # cuts batch 0
    assert first_bytes == expected(_flat(first), raw)
    assert sub.assignment is not None
    sub.assignment.state(tps[0]).pause()
    rest: list[ConsumerRecord] = []
    total = 0
    while True:
        result, nbytes = await fetcher.fetched_records_and_bytes((), 0, 6)
        if not result:
            break
        rest += _flat(result)
        total += nbytes
    assert tps[0] not in {TopicPartition(r.topic, r.partition) for r in rest}
    assert total == expected(rest, raw)


async def test_a_seek_inside_the_partly_read_batch_counts_only_what_is_returned() -> None:
    fetcher, sub, tps, raw = _fetcher(partitions=1)
    first, first_bytes = await fetcher.fetched_records_and_bytes((), 0, 3)  # 3 of batch 0
    assert [r.offset for r in _flat(first)] == [0, 1, 2]
    assert first_bytes == expected(_flat(first), raw)
    assert sub.assignment is not None
    sub.assignment.state(tps[0]).seek(5)  # the read-ahead is dropped at the next read
    result, nbytes = await fetcher.fetched_records_and_bytes((), 0, 3)
    assert (result, nbytes) == ({}, 0)


async def test_a_refused_record_counts_the_records_before_it_only() -> None:
    def value(v: bytes) -> bytes:
        if v.startswith(b"E") and len(v) > 100:  # partition 0's offset 4
            raise ValueError("refused")
        return v[:1]  # a deserialized value of another length: raw sizes still count

    fetcher, _, _, raw = _fetcher(partitions=1, value_deserializer=value)
    refused = [o for (p, o), (_, v) in raw.items() if v and v.startswith(b"E") and len(v) > 100]
    assert refused == [4]
    # In a partly read batch: three records, then the one before the refused record.
    for offsets in ([0, 1, 2], [3]):
        result, nbytes = await fetcher.fetched_records_and_bytes((), 0, 3 if offsets[0] == 0 else 9)
        assert [r.offset for r in _flat(result)] == offsets
        assert nbytes == expected(_flat(result), raw)
    with pytest.raises(RecordDeserializationError):
        await fetcher.fetched_records_and_bytes((), 0, 9)
    # In a whole batch: the records the native builder made before it stopped.
    fetcher, _, _, raw = _fetcher(partitions=1, value_deserializer=value)
    result, nbytes = await fetcher.fetched_records_and_bytes((), 0, 100)
    assert [r.offset for r in _flat(result)] == [0, 1, 2, 3]
    assert nbytes == expected(_flat(result), raw)


# -- async for's held records -----------------------------------------------------------------


async def _iterated(fetcher: Fetcher, n: int) -> list[ConsumerRecord]:
    """``n`` steps of ``async for`` (the fetcher's refill, then its held records)."""
    out: list[ConsumerRecord] = []
    while len(out) < n:
        record = fetcher.held_record(0.0)
        if record is None:
            record = await fetcher.next_iterated()
        out.append(record)
    return out


@pytest.mark.parametrize("max_poll_records", [4, 500])
async def test_async_for_counts_what_it_handed_out_at_any_moment(max_poll_records: int) -> None:
    fetcher, _, _, raw = _fetcher(max_poll_records=max_poll_records)
    handed: list[ConsumerRecord] = []
    counted = [0, 0]
    for n in (1, 2, 5, 1, 9, 30, 3):  # counts in the middle of runs and at their ends
        handed += await _iterated(fetcher, n)
        more, more_bytes = fetcher.held.handed_out()
        counted[0] += more
        counted[1] += more_bytes
        assert counted == [len(handed), expected(handed, raw)]


async def test_async_for_counts_nothing_of_what_a_pause_gives_back() -> None:
    fetcher, sub, _, raw = _fetcher()
    handed = await _iterated(fetcher, 2)  # two of the first run's records
    run = fetcher.held.run
    assert run is not None and len(run.records) > 2
    assert sub.assignment is not None
    run.state.pause()
    handed += await _iterated(fetcher, 10)
    more, more_bytes = fetcher.held.handed_out()
    assert more == len(handed)
    assert more_bytes == expected(handed, raw)


async def test_async_for_counts_nothing_of_what_a_new_assignment_drops() -> None:
    fetcher, sub, tps, raw = _fetcher()
    handed = await _iterated(fetcher, 3)
    sub.assign_from_user(tps[1:])
    assert fetcher.held_record(0.0) is None  # every held run ends with the assignment
    assert fetcher.held.handed_out() == (3, expected(handed, raw))


async def test_async_for_counts_nothing_past_a_seek_in_the_middle_of_a_run() -> None:
    fetcher, _, _, raw = _fetcher(partitions=1)
    handed = await _iterated(fetcher, 4)
    run = fetcher.held.run
    assert run is not None and run.index == 4 < len(run.records)
    run.state.seek(2)  # back into what was handed out: the run ends, nothing more counts
    assert fetcher.held_record(0.0) is None
    assert fetcher.held.handed_out() == (4, expected(handed, raw))


# -- the pieces -------------------------------------------------------------------------------


def test_the_sink_counts_a_partly_read_batch_by_its_running_sums(record_path: str) -> None:
    raw: Raw = {}
    st = PartitionState(TopicPartition(TOPIC, 0), SubscriptionState().default_reset)
    st.seek(0)
    chunk = chunk_of(st, _batch(0, 0, 40, raw), 0)
    for limit in (3, 1, 11, 100):
        sink = RecordSink(None, None)
        walk(chunk, limit, sink)
        records = sink.result.get(st.tp, [])
        assert sink.nbytes == expected(records, raw)
        assert sink.sizes == ({st.tp: sink.nbytes} if records else {})
    assert chunk.done
    if record_path != "pure":
        assert chunk.pending_sizes is None  # let go with the batch


async def test_held_runs_count_from_the_sink_total_or_from_the_records() -> None:
    tp = TopicPartition(TOPIC, 0)
    raw: Raw = {(0, o): (_key(o), _value(o)) for o in range(10)}
    records = [
        ConsumerRecord(
            TOPIC,
            0,
            o,
            0,
            0,
            k,
            v,
            None,
            -1 if k is None else len(k),
            -1 if v is None else len(v),
            (),
        )
        for (_, o), (k, v) in raw.items()
    ]
    total = expected(records, raw)
    assert key_value_bytes(records) == total
    for sizes in ({tp: total}, None, {tp: total + 1_000_000}):
        sub = SubscriptionState()
        sub.assign_from_user([tp])
        assert sub.assignment is not None
        st = sub.assignment.state(tp)
        st.seek(0)
        st.consumed_to(10)
        held = HeldRecords(sub.delivery_changes)
        held.hold(sub.assignment, {tp: records}, {tp: 0}, sizes)
        counts = []
        for steps in (1, 2, 7):
            for _ in range(steps):
                assert held.take(sub.assignment) is not None
            counts.append(held.handed_out())
        n = [c[0] for c in counts]
        got = [c[1] for c in counts]
        assert n == [1, 2, 7]
        # The run's end takes the sink's total less what was counted: a wrong total
        # shows there (so the total is what is used, not a recount).
        wrong = 0 if sizes is None or sizes[tp] == total else 1_000_000
        assert got == [
            expected(records[:1], raw),
            expected(records[1:3], raw),
            expected(records[3:], raw) + wrong,
        ]
