"""The share-history checker catches each fault it promises to, and passes clean runs.

Histories are written by hand (the checker is pure): each faulty history breaks one
rule and must be reported under it; the clean ones are the scenarios issue 28 names
(release, kill -9, poison record, RENEW, clean close) played correctly.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aiogroup.testing.share_checker import (
    OBSERVER,
    PRODUCER,
    ShareEvent,
    ShareHistoryError,
    ShareRecorder,
    ShareReport,
    check_share_history,
    load_share_history,
)

T = "topic"
LOCK_MS = 2000  # every acquisition below: a 2 s lock
LIMIT = 3


class Script:
    """A hand-written share history with explicit times (seconds)."""

    def __init__(self) -> None:
        self.events: list[ShareEvent] = []

    def add(self, t: float, consumer: str, kind: str, **fields: object) -> Script:
        self.events.append(ShareEvent(t, consumer, kind, **fields))  # type: ignore[arg-type]
        return self

    def produced(self, first: int, last: int, partition: int = 0) -> Script:
        return self.add(0.0, PRODUCER, "produced", topic=T, partition=partition, offset=first,
                        last=last)  # fmt: skip

    def acquired(self, t: float, consumer: str, offset: int, count: int | None) -> Script:
        # The ShareFetch left 50 ms before its answer was read.
        return self.add(t, consumer, "acquired", topic=T, partition=0, offset=offset,
                        delivery_count=count, sent=t - 0.05, lock_ms=LOCK_MS)  # fmt: skip

    def ack(self, t: float, consumer: str, offset: int, ack: str, result: str = "ok") -> Script:
        return self.add(t, consumer, "acknowledged", topic=T, partition=0, offset=offset,
                        ack=ack, result=result, answered=t + 0.01)  # fmt: skip

    def check(self, limit: int = LIMIT) -> ShareReport:
        return check_share_history(self.events, delivery_limit=limit)


def rules(report: ShareReport) -> set[str]:
    found = {v.rule for v in report.violations}
    return found | ({"overlap"} if report.overlaps else set())


# -- clean histories -----------------------------------------------------------------------


def test_each_record_accepted_once_by_two_consumers() -> None:
    s = Script().produced(0, 3)
    s.acquired(1.0, "a", 0, 1).acquired(1.0, "a", 1, 1).acquired(1.1, "b", 2, 1)
    s.acquired(1.1, "b", 3, 1)
    for t, c, o in ((1.5, "a", 0), (1.5, "a", 1), (1.6, "b", 2), (1.6, "b", 3)):
        s.ack(t, c, o, "accept")
    report = s.check()
    report.assert_clean()
    assert report.counts()["accepted"] == 4
    assert report.acquisitions == 4 and report.redeliveries == 0


def test_release_then_redelivered_with_a_higher_count() -> None:
    s = Script().produced(0, 0)
    s.acquired(1.0, "a", 0, 1).ack(1.2, "a", 0, "release")
    s.acquired(1.3, "b", 0, 2).ack(1.4, "b", 0, "accept")
    report = s.check()
    report.assert_clean()
    assert report.releases == 1 and report.redeliveries == 1


def test_kill_9_records_come_back_at_the_connection_drop() -> None:
    # Kafka 4.1+ ends a share session whose connection drops (KAFKA-19015): a killed
    # consumer's records come back before their lock (sure until 2.95) runs out.
    s = Script().produced(0, 1)
    s.acquired(1.0, "a", 0, 1).acquired(1.0, "a", 1, 1).add(1.2, "a", "crashed")
    s.acquired(1.5, "b", 0, 2).acquired(1.5, "b", 1, 2)
    s.ack(1.6, "b", 0, "accept").ack(1.6, "b", 1, "accept")
    report = s.check()
    report.assert_clean()
    assert report.crashes == 1 and report.redeliveries == 2


def test_lock_expiry_gives_a_silent_consumers_records_back() -> None:
    s = Script().produced(0, 1)
    s.acquired(1.0, "a", 0, 1).acquired(1.0, "a", 1, 1)  # a never acknowledges
    # The lock (2 s from the fetch sent at 0.95) ends at 2.95; b gets them at 3.0.
    s.acquired(3.0, "b", 0, 2).acquired(3.0, "b", 1, 2)
    s.ack(3.1, "b", 0, "accept").ack(3.1, "b", 1, "accept")
    report = s.check()
    report.assert_clean()
    assert report.lock_expiries == 2


def test_a_fence_gives_records_back_before_the_lock_ends() -> None:
    s = Script().produced(0, 0)
    s.acquired(1.0, "a", 0, 1).add(1.1, "a", "frozen")
    s.add(2.0, "a", "gone", since=1.5)  # the broker dropped a between 1.5 and 2.0
    s.acquired(2.1, "b", 0, 2).ack(2.2, "b", 0, "accept")
    s.check().assert_clean()


def test_poison_record_rejected_or_archived_at_the_limit() -> None:
    s = Script().produced(0, 1)
    # Record 0: released three times; the third delivery is at the limit -> archived.
    for n, t in enumerate((1.0, 2.0, 3.0), start=1):
        s.acquired(t, "a", 0, n).ack(t + 0.1, "a", 0, "release")
    # Record 1: rejected on its first delivery.
    s.acquired(1.0, "a", 1, 1).ack(1.1, "a", 1, "reject")
    report = s.check()
    report.assert_clean()
    assert (report.archived, report.rejected) == (1, 1)


def test_renew_keeps_a_slow_handlers_record() -> None:
    s = Script().produced(0, 0)
    s.acquired(1.0, "a", 0, 1)
    s.ack(2.5, "a", 0, "renew").ack(4.0, "a", 0, "renew")  # lock now ends at 6.0
    s.ack(5.5, "a", 0, "accept")  # 3x the lock duration after the fetch
    report = s.check()
    report.assert_clean()
    assert report.renewals == 2 and report.late_acks == 0


def test_clean_close_may_redeliver_with_the_same_count() -> None:
    s = Script().produced(0, 0)
    s.acquired(1.0, "a", 0, 1).add(1.2, "a", "closed")
    s.acquired(1.3, "b", 0, 1).ack(1.4, "b", 0, "accept")
    s.check().assert_clean()


def test_late_ack_refused_is_not_counted_and_redelivery_settles() -> None:
    s = Script().produced(0, 0)
    s.acquired(1.0, "a", 0, 1).add(1.1, "a", "frozen")
    s.acquired(3.5, "b", 0, 2).ack(3.6, "b", 0, "accept")
    s.add(5.0, "a", "woke").ack(5.1, "a", 0, "accept", result="INVALID_RECORD_STATE")
    report = s.check()
    report.assert_clean()
    assert report.late_acks == 1 and report.accepted == 1


def test_broker_view_agreeing() -> None:
    s = Script().produced(0, 1)
    s.acquired(1.0, "a", 0, 1).acquired(1.0, "a", 1, 1)
    s.ack(1.1, "a", 0, "accept").ack(1.1, "a", 1, "reject")
    s.add(2.0, OBSERVER, "broker_start", topic=T, partition=0, offset=2, lag=0)
    s.check().assert_clean()


def test_broker_view_with_a_lazy_start_offset() -> None:
    # Kafka 4.4 reported start offset 0 and lag 0 after every record was accepted.
    s = Script().produced(0, 1)
    s.acquired(1.0, "a", 0, 1).acquired(1.0, "a", 1, 1)
    s.ack(1.1, "a", 0, "accept").ack(1.1, "a", 1, "accept")
    s.add(2.0, OBSERVER, "broker_start", topic=T, partition=0, offset=0, lag=0)
    s.check().assert_clean()


# -- one broken rule each ------------------------------------------------------------------


def test_overlap_two_consumers_inside_one_lock() -> None:
    s = Script().produced(0, 0)
    s.acquired(1.0, "a", 0, 1).acquired(1.5, "b", 0, 2)  # a's lock surely held to 2.95
    s.ack(1.6, "b", 0, "accept")
    report = s.check()
    assert rules(report) == {"overlap"}
    (o,) = report.overlaps
    assert (o.first, o.second) == ("a", "b") and o.seconds == pytest.approx(1.45)


def test_overlap_with_a_frozen_consumer() -> None:
    # SIGSTOP keeps the connection open: the lock is the frozen consumer's to the end.
    s = Script().produced(0, 0)
    s.acquired(1.0, "a", 0, 1).add(1.1, "a", "frozen")
    s.acquired(2.0, "b", 0, 2).ack(2.1, "b", 0, "accept")
    assert rules(s.check()) == {"overlap"}


def test_accepted_twice() -> None:
    s = Script().produced(0, 0)
    s.acquired(1.0, "a", 0, 1).ack(1.1, "a", 0, "accept")
    s.acquired(1.2, "b", 0, 2).ack(1.3, "b", 0, "accept")
    assert rules(s.check()) == {"accepted_twice"}


def test_accepted_and_rejected() -> None:
    s = Script().produced(0, 0)
    s.acquired(1.0, "a", 0, 1).ack(1.1, "a", 0, "reject")
    s.acquired(1.2, "b", 0, 2).ack(1.3, "b", 0, "accept")
    assert rules(s.check()) == {"settled_twice"}


def test_unsettled_record() -> None:
    s = Script().produced(0, 1)
    s.acquired(1.0, "a", 0, 1).ack(1.1, "a", 0, "accept")
    s.acquired(1.0, "a", 1, 1).ack(1.1, "a", 1, "release")  # released, never back
    report = s.check()
    assert rules(report) == {"unsettled"}
    assert report.violations[0].record == (T, 0, 1)


def test_never_delivered_is_unsettled() -> None:
    assert rules(Script().produced(0, 0).check()) == {"unsettled"}


def test_count_not_increased_after_release() -> None:
    s = Script().produced(0, 0)
    s.acquired(1.0, "a", 0, 1).ack(1.1, "a", 0, "release")
    s.acquired(1.2, "b", 0, 1).ack(1.3, "b", 0, "accept")
    assert rules(s.check()) == {"count_not_increased"}


def test_delivered_past_the_limit() -> None:
    s = Script().produced(0, 0)
    for n, t in enumerate((1.0, 2.0, 3.0), start=1):
        s.acquired(t, "a", 0, n).ack(t + 0.1, "a", 0, "release")
    s.acquired(4.0, "a", 0, 4).ack(4.1, "a", 0, "accept")
    assert rules(s.check()) == {"past_limit"}


def test_killed_consumers_records_never_come_back() -> None:
    s = Script().produced(0, 0)
    s.acquired(1.0, "a", 0, 1).add(1.2, "a", "crashed")
    report = s.check()
    assert rules(report) == {"not_redelivered", "unsettled"}


def test_late_ack_answered_ok_is_reported_and_not_counted() -> None:
    s = Script().produced(0, 0)
    s.acquired(1.0, "a", 0, 1).add(1.1, "a", "frozen")
    s.add(5.0, "a", "woke").ack(5.1, "a", 0, "accept")  # lock surely over at 3.0
    report = s.check()
    # Not counted, so the record is also unsettled (nobody else took it).
    assert rules(report) == {"late_ack_counted", "unsettled"}
    assert report.accepted == 0 and report.late_acks == 1


def test_ack_twice_or_of_a_record_never_held() -> None:
    s = Script().produced(0, 0)
    s.acquired(1.0, "a", 0, 1).ack(1.1, "a", 0, "accept").ack(1.2, "a", 0, "accept")
    s.ack(1.3, "b", 0, "reject")
    report = s.check()
    assert rules(report) == {"ack_unheld"}
    assert [v.consumer for v in report.violations] == ["a", "b"]


def test_broker_lag_behind_the_history() -> None:
    s = Script().produced(0, 1)
    s.acquired(1.0, "a", 0, 1).acquired(1.0, "a", 1, 1)
    s.ack(1.1, "a", 0, "accept").ack(1.1, "a", 1, "accept")
    s.add(2.0, OBSERVER, "broker_start", topic=T, partition=0, offset=1, lag=1)
    assert rules(s.check()) == {"broker_disagrees"}


def test_broker_start_offset_past_an_unsettled_record() -> None:
    s = Script().produced(0, 1)
    s.acquired(1.0, "a", 0, 1).ack(1.1, "a", 0, "accept")
    s.acquired(1.0, "a", 1, 1)  # never acknowledged, no crash: unsettled here
    s.add(4.0, OBSERVER, "broker_start", topic=T, partition=0, offset=2)
    assert rules(s.check()) == {"unsettled", "broker_disagrees"}


# -- the history format --------------------------------------------------------------------


def test_recorder_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "share.jsonl"
    clock = iter([10.0, 10.5, 10.6, 10.7])
    with ShareRecorder(path, clock=lambda: next(clock)) as rec:
        rec.produced(T, 0, 0, 0)
        rec.acquired("a", T, 0, 0, 1, sent=10.4, lock_ms=LOCK_MS)
        rec.acknowledged("a", T, 0, 0, "accept", sent=10.55, result="ok")
        rec.broker_start(T, 0, 1, lag=0)
    loaded = load_share_history(path)
    assert loaded == sorted(rec.events(), key=lambda e: e.t)
    check_share_history(loaded, delivery_limit=LIMIT).assert_clean()


@pytest.mark.parametrize(
    "line",
    [
        '{"t":1,"c":"a","k":"acquired","topic":"t","partition":0,"offset":0}',  # no lock_ms
        '{"t":1,"c":"a","k":"acknowledged","topic":"t","partition":0,"offset":0,"ack":"x"}',
        '{"t":1,"c":"a","k":"nonsense"}',
        '{"t":1,"c":"","k":"crashed"}',
        '{"t":1,"c":"a","k":"produced","topic":"t","partition":0,"offset":5,"last":4}',
        "not json",
    ],
)
def test_bad_events_are_refused_by_name(line: str) -> None:
    with pytest.raises(ShareHistoryError):
        ShareEvent.from_json(line)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="delivery_limit"):
        check_share_history([], delivery_limit=0)
    with pytest.raises(ValueError, match="lock_slack"):
        check_share_history([], delivery_limit=1, lock_slack=-1)
