"""Share records: decoding a ShareFetch's batches into ShareRecord s, the record type
itself, and handing records out a span at a time (pure code: no broker)."""

from __future__ import annotations

import pickle
import struct

import pytest
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given
from hypothesis import strategies as st

from aiogroup._fetch.share_acknowledgements import (
    AcknowledgementTracker,
    Acquisition,
    InvalidAcknowledgement,
)
from aiogroup._fetch.share_records import RecordBuffer, ShareRecord, acquired_records, hand_out
from aiogroup._protocol.share_types import AckBatch, AcknowledgeType

T = AcknowledgeType
TP = ("t", 0)
LOCK = 30_000


def batch(base: int, count: int, skip: tuple[int, ...] = ()) -> bytes:
    """A record batch of offsets ``base..base+count-1`` without the ``skip`` ones (as
    compaction leaves them)."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(count):
        if base + i not in skip:
            builder.append(i, 1000 + i, b"k", f"v{base + i}".encode(), [("h", b"1")])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    return bytes(data)


def test_records_carry_their_fields_and_acquisition() -> None:
    tr = AcknowledgementTracker(explicit=True)
    run = tr.acquired_range(TP, 0, 2, 3, 30.0, session=1)
    r0, r1, r2 = acquired_records(batch(0, 3), [run])
    assert (r1.topic, r1.partition, r1.offset, r1.timestamp, r1.timestamp_type) == (
        "t",
        0,
        1,
        1001,
        0,
    )
    assert (r1.key, r1.value, r1.headers, r1.delivery_count) == (b"k", b"v1", (("h", b"1"),), 3)
    assert r1.acquisition == run.acquisition(1)
    assert r1.acquisition.run is run
    assert repr(r0) == (
        "ShareRecord(topic='t', partition=0, offset=0, timestamp=1000, timestamp_type=0, "
        "key=b'k', value=b'v0', headers=(('h', b'1'),), delivery_count=3)"
    )
    assert [r.offset for r in (r0, r1, r2)] == [0, 1, 2]


def test_records_are_equal_by_their_public_fields_only() -> None:
    tr = AcknowledgementTracker(explicit=True)
    first = acquired_records(batch(0, 1), [tr.acquired_range(TP, 0, 0, 1, 30.0, session=1)])[0]
    again = acquired_records(batch(0, 1), [tr.acquired_range(TP, 0, 0, 1, 30.0, session=2)])[0]
    assert first.acquisition != again.acquisition  # a new delivery of the same offset
    assert first == again and hash(first) == hash(again) and not first != again
    later = acquired_records(batch(0, 1), [tr.acquired_range(TP, 0, 0, 2, 30.0, session=2)])[0]
    assert first != later  # another delivery count
    assert first != tuple(first)  # not a plain tuple


def test_a_record_made_by_hand_and_pickled_keeps_its_fields() -> None:
    acq = Acquisition("t", 1, 5, 9)
    r = ShareRecord("t", 1, 5, 7, 0, None, b"v", (), 1, acq)
    assert (r.offset, r.value, r.acquisition) == (5, b"v", acq)
    back = pickle.loads(pickle.dumps(r))
    assert back == r and back.acquisition == acq


def test_offsets_a_fetch_acquired_without_a_record_are_gaps() -> None:
    tr = AcknowledgementTracker(explicit=False)
    run = tr.acquired_range(TP, 0, 5, 1, 30.0, session=1)
    records = acquired_records(batch(0, 6, skip=(2, 3)), [run])
    assert [r.offset for r in records] == [0, 1, 4, 5]
    assert hand_out(tr, records, 0.0) == records
    tr.accept_delivered()
    _, batches = tr.take(None, now=0.0, lock_ms=LOCK)
    assert batches == {TP: [AckBatch(0, 5, (1, 1, 0, 0, 1, 1))]}


def test_hand_out_marks_spans_as_hand_out_many_marks_records() -> None:
    tr = AcknowledgementTracker(explicit=True)
    a = tr.acquired_range(TP, 0, 3, 1, 30.0, session=1)
    b = tr.acquired_range(TP, 4, 5, 2, 30.0, session=1)  # another run, right after
    late = tr.acquired_range(("t", 1), 0, 1, 1, 5.0, session=1)  # its lock ends at 5
    records = [
        *acquired_records(batch(0, 6), [a, b]),
        *acquired_records(batch(0, 2), [late]),
    ]
    # Offset 2 was dropped meanwhile (its session's answer): it is not handed out.
    tr.drop_session(2, "unrelated")  # another session: no effect
    tr._gone(a, 2, "dropped by the test")
    out = hand_out(tr, records, now=6.0)
    assert [(r.partition, r.offset) for r in out] == [(0, 0), (0, 1), (0, 3), (0, 4), (0, 5)]
    for r in out:
        tr.acknowledge(r.acquisition, T.ACCEPT)
    with pytest.raises(InvalidAcknowledgement, match="acquisition lock expired"):
        tr.acknowledge(records[-1].acquisition, T.ACCEPT)
    # Handed out once: a second hand-out of the same records gives nothing.
    assert hand_out(tr, out, now=6.0) == out  # already handed out: still theirs
    _, batches = tr.take(None, now=6.0, lock_ms=LOCK)
    assert batches == {TP: [AckBatch(0, 1, (1,)), AckBatch(3, 5, (1,))]}


def test_a_span_is_refused_whole_when_any_offset_is_not_plainly_acquired() -> None:
    tr = AcknowledgementTracker(explicit=True)
    run = tr.acquired_range(TP, 0, 3, 1, 30.0, session=1)
    tr.gap(run, 1)
    assert not tr.hand_out_span(run, 0, 3, 0.0)  # offset 1 is a gap
    assert tr.hand_out_span(run, 2, 3, 0.0)
    assert not tr.hand_out_span(run, 2, 3, 0.0)  # already handed out
    assert not tr.hand_out_span(run, 0, 0, 30.0)  # its lock surely ended
    assert not tr.hand_out_span(run, 3, 4, 0.0)  # past the run
    assert not AcknowledgementTracker(explicit=True).hand_out_span(run, 0, 0, 0.0)  # not ours
    assert tr.hand_out(run.acquisition(0), 0.0)


def test_the_record_buffer_takes_across_the_lists_decoding_made() -> None:
    tr = AcknowledgementTracker(explicit=True)
    a = acquired_records(batch(0, 3), [tr.acquired_range(TP, 0, 2, 1, 30.0, session=1)])
    b = acquired_records(batch(0, 2), [tr.acquired_range(("t", 1), 0, 1, 1, 30.0, session=1)])
    buf = RecordBuffer()
    buf.extend(a)
    buf.extend([])
    buf.extend(b)
    assert len(buf) == 5 and buf.first() is a[0]
    assert buf.take(2) == a[:2]
    assert (len(buf), buf.first()) == (3, a[2])
    assert list(buf) == [a[2], *b]
    assert buf.take(2) == [a[2], b[0]]
    buf.extend(list(a))
    buf.drop_partitions({TP})
    assert list(buf) == [b[1]] and len(buf) == 1
    assert buf.take(10) == [b[1]] and not buf
    assert buf.take(1) == []


@given(
    st.lists(  # batches: (records, offsets compaction removed)
        st.tuples(st.integers(1, 6), st.sets(st.integers(0, 5), max_size=3)),
        min_size=1,
        max_size=4,
    ),
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 6)), min_size=1, max_size=3),
    st.integers(0, 3),
)
def test_whole_batches_built_at_once_match_the_record_by_record_path(
    shapes: list[tuple[int, set[int]]], spans: list[tuple[int, int]], first: int
) -> None:
    """Issue 28: a batch inside the current run with every offset present is built in one
    comprehension; whatever the batches and acquired runs, the records and the gaps
    marked are those of the record-by-record path (taken here with a deserializer)."""
    data, base = b"", first
    for count, skip in shapes:
        data += batch(base, count, skip={base + s for s in skip if s < count - 1})
        base += count

    def decode(**kw: object) -> tuple[list[tuple[object, ...]], list[bytes]]:
        tr = AcknowledgementTracker(explicit=True)
        runs, lo = [], 0
        for start, length in sorted(spans):
            a = max(lo, start)
            runs.append(tr.acquired_range(TP, a, a + length, 1, 30.0, session=1))
            lo = a + length + 1
        records = acquired_records(data, runs, **kw)  # type: ignore[arg-type]
        return [tuple(r)[:9] for r in records], [bytes(r.state) for r in runs]

    assert decode() == decode(value_deserializer=lambda v: v)


@pytest.mark.parametrize("native", ["1", "0"])
def test_a_batch_failing_its_crc_is_refused_whole(
    native: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the native CRC-32C (in place) and without it (aiokafka's), a flipped byte in
    a batch refuses it; ``check_crcs=False`` reads it as it is."""
    monkeypatch.setenv("AIOGROUP_NATIVE", native)
    data = bytearray(batch(0, 3))
    data[-1] ^= 0xFF  # the last header value of the last record
    tr = AcknowledgementTracker(explicit=True)
    with pytest.raises(CorruptRecordException, match="offset 0 failed its CRC check"):
        acquired_records(bytes(data), [tr.acquired_range(TP, 0, 2, 1, 30.0, session=1)])
    run = tr.acquired_range(TP, 0, 2, 1, 30.0, session=2)
    assert len(acquired_records(bytes(data), [run], check_crcs=False)) == 3


