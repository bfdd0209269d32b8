"""The observer turns DescribeGroups samples into joined / gone / broker_assignment events."""

from __future__ import annotations

import pytest

from aiogroup.testing.history import GROUP, HistoryRecorder, broker_rebalances, check_history
from aiogroup.testing.observer import GroupObserver, GroupSample, member_name

UUID = "6b3bff7c-79e6-4201-8275-126c89cd0026"
P0, P1 = ("t", 0), ("t", 1)


def test_member_name_prefers_the_client_id_then_the_member_id_prefix() -> None:
    assert member_name("worker-1", f"other-{UUID}") == "worker-1"
    assert member_name("", f"worker-1-client-ab12-{UUID}") == "worker-1-client-ab12"
    assert member_name("", "opaque") == "opaque"


def feed(samples: list[tuple[float, float, GroupSample]]) -> HistoryRecorder:
    rec = HistoryRecorder()
    observer = GroupObserver("127.0.0.1:1", "g", rec)
    known: dict[str, tuple[str, tuple[tuple[str, int], ...], float]] = {}
    for sent, arrived, sample in samples:
        observer._apply(known, sample, sent, arrived)
    return rec


def test_a_vanished_member_is_gone_between_its_last_and_first_missing_sample() -> None:
    rec = feed(
        [
            (1.0, 1.1, GroupSample("Stable", {"A": ("a1", (P0, P1))})),
            (2.0, 2.1, GroupSample("Stable", {"A": ("a1", (P0, P1)), "B": ("b1", ())})),
            (3.0, 3.1, GroupSample("PreparingRebalance", {"B": ("b1", ())})),
            (4.0, 4.1, GroupSample("Stable", {"B": ("b1", (P0, P1))})),
        ]
    )
    got = [
        (e.member, e.kind, e.t, e.since, e.partitions)
        for e in rec.events()
        if e.kind != "group_state"
    ]
    assert got == [
        ("A", "joined", 1.1, None, ()),
        ("A", "broker_assignment", 1.1, None, (P0, P1)),
        ("B", "joined", 2.1, None, ()),
        ("A", "gone", 3.1, 2.0, ()),
        ("B", "broker_assignment", 4.1, None, (P0, P1)),
    ]
    report = check_history(rec.events())
    assert report.evictions == [("A", 3.1)] and report.rebalances == 2
    # The group's state, once per change: one rebalance as the broker ran it.
    states = [(e.member, e.t, e.detail) for e in rec.events() if e.kind == "group_state"]
    assert states == [
        (GROUP, 1.1, "Stable"),
        (GROUP, 3.1, "PreparingRebalance"),
        (GROUP, 4.1, "Stable"),
    ]
    assert report.broker_rebalances == 1


def test_a_kip_848_sample_records_its_group_epoch() -> None:
    rec = feed(
        [
            (1.0, 1.1, GroupSample("Stable", {"A": ("a1", ())}, epoch=3)),
            (2.0, 2.1, GroupSample("Stable", {"A": ("a1", ())}, epoch=3)),
            (3.0, 3.1, GroupSample("Reconciling", {"A": ("a1", ())}, epoch=4)),
        ]
    )
    states = [e.detail for e in rec.events() if e.kind == "group_state"]
    assert states == ["Stable epoch=3", "Reconciling epoch=4"]
    assert broker_rebalances(rec.events()) == [3.1]


def test_a_new_member_id_under_one_name_is_a_gone_then_a_join() -> None:
    rec = feed(
        [
            (1.0, 1.1, GroupSample("Stable", {"A": ("a1", ())})),
            (2.0, 2.1, GroupSample("Stable", {"A": ("a2", ())})),
        ]
    )
    assert [(e.kind, e.detail) for e in rec.events() if e.kind != "group_state"] == [
        ("joined", "a1"),
        ("gone", "a1"),
        ("joined", "a2"),
    ]


def test_the_sampling_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval must be positive"):
        GroupObserver("127.0.0.1:1", "g", HistoryRecorder(), interval=0)


