"""Share records built natively against the pure-Python path: the same records (issue 28).

Differential: the same fetched bytes and acquired runs decoded with the native module
(``aiogroup_native.share_records``) and with ``AIOGROUP_NATIVE=0`` (aiokafka's batch
iterator and a tuple per record) must give equal records - every field, the run each
came from and its acquisition id - and mark the same gaps; across codecs, headers, null
keys and values, log-append timestamps, compacted offsets and runs that cut batches.
A malformed batch the native builder refuses falls back to the pure path, which raises
what it finds.
"""

from __future__ import annotations

import shutil
import struct
from typing import Any

import pytest
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

import aiogroup._fetch.share_records as share_records_module
from aiogroup._fetch.share_acknowledgements import AcknowledgementTracker
from aiogroup._fetch.share_records import ShareRecord, acquired_records

if shutil.which("cargo") is None:
    native = pytest.importorskip(
        "aiogroup_native", reason="the native decoder is not built (make install needs cargo)"
    )
else:
    try:
        import aiogroup_native as native
    except ImportError as exc:  # make install builds it wherever cargo is: a missing step
        pytest.fail(
            f"cargo is on PATH but aiogroup_native is not importable: {exc}; run make install"
        )
if not hasattr(native, "share_records"):
    pytest.fail("aiogroup_native predates share_records: rebuild it (make native)")

TP = ("t", 0)
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
LOG_APPEND_TIME = 0x08


def batch(
    base: int,
    count: int,
    *,
    skip: frozenset[int] = frozenset(),
    codec: str = "none",
    headers: int = 1,
    null_every: int = 0,
    log_append: bool = False,
) -> bytes:
    """A v2 batch of offsets ``base..base+count-1`` without ``skip`` (as compaction leaves
    them); every ``null_every``-th record with a null key and value."""
    builder = DefaultRecordBatchBuilder(2, CODECS[codec], 0, -1, -1, -1, 1 << 20)
    for i in range(count):
        if base + i in skip:
            continue
        null = null_every and i % null_every == 0
        builder.append(
            i,
            1_000 + 7 * i,
            None if null else f"k{i}".encode(),
            None if null else f"v{base + i}".encode() * (1 + i % 3),
            [(f"h{j}", None if j == 1 else bytes([j])) for j in range(headers)],
        )
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    if log_append:
        attrs = struct.unpack_from(">h", data, 21)[0] | LOG_APPEND_TIME
        struct.pack_into(">h", data, 21, attrs)
        struct.pack_into(">I", data, 17, native.crc32c(bytes(data[21:])))
    return bytes(data)


def decode(
    data: bytes,
    spans: list[tuple[int, int, int]],
    monkeypatch: pytest.MonkeyPatch,
    *,
    native_on: bool,
) -> tuple[list[tuple[Any, ...]], list[bytes], int]:
    """(records as full tuples with the run's index, each run's state, native calls)."""
    monkeypatch.setenv("AIOGROUP_NATIVE", "1" if native_on else "0")
    calls = 0
    real = share_records_module.native_share_records

    def counting() -> Any:
        fn = real()
        if fn is None:
            return None

        def wrapped(*args: Any) -> Any:
            nonlocal calls
            calls += 1
            return fn(*args)

        return wrapped

    monkeypatch.setattr(share_records_module, "native_share_records", counting)
    tr = AcknowledgementTracker(explicit=True)
    runs = [tr.acquired_range(TP, a, b, dc, 30.0, session=1) for a, b, dc in spans]
    records = acquired_records(data, runs)
    assert all(type(r) is ShareRecord for r in records)
    rows = [(*r[:9], runs.index(r[9]), r[10], r.acquisition) for r in records]
    return rows, [bytes(run.state) for run in runs], calls


def test_the_native_records_are_the_pure_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """One batch, one run: every field equal, built by one native call."""
    data = batch(10, 5, headers=2, null_every=2)
    pure = decode(data, [(10, 14, 3)], monkeypatch, native_on=False)
    fast = decode(data, [(10, 14, 3)], monkeypatch, native_on=True)
    assert fast[2] == 1 and pure[2] == 0
    assert fast[:2] == pure[:2]
    row = fast[0][1]
    assert row[:9] == (
        "t",
        0,
        11,
        1_007,
        0,
        b"k1",
        b"v11v11",
        (("h0", b"\x00"), ("h1", None)),
        3,
    )


