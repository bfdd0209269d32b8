"""ConsumerMetrics on its own: latency bookkeeping, rebalance timing, broker reachability."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import pytest

import aiogroup.metrics as metrics_module
from aiogroup.metrics import (
    ConsumerMetrics,
    LatencyStats,
    MemberView,
    assess_health,
    partition_metrics,
    snapshot,
)
from aiogroup.structs import TopicPartition


class HeartbeatRequest:
    pass


class Answer:
    error_code = 0


async def answered() -> Answer:
    return Answer()


async def refused() -> Answer:
    raise ConnectionError("refused")


def test_latency_stats() -> None:
    stats = LatencyStats()
    assert stats.avg_ms is None
    stats.add(10)
    stats.add(30)
    assert (stats.count, stats.avg_ms, stats.max_ms, stats.last_ms) == (2, 20, 30, 30)


async def test_heartbeat_latency_and_age() -> None:
    m = ConsumerMetrics()
    assert m.seconds_since_heartbeat() is None
    await m.timed_group_request(HeartbeatRequest(), answered())
    assert m.heartbeat_latency.count == 1 and m.request_latency["Heartbeat"].count == 1
    age = m.seconds_since_heartbeat()
    assert age is not None and age >= 0
    with pytest.raises(ConnectionError):
        await m.timed_group_request(HeartbeatRequest(), refused())
    assert m.heartbeat_latency.errors == 1


async def test_fetch_records_partition_times() -> None:
    m = ConsumerMetrics()
    tp = TopicPartition("t", 0)
    await m.timed_fetch(answered(), [tp])
    assert m.fetch_latency.count == 1 and tp in m.partition_fetch_ms


def test_a_rebalance_is_timed_from_its_start_to_its_completion() -> None:
    m = ConsumerMetrics()
    m.rebalance_started()
    first = m.rebalance_started_at
    assert first is not None
    m.rebalance_started()  # a second start (an assign step after a revoke): same rebalance
    assert m.rebalance_started_at == first and m.rebalances == 0
    m.rebalance_completed()
    assert m.rebalances == 1 and m.rebalance_started_at is None
    assert m.last_rebalance_s is not None and m.total_rebalance_s >= m.last_rebalance_s
    m.rebalance_completed()  # nothing running: not counted twice
    assert m.rebalances == 1
    m.partitions_were_lost(3)
    assert m.partitions_lost == 3


def test_metrics_import_no_machine() -> None:
    """Both protocols feed the same hooks: metrics.py knows neither machine's actions."""
    import ast
    from pathlib import Path

    import aiogroup.metrics

    tree = ast.parse(Path(aiogroup.metrics.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m and m.startswith("aiogroup._membership")}


async def test_unreachable_broker_logs_one_error(caplog: pytest.LogCaptureFixture) -> None:
    m = ConsumerMetrics(session_timeout_s=0.0)  # any failure is past the session timeout
    caplog.set_level(logging.INFO, logger="aiogroup.health")
    for _ in range(3):
        with pytest.raises(ConnectionError):
            await m.timed_fetch(refused(), [])
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "unreachable" in errors[0].getMessage()
    assert not m.broker_reachable()
    m.session_timeout_s = 60.0
    await m.timed_fetch(answered(), [])
    assert m.broker_reachable()
    assert any("reachable again" in r.getMessage() for r in caplog.records)


async def test_idle_consumer_is_not_reported_unreachable() -> None:
    m = ConsumerMetrics(session_timeout_s=0.0)
    assert m.broker_reachable(), "no request, no evidence of an outage"


async def test_a_request_hanging_past_the_session_timeout_means_unreachable() -> None:
    import asyncio

    m = ConsumerMetrics(session_timeout_s=0.0)
    never: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    hanging = asyncio.ensure_future(m.timed_fetch(never, []))
    await asyncio.sleep(0)
    assert not m.broker_reachable()
    hanging.cancel()
    with pytest.raises(asyncio.CancelledError):
        await hanging
    assert m.broker_reachable(), "the cancelled request is no longer outstanding"
    pending: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
    held = asyncio.ensure_future(m.timed_group_request(JoinGroupRequest(), pending))
    await asyncio.sleep(0)
    assert m.broker_reachable(), "a broker may hold a JoinGroup for the rebalance timeout"
    assert not held.done()
    held.cancel()
    with pytest.raises(asyncio.CancelledError):
        await held


class JoinGroupRequest:
    pass


# -- health() and metrics() as pure functions of the consumer's view ------------------------

JOINED = MemberView(
    lifecycle="started",
    group_managed=True,
    joined=True,
    failed=False,
    member_state="STABLE",
    member_id="m-1",
    generation=3,
    seconds_since_poll=0.5,
    max_poll_interval_s=300.0,
)


def test_a_joined_member_that_polls_is_live_and_ready() -> None:
    h = assess_health(ConsumerMetrics(), JOINED)
    assert h.live and h.ready and h.joined and h.started and h.broker_reachable
    assert h.reasons == () and h.member_state == "STABLE" and h.last_error is None


@pytest.mark.parametrize(
    ("change", "live", "ready", "reason"),
    [
        ({"lifecycle": "new"}, False, False, "consumer is new"),
        ({"lifecycle": "stopped"}, False, False, "consumer is stopped"),
        ({"failed": True, "member_state": "FATAL"}, False, False, "fatal group error"),
        ({"seconds_since_poll": 301.0}, False, False, "no poll for 301.0s"),
        (
            {"joined": False, "member_state": "PREPARING_REBALANCE"},
            True,
            False,
            "not joined (member state PREPARING_REBALANCE)",
        ),
        # A poll waiting for records is polling; never polled is no evidence.
        ({"seconds_since_poll": None}, True, True, None),
        # assign()ed or group-less: nothing to join, nor a poll interval to keep.
        ({"group_managed": False, "joined": False, "seconds_since_poll": 999.0}, True, True, None),
    ],
)
def test_health_names_each_reason(
    change: dict[str, object], live: bool, ready: bool, reason: str | None
) -> None:
    h = assess_health(ConsumerMetrics(), replace(JOINED, **change))  # type: ignore[arg-type]
    assert (h.live, h.ready) == (live, ready)
    if reason is None:
        assert h.reasons == ()
    else:
        assert any(r.startswith(reason) for r in h.reasons), h.reasons


def test_health_without_a_broker_for_a_session_is_live_but_not_ready() -> None:
    m = ConsumerMetrics(session_timeout_s=10.0)
    m.created -= 20.0
    m._broker_failed(ConnectionError("refused"))
    h = assess_health(m, replace(JOINED, pending_error=KeyError("boom")))
    assert h.live and not h.ready and not h.broker_reachable
    assert "no broker request succeeded within session_timeout_ms" in h.reasons
    assert h.last_error == "KeyError('boom')"


@dataclass
class _State:
    tp: TopicPartition
    position: int | None
    highwater: int | None


def test_partition_lag_is_the_high_watermark_minus_the_position_never_negative() -> None:
    a, b, c = (TopicPartition("t", p) for p in range(3))
    got = partition_metrics([_State(a, 10, 15), _State(b, 20, 15), _State(c, None, 7)], {a: 1234})
    assert (got[a].lag, got[a].last_fetch_timestamp_ms) == (5, 1234)
    assert got[b].lag == 0  # the position passed a stale high watermark
    assert got[c].lag is None and got[c].last_fetch_timestamp_ms is None


def test_a_snapshot_copies_the_counters_and_carries_the_view() -> None:
    m = ConsumerMetrics()
    m.delivered(3, 300)
    m.rebalance_started()
    snap = snapshot(m, JOINED, {})
    assert (snap.records_consumed, snap.bytes_consumed) == (3, 300)
    assert snap.rebalance_in_progress and snap.member_id == "m-1" and snap.generation == 3
    m.fetch_latency.add(5.0)
    assert snap.fetch_latency.count == 0  # a copy, not the live counter
    assert snap.as_dict()["member_state"] == "STABLE" and snap.processing is None


def test_the_rate_window_keeps_an_entry_per_second_not_per_delivery(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """getone() tells the metrics of each record: the window must not grow with the rate."""
    clock = [1000.0]
    monkeypatch.setattr(metrics_module.time, "monotonic", lambda: clock[0])
    m = ConsumerMetrics()
    for second in range(60):
        for i in range(1000):
            clock[0] = 1000.0 + second + i / 1000
            m.delivered(1, 10)
    assert (m.records_consumed, m.bytes_consumed) == (60_000, 600_000)
    # The last 30 s (give or take the bucket): about 31 entries, not 30,000.
    assert len(m._deliveries) <= 32
    records_per_s, bytes_per_s = m.rates()
    assert 990 <= records_per_s <= 1040 and 9_900 <= bytes_per_s <= 10_400
