"""ConsumerMetrics on its own: latency bookkeeping, rebalance timing, broker reachability."""

from __future__ import annotations

import logging

import pytest

from aiogroup.metrics import ConsumerMetrics, LatencyStats
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
