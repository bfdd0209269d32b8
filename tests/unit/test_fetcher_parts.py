"""The fetcher's pure parts: budget arithmetic, the Fetch error table, the record walker."""

from __future__ import annotations

import json
import tracemalloc
from collections import deque
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import RequestTimedOutError, TopicAuthorizationFailedError

from aiogroup._fetch.arrow import ColumnBuilder, records_to_arrow
from aiogroup._fetch.decoding import Chunk, split_batches
from aiogroup._fetch.fetcher import Fetcher
from aiogroup._fetch.native import native_records
from aiogroup._fetch.planning import (
    COPIES_WHILE_HANDLED,
    FIRST_COPIES,
    SMALLEST_BATCH_BYTES,
    MemoryBudget,
    chunk_bytes,
    planning_order,
)
from aiogroup._fetch.responses import (
    FETCH_REACTIONS,
    Reaction,
    build_fetch_request,
    parse_fetch_response,
    reaction_for,
)
from aiogroup._fetch.walker import RecordSink, walk
from aiogroup._state.subscription import PartitionState, SubscriptionState
from aiogroup.config import ConsumerConfig
from aiogroup.errors import (
    RETRIABLE_CODES,
    STALE_METADATA_CODES,
    RecordDeserializationError,
    is_retriable,
)
from aiogroup.structs import TopicPartition
from tests.unit.chunks import chunk_of
from tests.unit.test_fetcher_delivery import batch_bytes, take_all

#: The record path both ways: the native module's (when it is built) and the pure one.
RECORD_PATHS = ["pure", *(["native"] if native_records() is not None else [])]


