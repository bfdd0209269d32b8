"""The acknowledgement tracker: what a share consumer holds and what it owes, exhaustively.

Plain data in, batches and results out; time is a number.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiogroup._fetch.share_acknowledgements import (
    NO_ANSWER,
    AcknowledgementTracker,
    AckResult,
    Acquisition,
    InvalidAcknowledgement,
    _batches,
)
from aiogroup._protocol.share_types import AckBatch, AcknowledgeType

T = AcknowledgeType
TP = ("t", 0)
LOCK = 30_000


def tracker(
    explicit: bool = True, offsets: range = range(5), deadline: float = 30.0
) -> tuple[AcknowledgementTracker, list[Acquisition]]:
    tr = AcknowledgementTracker(explicit=explicit)
    acqs = [tr.acquired(TP, o, 1, deadline, session=("n1", 0)) for o in offsets]
    for a in acqs:
        assert tr.hand_out(a, now=0.0)
    return tr, acqs


def test_explicit_acknowledgements_are_batched_by_run_and_type() -> None:
    tr, a = tracker()
    tr.acknowledge(a[0], T.ACCEPT)
    tr.acknowledge(a[1], T.ACCEPT)
    tr.acknowledge(a[2], T.RELEASE)
    tr.acknowledge(a[4], T.REJECT)
    token, batches = tr.take(None, now=1.0, lock_ms=LOCK)
    assert batches == {TP: [AckBatch(0, 2, (1, 1, 2)), AckBatch(4, 4, (3,))]}
    assert not tr.pending()
    results = tr.answered(token, {})
    assert results == [
        AckResult("t", 0, T.ACCEPT, (0, 1), 0),
        AckResult("t", 0, T.RELEASE, (2,), 0),
        AckResult("t", 0, T.REJECT, (4,), 0),
    ]
    assert tr.held() == 1  # offset 3 is still the application's


def test_a_run_of_one_type_is_one_batch_with_one_type() -> None:
    assert _batches([(5, 1), (6, 1), (7, 1)]) == [AckBatch(5, 7, (1,))]
    assert _batches([(5, 1), (7, 1)]) == [AckBatch(5, 5, (1,)), AckBatch(7, 7, (1,))]


@given(st.dictionaries(st.integers(0, 60), st.sampled_from([0, 1, 2, 3]), min_size=1))
def test_batches_cover_exactly_the_rows(rows: dict[int, int]) -> None:
    batches = _batches(sorted(rows.items()))
    seen = {o: b.type_at(o) for b in batches for o in range(b.first_offset, b.last_offset + 1)}
    assert seen == rows
    # Runs are maximal: two batches never touch.
    for x, y in itertools.pairwise(batches):
        assert y.first_offset > x.last_offset + 1


def test_implicit_mode_accepts_what_was_handed_out_only() -> None:
    tr = AcknowledgementTracker(explicit=False)
    a = [tr.acquired(TP, o, 1, 30.0, session=1) for o in range(3)]
    tr.hand_out(a[0], 0.0)
    tr.hand_out(a[1], 0.0)
    assert tr.accept_delivered() == 2
    _, batches = tr.take(None, now=0.0, lock_ms=LOCK)
    assert batches == {TP: [AckBatch(0, 1, (1,))]}
    assert tr.accept_delivered() == 0  # in flight: not twice


def test_gaps_are_acknowledged_as_gap_without_the_application() -> None:
    tr = AcknowledgementTracker(explicit=True)
    tr.acquired_gap(TP, 7, 30.0, session=1)
    a = tr.acquired(TP, 8, 1, 30.0, session=1)
    tr.hand_out(a, 0.0)
    tr.acknowledge(a, T.ACCEPT)
    token, batches = tr.take(None, now=0.0, lock_ms=LOCK)
    assert batches == {TP: [AckBatch(7, 8, (0, 1))]}
    # GAPs are not reported to the application.
    assert tr.answered(token, {}) == [AckResult("t", 0, T.ACCEPT, (8,), 0)]
    assert tr.held() == 0


def test_acknowledging_twice_is_refused() -> None:
    tr, a = tracker()
    tr.acknowledge(a[0], T.ACCEPT)
    with pytest.raises(InvalidAcknowledgement, match=r"t-0@0 was already acknowledged \(ACCEPT\)"):
        tr.acknowledge(a[0], T.REJECT)
    token, _ = tr.take(None, now=0.0, lock_ms=LOCK)
    with pytest.raises(InvalidAcknowledgement, match="already acknowledged"):
        tr.acknowledge(a[0], T.ACCEPT)  # in flight
    tr.answered(token, {})
    with pytest.raises(
        InvalidAcknowledgement, match="no longer held by this consumer \\(acknowledged\\)"
    ):
        tr.acknowledge(a[0], T.ACCEPT)  # settled


def test_a_record_not_from_this_consumer_is_refused() -> None:
    tr, _ = tracker()
    with pytest.raises(InvalidAcknowledgement, match="was not delivered by this consumer"):
        tr.acknowledge(Acquisition("t", 0, 99, 12345), T.ACCEPT)
    _, b = tracker()
    with pytest.raises(InvalidAcknowledgement, match="was not delivered by this consumer"):
        tr.acknowledge(Acquisition("u", 0, 0, b[0].id), T.ACCEPT)


def test_a_record_of_an_ended_session_is_refused_naming_why() -> None:
    tr, a = tracker()
    tr.acknowledge(a[1], T.RELEASE)
    dropped = tr.drop_session(("n1", 0), "its share session ended")
    assert dropped == [
        AckResult("t", 0, T.RELEASE, (1,), NO_ANSWER, "its share session ended", sent=False)
    ]
    with pytest.raises(
        InvalidAcknowledgement, match=r"no longer held .*\(its share session ended\)"
    ):
        tr.acknowledge(a[0], T.ACCEPT)
    assert tr.held() == 0


def test_dropping_a_session_keeps_the_other_sessions_records() -> None:
    tr = AcknowledgementTracker(explicit=True)
    tr.acquired(("t", 0), 0, 1, 30.0, session="n1")
    keep = tr.acquired(("t", 1), 0, 1, 30.0, session="n2")
    tr.drop_session("n1", "gone")
    assert tr.held() == 1 and tr.hand_out(keep, 0.0)


def test_a_record_delivered_again_is_a_new_acquisition() -> None:
    tr, a = tracker()
    again = tr.acquired(TP, 0, 2, 60.0, session=("n1", 1))
    tr.hand_out(again, 0.0)
    with pytest.raises(InvalidAcknowledgement, match="delivered again since"):
        tr.acknowledge(a[0], T.ACCEPT)
    tr.acknowledge(again, T.ACCEPT)
    assert tr.delivery_count(again) == 2


def test_a_record_not_handed_out_yet_cannot_be_acknowledged() -> None:
    tr = AcknowledgementTracker(explicit=True)
    a = tr.acquired(TP, 0, 1, 30.0, session=1)
    with pytest.raises(InvalidAcknowledgement, match="not been handed"):
        tr.acknowledge(a, T.ACCEPT)


@pytest.mark.parametrize("bad", [T.GAP, 9, "accept"])
def test_types_the_application_may_not_send(bad: object) -> None:
    tr, a = tracker()
    with pytest.raises(InvalidAcknowledgement):
        tr.acknowledge(a[0], bad)  # type: ignore[arg-type]


def test_renew_in_implicit_mode_is_refused() -> None:
    tr, a = tracker(explicit=False)
    with pytest.raises(InvalidAcknowledgement, match="RENEW needs explicit acknowledgement"):
        tr.acknowledge(a[0], T.RENEW)


def test_renew_goes_apart_and_an_ok_answer_extends_the_lock() -> None:
    tr, a = tracker(deadline=30.0)
    tr.acknowledge(a[0], T.RENEW)
    tr.acknowledge(a[1], T.ACCEPT)
    assert tr.pending(renew=True) and tr.pending(renew=False)
    token, batches = tr.take(None, now=25.0, lock_ms=LOCK, renew=True)
    assert batches == {TP: [AckBatch(0, 0, (4,))]}
    # A final type after a RENEW in flight waits for the RENEW's answer.
    tr.acknowledge(a[0], T.ACCEPT)
    assert tr.answered(token, {}, lock_ms=20_000) == [AckResult("t", 0, T.RENEW, (0,), 0)]
    assert tr.deadline(a[0]) == pytest.approx(45.0)
    _, batches = tr.take(None, now=26.0, lock_ms=LOCK)
    assert batches == {TP: [AckBatch(0, 1, (1,))]}


def test_a_renew_refused_ends_the_hold() -> None:
    tr, a = tracker()
    tr.acknowledge(a[0], T.RENEW)
    token, _ = tr.take(None, now=0.0, lock_ms=LOCK, renew=True)
    (result,) = tr.answered(token, {TP: (121, "lock gone")})
    assert (result.ack_type, result.error_code, result.ok) == (T.RENEW, 121, False)
    with pytest.raises(InvalidAcknowledgement, match="error 121"):
        tr.acknowledge(a[0], T.ACCEPT)


def test_auto_renew_picks_records_near_their_lock_end() -> None:
    tr, a = tracker(offsets=range(2), deadline=10.0)
    tr.acknowledge(a[1], T.ACCEPT)
    assert tr.next_renewal(margin=2.0) == pytest.approx(8.0)
    assert tr.renew_expiring(now=7.9, margin=2.0) == 0
    assert tr.renew_expiring(now=8.0, margin=2.0) == 1
    _, batches = tr.take(None, now=8.0, lock_ms=LOCK, renew=True)
    assert batches == {TP: [AckBatch(0, 0, (4,))]}
    assert tr.renew_expiring(now=9.0, margin=2.0) == 0  # in flight already


def test_a_lock_past_its_end_is_no_renewal_due() -> None:
    tr, _ = tracker(offsets=range(2), deadline=10.0)
    assert tr.next_renewal(margin=2.0, now=9.0) == pytest.approx(8.0)
    assert tr.next_renewal(margin=2.0, now=10.0) is None  # gone: no RENEW can keep it
    assert tr.renew_expiring(now=10.0, margin=2.0) == 0


def test_an_expired_record_is_never_handed_out() -> None:
    tr = AcknowledgementTracker(explicit=True)
    a = tr.acquired(TP, 0, 1, 10.0, session=1)
    assert not tr.hand_out(a, now=10.0)
    with pytest.raises(InvalidAcknowledgement, match="acquisition lock expired"):
        tr.acknowledge(a, T.ACCEPT)


def test_release_on_close_covers_what_was_handed_out_and_not_acknowledged() -> None:
    tr = AcknowledgementTracker(explicit=True)
    a = [tr.acquired(TP, o, 1, 30.0, session=1) for o in range(4)]
    tr.hand_out(a[0], 0.0)
    tr.hand_out(a[1], 0.0)
    tr.hand_out(a[2], 0.0)
    tr.acknowledge(a[1], T.ACCEPT)
    # Offset 3 was never handed out: the session's close gives it back uncounted.
    assert tr.release_unacknowledged() == 2
    _, batches = tr.take(None, now=0.0, lock_ms=LOCK)
    assert batches == {TP: [AckBatch(0, 2, (2, 1, 2))]}


def test_errors_per_partition_and_no_answer() -> None:
    tr = AcknowledgementTracker(explicit=True)
    x = tr.acquired(("t", 0), 0, 1, 30.0, session=1)
    y = tr.acquired(("t", 1), 0, 1, 30.0, session=1)
    for acq in (x, y):
        tr.hand_out(acq, 0.0)
        tr.acknowledge(acq, T.ACCEPT)
    token, _ = tr.take(None, now=0.0, lock_ms=LOCK)
    results = tr.answered(token, {("t", 1): (121, "INVALID_RECORD_STATE")})
    assert {(r.partition, r.error_code) for r in results} == {(0, 0), (1, 121)}
    z = tr.acquired(("t", 2), 0, 1, 30.0, session=1)
    tr.hand_out(z, 0.0)
    tr.acknowledge(z, T.REJECT)
    token, _ = tr.take([("t", 2)], now=0.0, lock_ms=LOCK)
    assert tr.failed(token, "connection lost") == [
        AckResult("t", 2, T.REJECT, (0,), NO_ANSWER, "connection lost")
    ]
    assert tr.held() == 0
    assert tr.answered(token, {}) == []  # a token answers once


def test_take_for_some_partitions_leaves_the_others_pending() -> None:
    tr = AcknowledgementTracker(explicit=True)
    x = tr.acquired(("t", 0), 0, 1, 30.0, session=1)
    y = tr.acquired(("t", 1), 0, 1, 30.0, session=1)
    for acq in (x, y):
        tr.hand_out(acq, 0.0)
        tr.acknowledge(acq, T.ACCEPT)
    _, batches = tr.take([("t", 1), ("u", 9)], now=0.0, lock_ms=LOCK)
    assert list(batches) == [("t", 1)]
    assert tr.pending([("t", 0)]) and not tr.pending([("t", 1)])


def test_drop_all_reports_what_was_owed_and_ends_in_flight_tokens() -> None:
    tr, a = tracker()
    tr.acknowledge(a[0], T.ACCEPT)
    token, _ = tr.take(None, now=0.0, lock_ms=LOCK)
    tr.acknowledge(a[1], T.RELEASE)
    results = tr.drop_all("fenced")
    assert {(r.ack_type, r.offsets, r.sent) for r in results} == {
        (T.ACCEPT, (0,), True),
        (T.RELEASE, (1,), False),
    }
    assert tr.answered(token, {}) == []
    assert tr.held() == 0 and tr.in_flight() == 0


def test_drop_partitions() -> None:
    tr = AcknowledgementTracker(explicit=True)
    tr.acquired(("t", 0), 0, 1, 30.0, session=1)
    tr.acquired(("t", 1), 0, 1, 30.0, session=1)
    tr.drop_partitions([("t", 0)], "not assigned any more")
    assert tr.held(("t", 0)) == 0 and tr.held(("t", 1)) == 1


def test_a_partition_leaving_releases_what_was_never_handed_out_and_forgets_the_rest() -> None:
    tr = AcknowledgementTracker(explicit=True)
    a = [tr.acquired(TP, o, 1, 30.0, session=1) for o in range(3)]
    tr.hand_out(a[0], 0.0)
    assert tr.release_undelivered([TP, ("u", 0)]) == 2
    assert tr.drop_delivered([TP], "no longer assigned") == []  # nothing was owed for it
    with pytest.raises(InvalidAcknowledgement, match="no longer assigned"):
        tr.acknowledge(a[0], T.ACCEPT)
    _, batches = tr.take(None, now=0.0, lock_ms=LOCK)
    assert batches == {TP: [AckBatch(1, 2, (2,))]}


def test_hand_out_many_is_hand_out_for_each() -> None:
    tr = AcknowledgementTracker(explicit=True)
    run = tr.acquired_range(TP, 0, 3, 2, 10.0, session=1)
    late = tr.acquired_range(("t", 1), 0, 0, 1, 5.0, session=1)
    stranger = AcknowledgementTracker(explicit=True)
    stranger.acquired(TP, 7, 1, 10.0, session=1)
    other = stranger.acquired(TP, 0, 1, 10.0, session=1)  # same offset, not our delivery

    class Rec:
        def __init__(self, acquisition: Acquisition) -> None:
            self.acquisition = acquisition

    ok = [Rec(run.acquisition(o)) for o in range(4)]
    tr.drop_partitions([("u", 0)], "nothing")  # another partition: no effect
    recs = [*ok, Rec(late.acquisition(0)), Rec(other)]
    assert tr.hand_out_many(recs, now=6.0) == ok
    # Each handed out once, each acknowledgeable; the expired one is forgotten.
    for r in ok:
        tr.acknowledge(r.acquisition, T.ACCEPT)
    with pytest.raises(InvalidAcknowledgement, match="acquisition lock expired"):
        tr.acknowledge(late.acquisition(0), T.ACCEPT)
    _, batches = tr.take(None, now=6.0, lock_ms=LOCK)
    assert batches == {TP: [AckBatch(0, 3, (1,))]}
    assert tr.delivery_count(ok[0].acquisition) == 2


def test_an_acquired_range_with_gaps_acknowledges_them_with_the_records() -> None:
    tr = AcknowledgementTracker(explicit=False)
    run = tr.acquired_range(TP, 10, 14, 1, 30.0, session=1)
    tr.gap(run, 12)
    acqs = [run.acquisition(o) for o in (10, 11, 13, 14)]
    for a in acqs:
        assert tr.hand_out(a, 0.0)
    assert tr.accept_delivered() == 4
    token, batches = tr.take(None, now=0.0, lock_ms=LOCK)
    assert batches == {TP: [AckBatch(10, 14, (1, 1, 0, 1, 1))]}
    assert tr.answered(token, {}) == [AckResult("t", 0, T.ACCEPT, (10, 11, 13, 14), 0)]
    assert tr.held() == 0