@pytest.mark.parametrize("codec", sorted(CODECS))
@pytest.mark.parametrize("log_append", [False, True])
def test_codecs_and_timestamp_types_match(
    codec: str, log_append: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = batch(0, 40, codec=codec, log_append=log_append, null_every=5) + batch(
        40, 9, codec=codec, headers=0
    )
    spans = [(0, 48, 2)]
    pure = decode(data, spans, monkeypatch, native_on=False)
    fast = decode(data, spans, monkeypatch, native_on=True)
    assert fast[2] == 2
    assert fast[:2] == pure[:2]
    if log_append:
        assert {r[3] for r in fast[0][:40]} == {1_000 + 7 * 39}  # the batch's max timestamp
        assert {r[4] for r in fast[0][:40]} == {1}


@settings(deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 6), st.sets(st.integers(0, 5), max_size=3)),
        min_size=1,
        max_size=4,
    ),
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 6)), min_size=1, max_size=3),
    st.integers(0, 3),
)
def test_any_batches_and_runs_match(
    shapes: list[tuple[int, set[int]]], spans: list[tuple[int, int]], first: int
) -> None:
    """Whatever the batches (compacted offsets included) and acquired runs, the records
    and the gaps are the pure path's."""
    data, base = b"", first
    for count, skip in shapes:
        data += batch(base, count, skip=frozenset(base + s for s in skip if s < count - 1))
        base += count
    runs, lo = [], 0
    for start, length in sorted(spans):
        a = max(lo, start)
        runs.append((a, a + length, 1 + len(runs)))
        lo = a + length + 1
    with pytest.MonkeyPatch.context() as mp:
        pure = decode(data, runs, mp, native_on=False)
        fast = decode(data, runs, mp, native_on=True)
    assert fast[:2] == pure[:2]


def test_a_batch_the_native_builder_refuses_goes_the_pure_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch whose records section is cut short (its CRC unchecked here): the native
    builder raises DecodeError, builds nothing, and the pure path decides - it raises."""
    good = batch(0, 3)
    cut = bytearray(good[:-4])
    struct.pack_into(">i", cut, 8, len(cut) - 12)
    with pytest.raises(native.DecodeError):
        native.share_records(bytes(cut), 0, len(cut), ShareRecord, "t", 0, 1, None, 0)
    monkeypatch.setenv("AIOGROUP_NATIVE", "1")
    tr = AcknowledgementTracker(explicit=True)
    run = tr.acquired_range(TP, 0, 2, 1, 30.0, session=1)
    with pytest.raises(Exception) as caught:
        acquired_records(bytes(cut), [run], check_crcs=False)
    assert not isinstance(caught.value, native.DecodeError)


def test_the_native_builder_refuses_a_class_that_is_not_a_tuple() -> None:
    data = batch(0, 1)
    with pytest.raises(TypeError, match="subclass of tuple"):
        native.share_records(data, 0, len(data), dict, "t", 0, 1, None, 0)


def test_a_crc_failure_is_still_refused_with_the_native_builder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIOGROUP_NATIVE", "1")
    data = bytearray(batch(0, 3))
    data[-1] ^= 0xFF
    tr = AcknowledgementTracker(explicit=True)
    with pytest.raises(CorruptRecordException, match="offset 0 failed its CRC check"):
        acquired_records(bytes(data), [tr.acquired_range(TP, 0, 2, 1, 30.0, session=1)])


def test_runs_that_cut_batches_are_built_natively(monkeypatch: pytest.MonkeyPatch) -> None:
    """A strict record-limit acquisition's shape (issue 28): runs that end and start
    inside batches.  Each batch is built natively once per run it meets, sliced to the
    run's offsets - the same records and gaps as the pure path."""
    data = batch(0, 7) + batch(7, 6) + batch(13, 5)
    spans = [(0, 4, 1), (5, 9, 2), (10, 14, 1)]
    pure = decode(data, spans, monkeypatch, native_on=False)
    fast = decode(data, spans, monkeypatch, native_on=True)
    assert fast[:2] == pure[:2]
    assert [r[2] for r in fast[0]] == list(range(15))
    assert [r[9] for r in fast[0]] == [0] * 5 + [1] * 5 + [2] * 5
    # batch 0-6: runs 0 and 1; 7-12: runs 1 and 2; 13-17: run 2.
    assert fast[2] == 5


def test_a_cut_batch_with_a_foreign_range_between_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offsets between two runs (another consumer's) are skipped, not handed out."""
    data = batch(0, 10)
    spans = [(1, 3, 1), (7, 8, 4)]
    pure = decode(data, spans, monkeypatch, native_on=False)
    fast = decode(data, spans, monkeypatch, native_on=True)
    assert fast[:2] == pure[:2]
    assert [r[2] for r in fast[0]] == [1, 2, 3, 7, 8]
    assert [r[8] for r in fast[0]] == [1, 1, 1, 4, 4]
    assert fast[2] == 2