@pytest.fixture(autouse=True, params=RECORD_PATHS)
def record_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs on both record paths (``AIOGROUP_NATIVE``)."""
    path: str = request.param
    monkeypatch.setenv("AIOGROUP_NATIVE", "1" if path == "native" else "0")
    assert (RecordSink(None, None).takes_raw) is (path == "native")
    return path


TP = TopicPartition("t", 0)
MiB = 1 << 20

# -- the memory budget ---------------------------------------------------------------------


def test_unbounded_budget_never_limits() -> None:
    b = MemoryBudget(0, MiB, 50 * MiB)
    assert b.room() is None and b.can_request()
    assert b.request_sizes([1, 3, 100]) == [MiB, 3 * MiB, 50 * MiB]
    assert b.reserve(MiB) == 0 and b.reserved == 0


def test_room_is_a_third_of_what_is_left() -> None:
    b = MemoryBudget(30 * MiB, MiB, 50 * MiB)
    assert b.room() == 10 * MiB
    b.buffer(6 * MiB)
    b.reserve(MiB)  # reserves three copies
    assert b.reserved == COPIES_WHILE_HANDLED * MiB
    assert b.room() == (30 - 6 - 3) * MiB // 3
    assert b.peak == 9 * MiB


def test_request_sizes_split_the_room_in_leader_order() -> None:
    b = MemoryBudget(30 * MiB, 4 * MiB, 50 * MiB)  # room 10 MiB, smallest 4 MiB
    # 1st leader: min(50, 2*4, 10) = 8; room 2 < 4: the 2nd waits for released data.
    assert b.request_sizes([2, 5]) == [8 * MiB]
    # n * P caps a request; fetch_max_bytes caps it too.
    assert MemoryBudget(300 * MiB, MiB, 3 * MiB).request_sizes([1, 10]) == [MiB, 3 * MiB]


def test_no_request_below_the_smallest_worth_a_round_trip() -> None:
    b = MemoryBudget(9 * MiB, 2 * MiB, 50 * MiB)  # smallest = min(P, B/3) = 2 MiB
    b.buffer(4 * MiB)  # room (9-4)/3 = 1.67 MiB
    assert not b.can_request()
    assert b.request_sizes([1]) == []
    b.release(4 * MiB)
    assert b.can_request() and b.request_sizes([1]) == [2 * MiB]


def test_the_decode_margin_is_left_free_by_every_request() -> None:
    # What reads may still decode of buffered chunks is not held yet, but a request
    # in flight while it is decoded must not have spent its room.
    b = MemoryBudget(30 * MiB, 2 * MiB, 50 * MiB)
    b.buffer(3 * MiB)
    b.margin = 6 * MiB
    assert b.room() == (30 - 3 - 6) * MiB // 3
    assert b.request_sizes([8]) == [7 * MiB]
    assert b.held == 3 * MiB  # a margin is not held: not in peak, nor the heap trim
    b.margin = 22 * MiB  # (30 - 3 - 22) / 3 < smallest (2 MiB): nothing goes out
    assert not b.can_request() and b.request_sizes([8]) == []
    b.margin = 0
    assert b.can_request() and b.request_sizes([8]) == [9 * MiB]


def test_budget_invariant_holds_over_any_sequence() -> None:
    # Whatever is requested, buffered + reserved never passes B while the
    # responses stay within max_bytes (the brokers' side of the contract).
    b = MemoryBudget(20 * MiB, 3 * MiB, 8 * MiB)
    inflight: list[tuple[int, int]] = []
    for step in range(200):
        if step % 3 == 2 and inflight:
            reserved, max_bytes = inflight.pop(0)
            b.unreserve(reserved)
            b.buffer(max_bytes)
        elif step % 5 == 4 and b.buffered:
            b.release(min(b.buffered, 5 * MiB))
        else:
            for size in b.request_sizes([1 + step % 4]):
                inflight.append((b.reserve(size), size))
        assert b.buffered + b.reserved <= b.limit
    assert b.peak <= b.limit


def test_the_last_response_a_connection_holds_counts_until_its_next_request() -> None:
    """aiokafka's reader keeps its last frame alive: other requests' room leaves it out."""
    b = MemoryBudget(30 * MiB, MiB, 50 * MiB)
    b.frame_held(1, 6 * MiB)
    b.frame_held(2, 3 * MiB)
    b.frame_held(1, 2 * MiB)  # node 1's next response replaces its last
    assert b.frames == 5 * MiB and b.room() == (25 * MiB) // COPIES_WHILE_HANDLED
    assert b.peak == 9 * MiB
    # Node 3's request leaves both frames out; node 1's may use its own frame's room.
    assert b.request_sizes([30], [3]) == [(25 * MiB) // 3]
    assert b.request_sizes([30], [1]) == [(27 * MiB) // 3]
    # Node 1's request takes its frame over; its response brings a new frame.
    reserved = b.reserve(9 * MiB, 1)
    assert (b.frames, b.reserved) == (3 * MiB, 27 * MiB)
    assert b.buffered + b.reserved + b.frames <= b.limit
    b.unreserve(reserved)
    b.buffer(9 * MiB)
    b.frame_held(1, 9 * MiB)
    assert b.buffered + b.reserved + b.frames <= b.limit
    b.clear_frames()
    assert b.frames == 0


def test_a_frame_never_keeps_out_the_request_that_lets_it_go() -> None:
    """A small bound, one broker: its last response's frame must not stop fetching."""
    b = MemoryBudget(9 * MiB, 2 * MiB, 50 * MiB)
    b.frame_held(1, 3 * MiB)  # a whole third of the bound
    assert b.room() == 2 * MiB and b.can_request()
    assert b.request_sizes([4], [1]) == [3 * MiB]
    reserved = b.reserve(3 * MiB, 1)
    assert b.frames == 0 and reserved == 9 * MiB


def test_budget_invariant_holds_with_frames_over_any_sequence() -> None:
    b = MemoryBudget(20 * MiB, 3 * MiB, 8 * MiB)
    inflight: list[tuple[int, int, int]] = []
    for step in range(300):
        node = step % 3
        if step % 3 == 2 and inflight:
            reserved, max_bytes, at = inflight.pop(0)
            b.unreserve(reserved)
            b.buffer(max_bytes)
            b.frame_held(at, max_bytes)
        elif step % 5 == 4 and b.buffered:
            b.release(min(b.buffered, 5 * MiB))
        elif node not in {at for _, _, at in inflight}:
            for size in b.request_sizes([1 + step % 4], [node]):
                inflight.append((b.reserve(size, node), size, node))
        assert b.buffered + b.reserved + b.frames <= b.limit
    assert b.peak <= b.limit


