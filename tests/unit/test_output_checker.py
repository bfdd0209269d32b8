"""The checker's output rules: each input's read_committed output exactly once.

Histories written by hand (the checker is pure): each faulty one - an output twice, one
missing below the committed offset, one of an aborted transaction visible - must be
reported under its rule and nowhere else, and its repaired twin must pass.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from aiogroup.testing.history import OUTPUT, Event, HistoryRecorder, check_history
from aiogroup.testing.outputs import INPUT_HEADER, output_headers, record_outputs

T = "in"


def clean() -> list[Event]:
    """Inputs 0..3 of in[0] output once each by two committed transactions; the group's
    offset is 4; a third transaction (``a#3``) was aborted and is not visible."""
    outputs = [
        Event(10 + o, OUTPUT, "output", spans=((T, 0, o, o),), detail=f"a#{o // 2 + 1}")
        for o in range(4)
    ]
    return [
        Event(1, "a", "committed", offsets=((T, 0, 2),)),
        Event(2, "a", "committed", offsets=((T, 0, 4),)),
        Event(3, "a", "txn_aborted", detail="a#3"),
        Event(9, "<observer>", "broker_committed", offsets=((T, 0, 4),)),
        *outputs,
    ]


def test_a_clean_run_passes_and_counts_its_outputs() -> None:
    report = check_history(clean())
    assert report.ok, report.summary()
    assert report.outputs_checked == 4
    assert report.counts()["duplicate_outputs"] == 0


def test_an_output_twice_is_a_duplicate() -> None:
    twice = Event(20, OUTPUT, "output", spans=((T, 0, 1, 1),), detail="b#1")
    report = check_history([*clean(), twice])
    assert not report.ok
    assert [v.rule for v in report.violations] == ["duplicate output"]
    assert "in[0]@1" in report.duplicate_outputs[0].detail
    assert not report.missing_outputs and not report.aborted_outputs


def test_an_output_missing_below_the_committed_offset_is_reported() -> None:
    history = [e for e in clean() if e.spans != ((T, 0, 2, 2),)]
    report = check_history(history)
    assert not report.ok
    assert report.missing_outputs == [(T, 0, 2)]
    assert not report.violations
    assert "missing outputs" in report.summary()


def test_an_input_above_the_committed_offset_needs_no_output() -> None:
    # Inputs 4.. were read but not committed: their output must not be there yet either
    # (a committed transaction carries both), so their absence is no fault.
    history = [e for e in clean() if e.kind != "output" or e.spans[0][2] < 4]
    assert check_history(history).ok


def test_the_brokers_committed_offset_wins_over_the_members() -> None:
    # A member's commit says 4, but the broker's offset (read last) is 6: 4 and 5 missing.
    history = [*clean(), Event(30, "<observer>", "broker_committed", offsets=((T, 0, 6),))]
    assert check_history(history).missing_outputs == [(T, 0, 4), (T, 0, 5)]
    without_broker = [e for e in clean() if e.kind != "broker_committed"]
    assert check_history(without_broker).ok  # the member's highest accepted commit: 4


def test_an_output_of_an_aborted_transaction_visible_is_reported() -> None:
    zombie = Event(20, OUTPUT, "output", spans=((T, 0, 5, 5),), detail="a#3")
    report = check_history([*clean(), zombie])
    assert [v.rule for v in report.violations] == ["aborted output"]
    assert "'a#3'" in report.aborted_outputs[0].detail


def test_outputs_forced_on_a_history_without_any_finds_every_committed_input_missing() -> None:
    history = [e for e in clean() if e.kind != "output"]
    assert check_history(history).ok  # no output events: the rules do not apply
    assert len(check_history(history, outputs=True).missing_outputs) == 4


def test_events_round_trip_through_json() -> None:
    for e in clean():
        assert Event.from_json(e.to_json()) == e


def record(topic: str, partition: int, offset: int, headers: list[tuple[str, bytes]]) -> object:
    return SimpleNamespace(topic=topic, partition=partition, offset=offset, headers=headers)


def test_record_outputs_reads_the_headers_into_output_events() -> None:
    recorder = HistoryRecorder()
    records = [record("out", 0, i, output_headers("in/x", 1, 10 + i, "t#1")) for i in range(2)]
    assert record_outputs(recorder, records) == 2
    assert [(e.member, e.spans, e.detail) for e in recorder.events()] == [
        (OUTPUT, (("in/x", 1, 10, 10),), "t#1"),
        (OUTPUT, (("in/x", 1, 11, 11),), "t#1"),
    ]


def test_record_outputs_refuses_a_record_without_the_input_header() -> None:
    with pytest.raises(ValueError, match=INPUT_HEADER):
        record_outputs(HistoryRecorder(), [record("out", 0, 3, [])])