def feed_observer(samples: list[tuple[float, float, GroupSample]]) -> GroupObserver:
    observer = GroupObserver("127.0.0.1:1", "g", HistoryRecorder())
    for sent, arrived, sample in samples:
        observer._apply(observer._known, sample, sent, arrived)
    return observer


def test_one_sample_without_the_members_is_a_gap_not_a_fence() -> None:
    """A coordinator failing over can answer one DescribeGroups with the group but none
    of its members; the next sample shows them under the same ids: nobody was fenced."""
    observer = feed_observer(
        [
            (1.0, 1.1, GroupSample("Stable", {"A": ("a1", (P0,)), "B": ("b1", (P1,))})),
            (2.0, 2.1, GroupSample("Stable", {})),
            (3.0, 3.1, GroupSample("Stable", {"A": ("a1", (P0,)), "B": ("b1", (P1,))})),
        ]
    )
    events = observer.recorder.events()
    assert not [e for e in events if e.kind == "gone"]
    assert [e.member for e in events if e.kind == "joined"] == ["A", "B"]  # not again
    assert observer.transient_absences == 2
    assert check_history(events).evictions == []


def test_an_absence_the_next_sample_confirms_is_a_fence_dated_by_the_first() -> None:
    observer = feed_observer(
        [
            (1.0, 1.1, GroupSample("Stable", {"A": ("a1", ()), "B": ("b1", ())})),
            (2.0, 2.1, GroupSample("Stable", {"B": ("b1", ())})),
            (3.0, 3.1, GroupSample("PreparingRebalance", {"B": ("b1", ())})),
        ]
    )
    gone = [(e.member, e.t, e.since) for e in observer.recorder.events() if e.kind == "gone"]
    assert gone == [("A", 2.1, 1.0)]
    assert observer.transient_absences == 0
    assert check_history(observer.recorder.events()).evictions == [("A", 2.1)]


def test_an_absence_in_the_last_sample_counts_as_gone_when_the_observer_stops() -> None:
    observer = feed_observer(
        [
            (1.0, 1.1, GroupSample("Stable", {"A": ("a1", ())})),
            (2.0, 2.1, GroupSample("Empty", {})),
        ]
    )
    assert not [e for e in observer.recorder.events() if e.kind == "gone"]
    observer._flush_absences(observer._known)
    gone = [(e.member, e.t, e.since) for e in observer.recorder.events() if e.kind == "gone"]
    assert gone == [("A", 2.1, 1.0)]


@pytest.mark.parametrize("epochs", [(None, None, None), (3, 4, 5)], ids=["classic", "kip848"])
def test_an_id_back_after_a_confirmed_absence_is_a_new_join_and_the_fence_stands(
    epochs: tuple[int | None, int | None, int | None],
) -> None:
    """A fenced member can come back under its own id: under KIP-848 by design (epoch
    0), and on Tansu, which readmits an evicted classic member under its old id
    (caps.readmits_evicted_member_id).  Retracting such a fence once hid a SIGSTOPped
    member's fence and reported its overlap as none (the demo and the chaos suite
    caught it): the absence stands as a fence."""
    first, gone, back = epochs
    both = {"A": ("a1", ()), "B": ("b1", ())}
    observer = feed_observer(
        [
            (1.0, 1.1, GroupSample("Stable", both, epoch=first)),
            (2.0, 2.1, GroupSample("Stable", {"B": ("b1", ())}, epoch=gone)),
            (3.0, 3.1, GroupSample("Stable", {"B": ("b1", ())}, epoch=gone)),
            (4.0, 4.1, GroupSample("Stable", both, epoch=back)),
        ]
    )
    events = observer.recorder.events()
    assert [(e.member, e.kind) for e in events if e.kind in ("gone", "joined")] == [
        ("A", "joined"),
        ("B", "joined"),
        ("A", "gone"),
        ("A", "joined"),
    ]
    assert check_history(events).evictions == [("A", 2.1)]