@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 8), st.sets(st.integers(0, 7), max_size=4)),
        min_size=0,
        max_size=5,
    ),
    st.integers(0, 3),
)
def test_run_spans_count_and_group_as_record_by_record(
    runs: list[tuple[int, int, set[int]]], loose: int
) -> None:
    """Issue 28: ``run_spans`` cover the records in order with spans of one run (so one
    partition and one delivery count), whatever was not handed out of each run; the
    poll's grouping and the acquired metric built on them equal the per-record ones."""
    from collections import Counter
    from itertools import groupby

    from aiogroup._fetch.share_acknowledgements import Acquisition
    from aiogroup._fetch.share_records import delivery_counts, run_spans

    tr = AcknowledgementTracker(explicit=True)
    records: list[ShareRecord] = []
    base = 0
    for i, (partition, length, missing) in enumerate(runs):
        run = tr.acquired_range(("t", partition), base, base + length - 1, 1 + i % 2, 30.0, 1)
        for offset in range(base, base + length):
            if offset - base not in missing:
                records.append(
                    ShareRecord(
                        "t",
                        partition,
                        offset,
                        0,
                        0,
                        None,
                        b"",
                        (),
                        1 + i % 2,
                        run.acquisition(offset),
                    )
                )
        base += length
    for k in range(loose):  # made outside the tracker: no run
        records.append(
            ShareRecord("t", 9, base + k, 0, 0, None, b"", (), 5, Acquisition("t", 9, base + k, 0))
        )
    spans = list(run_spans(records))
    assert [i for s in spans for i in range(*s)] == list(range(len(records)))
    for i, j in spans:
        assert len({id(r._run) for r in records[i:j]}) == 1 or j - i == 1
    assert delivery_counts(records) == Counter(r.delivery_count for r in records)
    grouped: dict[tuple[str, int], list[ShareRecord]] = {}
    for i, j in spans:
        grouped.setdefault((records[i][0], records[i][1]), []).extend(records[i:j])
    expected: dict[tuple[str, int], list[ShareRecord]] = {}
    for tp, group in groupby(records, lambda r: (r.topic, r.partition)):
        expected.setdefault(tp, []).extend(group)
    assert grouped == expected