@pytest.mark.parametrize("records_per_batch", [1, 150])
def test_a_chunk_counts_the_objects_its_batches_live_in(records_per_batch: int) -> None:
    """What a chunk is charged covers what splitting and reading its record set allocates.

    Counting the record bytes alone let a stalled consumer of 1-record batches hold
    2.4x its bound (measured: 38.7 MiB of RSS growth against 16 MiB).
    """
    one = batch_bytes(0, [b"x" * 100] * records_per_batch)
    record_set = one * 2_000
    state = PartitionState(TP, SubscriptionState().default_reset)
    tracemalloc.start()
    try:
        batches = split_batches(record_set)
        chunk = Chunk(
            state,
            state.epoch,
            0,
            batches,
            chunk_bytes(len(record_set), len(batches)),
            end_offset=batches[-1].next_offset,
            check_crcs=True,
            aborted=None,
            data=record_set,
        )
        assert chunk.raw_span(0) == (0, len(one))  # the spans exist, as after a CRC check
        allocated, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(batches) == 2_000
    assert chunk.size - len(record_set) >= allocated


def test_requests_reserve_what_a_response_of_small_batches_will_hold() -> None:
    """1-record batches hold ~2.8x their bytes as chunks: with the frame, 4 copies."""
    b = MemoryBudget(16 * MiB, MiB, 50 * MiB)
    record_set = 2_000 * 170
    b.learn(record_set, chunk_bytes(record_set, 2_000))
    assert b.copies == 4
    assert b.room() == (16 * MiB) // 4
    assert b.reserve(MiB) == 4 * MiB
    b.unreserve(4 * MiB)
    b.learn(16 * MiB, chunk_bytes(16 * MiB, 1_000))  # large batches again: three copies
    assert b.copies == COPIES_WHILE_HANDLED
    b.learn(68, chunk_bytes(68, 1))  # one tiny batch alone: capped
    assert b.copies == FIRST_COPIES


def test_a_first_request_reserves_for_a_record_set_of_the_smallest_batches() -> None:
    smallest = batch_bytes(0, [b""])
    assert len(smallest) == SMALLEST_BATCH_BYTES
    record_set = smallest * 1_000
    held = chunk_bytes(len(record_set), 1_000)
    # The frame and the chunk made of it, both alive while the response is handled.
    assert FIRST_COPIES * len(record_set) >= len(record_set) + held
    b = MemoryBudget(16 * MiB, MiB, 50 * MiB, copies=FIRST_COPIES)
    assert b.reserve(MiB) == FIRST_COPIES * MiB


def test_planning_order_rotates_and_puts_empty_partitions_first() -> None:
    items = ["a", "b", "c", "d"]
    buffered = {"b"}
    assert planning_order(items, 1, buffered.__contains__) == ["c", "d", "a", "b"]
    assert planning_order(items, 4, buffered.__contains__) == ["a", "c", "d", "b"]
    assert planning_order([], 3, buffered.__contains__) == []


# -- the Fetch error table ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "reaction"),
    [
        (0, Reaction.DELIVER),
        (1, Reaction.RESET_POSITION),
        (3, Reaction.REFRESH_METADATA),
        (6, Reaction.REFRESH_METADATA),
        (74, Reaction.REFRESH_METADATA),
        (7, Reaction.RETRY),
        (78, Reaction.RETRY),
        (29, Reaction.REPORT),  # TOPIC_AUTHORIZATION_FAILED
        (2, Reaction.REPORT),  # CORRUPT_MESSAGE
        (9999, Reaction.REPORT),  # a code nobody knows yet
    ],
)
def test_fetch_reaction_for_code(code: int, reaction: Reaction) -> None:
    assert reaction_for(code) is reaction


def test_error_table_agrees_with_the_package_list() -> None:
    retried = {
        c for c, r in FETCH_REACTIONS.items() if r in (Reaction.RETRY, Reaction.REFRESH_METADATA)
    }
    assert retried == RETRIABLE_CODES
    assert {c for c, r in FETCH_REACTIONS.items() if r is Reaction.REFRESH_METADATA} == (
        STALE_METADATA_CODES
    )


def test_is_retriable() -> None:
    assert is_retriable(RequestTimedOutError())
    assert is_retriable(TimeoutError())
    assert not is_retriable(TopicAuthorizationFailedError())
    assert not is_retriable(ValueError())


@pytest.mark.parametrize("version", [3, 4, 5, 11])
def test_parse_fetch_response_by_version(version: int) -> None:
    if version < 4:
        row: tuple[Any, ...] = (0, 0, 100, b"x")
    elif version == 4:
        row = (0, 0, 100, 90, [(7, 80)], b"x")
    else:
        row = (0, 0, 100, 90, 5, [(7, 80)], b"x")
    [result] = parse_fetch_response(SimpleNamespace(API_VERSION=version, topics=[("t", [row])]))
    assert (result.tp, result.error_code, result.highwater, result.records) == (TP, 0, 100, b"x")
    assert result.last_stable_offset == (90 if version >= 4 else -1)
    assert result.log_start_offset == (5 if version >= 5 else -1)
    assert result.aborted == ([(7, 80)] if version >= 4 else None)


def test_build_fetch_request_groups_by_topic() -> None:
    req = build_fetch_request(
        [(TP, 5), (TopicPartition("u", 2), 7), (TopicPartition("t", 1), 9)],
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=MiB,
        partition_bytes=1024,
        read_committed=True,
    )
    # aiokafka keeps the fields private
    assert (req._max_bytes, req._isolation_level, req._max_wait_ms) == (MiB, 1, 500)
    assert req._topics == [("t", [(0, 5, 1024), (1, 9, 1024)]), ("u", [(2, 7, 1024)])]


# -- the walker, both sinks, and the deserialization rule ----------------------------------


@pytest.fixture
def st() -> PartitionState:
    state = PartitionState(TP, SubscriptionState().default_reset)
    state.seek(0)
    return state


JSON = [b'{"n": 0}', b'{"n": 1}', b"not json", b'{"n": 3}', b'{"n": 4}']


@pytest.mark.parametrize("first", [0, 1], ids=["whole-batch", "partial-batch"])
def test_walker_stops_before_a_refused_record(st: PartitionState, first: int) -> None:
    """Records before the bad one are taken, the bad one stays next, and it is
    refused again on every walk until something moves past it."""
    chunk = chunk_of(st, batch_bytes(0, JSON), first)
    sink = RecordSink(None, json.loads)
    assert walk(chunk, 100, sink) == 2 - first
    assert [r.value for r in sink.result[TP]] == [{"n": i} for i in range(first, 2)]
    assert chunk.next_offset == 2
    err = chunk.failure
    assert isinstance(err, RecordDeserializationError)
    assert (err.tp, err.offset, err.origin) == (TP, 2, "value")
    assert isinstance(err.__cause__, json.JSONDecodeError)
    assert "t-0" in str(err) and "offset 2" in str(err)
    again = RecordSink(None, json.loads)
    assert walk(chunk, 100, again) == 0
    assert chunk.failure is not None and chunk.failure.offset == 2 and chunk.next_offset == 2
    assert not chunk.done


def test_key_deserializer_refusal_names_the_key(st: PartitionState) -> None:
    chunk = chunk_of(st, batch_bytes(0, [b"a", b"b"], keys=[b"1", b"x"]), 0)
    sink = RecordSink(int, None)
    assert walk(chunk, 10, sink) == 1
    assert chunk.failure is not None and chunk.failure.origin == "key"
    assert chunk.failure.offset == 1


def test_walker_fills_both_sinks_alike(st: PartitionState) -> None:
    data = (
        batch_bytes(0, [b"a", b"b", b"c"], headers=[("h", b"1")])
        + batch_bytes(3, [b"d", b"e"], keys=[b"k", None])
        + batch_bytes(5, [b"f"])
    )
    for limits in ([100], [2, 2, 2], [1] * 6, [4, 2]):
        records = RecordSink(None, None)
        columns = ColumnBuilder()
        chunk_r, chunk_c = chunk_of(st, data, 0), chunk_of(st, data, 0)
        for n in limits:
            assert walk(chunk_r, n, records) == walk(chunk_c, n, columns)
            assert chunk_r.next_offset == chunk_c.next_offset
        assert chunk_r.done and chunk_c.done and chunk_r.next_offset == 6
        recs = records.result[TP]
        assert [r.offset for r in recs] == list(range(6))
        assert columns.to_record_batch().to_pylist() == records_to_arrow(recs).to_pylist()
    assert [r.value for r in take_all(chunk_of(st, data, 4))] == [b"e", b"f"]


# -- the deserialization rule through the Fetcher's read paths ------------------------------


async def _json_fetcher(
    partitions: int = 1,
) -> tuple[Fetcher, SubscriptionState, list[TopicPartition]]:
    config = ConsumerConfig(value_deserializer=json.loads)
    sub = SubscriptionState(config.reset_strategy)
    tps = [TopicPartition("t", p) for p in range(partitions)]
    sub.assign_from_user(tps)
    fetcher = Fetcher(object(), sub, config)
    assert sub.assignment is not None
    for i, tp in enumerate(tps):
        state = sub.assignment.state(tp)
        state.seek(0)
        data = batch_bytes(0, JSON if i == 0 else [b"1", b"2"])
        chunk = chunk_of(state, data, 0)
        fetcher._buffers[tp] = deque([chunk])
        fetcher.buffered_bytes += chunk.size
    return fetcher, sub, tps


@pytest.mark.parametrize("read", ["getmany", "getmany-1", "getone"])
async def test_refused_record_is_raised_after_the_good_ones_until_sought_past(read: str) -> None:
    fetcher, sub, [tp] = await _json_fetcher()
    assert sub.assignment is not None
    state = sub.assignment.state(tp)

    async def once() -> list[int]:
        if read == "getone":
            return [(await fetcher.next_record(())).offset]
        got = await fetcher.fetched_records((), 0, 1 if read == "getmany-1" else None)
        return [r.offset for r in got.get(tp, [])]

    delivered: list[int] = []
    while len(delivered) < 2:
        delivered += await once()
    assert delivered == [0, 1]
    for _ in range(3):  # every read raises while the position stays on the record
        with pytest.raises(RecordDeserializationError) as info:
            await once()
        assert (info.value.tp, info.value.offset) == (tp, 2)
        assert state.position == 2
    state.seek(3)  # the application skips it
    fetcher._buffers[tp] = deque([chunk_of(state, batch_bytes(0, JSON), 3)])
    rest: list[int] = []
    while len(rest) < 2:
        rest += await once()
    assert rest == [3, 4] and state.position == 5


async def test_other_partitions_keep_flowing_and_a_filter_hides_the_refusal() -> None:
    fetcher, sub, tps = await _json_fetcher(2)
    first = await fetcher.fetched_records((), 0)
    assert {tp: [r.offset for r in recs] for tp, recs in first.items()} == {
        tps[0]: [0, 1],
        tps[1]: [0, 1],
    }
    # Reading only the healthy partition neither raises nor spins.
    assert await fetcher.fetched_records([tps[1]], 0) == {}
    with pytest.raises(RecordDeserializationError):
        await fetcher.fetched_records((), 0)
    assert sub.assignment is not None and sub.assignment.state(tps[0]).position == 2


# -- the import rule ------------------------------------------------------------------------


def _imports(path: Any) -> set[str]:
    import ast

    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_no_cycle_between_the_fetcher_and_its_parts() -> None:
    """The parts never import the fetcher's wiring, nor the coordination wing.

    ``arrow`` is a sink of the walker, so only the fetcher may import it; no module of
    the fetch wing imports ``aiogroup._coordination`` (the fetcher reads the state
    object, never the coordinator).
    """
    from pathlib import Path

    import aiogroup

    wing = Path(aiogroup.__file__).parent / "_fetch"
    arrow = _imports(wing / "arrow.py")
    assert not {m for m in arrow if m.startswith("aiogroup._fetch.fetcher")}
    for module in wing.glob("*.py"):
        imported = _imports(module)
        assert not {m for m in imported if m.startswith("aiogroup._coordination")}, module.name
        if module.name == "fetcher.py":
            continue
        assert not {m for m in imported if m.startswith("aiogroup._fetch.fetcher")}, module.name
        if module.name != "arrow.py":
            assert not {m for m in imported if m.startswith("aiogroup._fetch.arrow")}, module.name
