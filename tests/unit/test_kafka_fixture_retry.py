"""The Kafka fixture starts again on new ports when a node found its port taken."""

from __future__ import annotations

import pytest

from aiogroup.testing import kafka
from aiogroup.testing.kafka import KafkaCluster, KafkaSetupError

BIND = (
    "kafka mode: node 1 exited with code 1; log /tmp/x/server.log:\n"
    "Caused by: java.net.BindException: Address already in use"
)


class Scripted(KafkaCluster):
    """start()'s retry policy with each attempt's outcome scripted (no JVM)."""

    def __init__(self, outcomes: list[BaseException | None]) -> None:
        super().__init__()
        self.outcomes = outcomes
        self.attempts = 0
        self.stops = 0

    async def _start_once(self) -> None:
        self.attempts += 1
        outcome = self.outcomes.pop(0)
        if outcome is not None:
            raise outcome

    async def stop(self, keep_logs: bool = False) -> None:
        self.stops += 1


async def test_a_taken_port_is_retried_on_new_ports() -> None:
    cluster = Scripted([KafkaSetupError(BIND), None])
    assert await cluster.start() is cluster
    assert cluster.attempts == 2 and cluster.stops == 1


async def test_other_failures_are_raised_at_once() -> None:
    cluster = Scripted([KafkaSetupError("node 1 did not answer within 90s"), None])
    with pytest.raises(KafkaSetupError, match="did not answer"):
        await cluster.start()
    assert cluster.attempts == 1


async def test_a_port_taken_every_time_gives_up_after_the_attempts() -> None:
    cluster = Scripted([KafkaSetupError(BIND) for _ in range(kafka.START_ATTEMPTS)])
    with pytest.raises(KafkaSetupError, match="BindException"):
        await cluster.start()
    assert cluster.attempts == kafka.START_ATTEMPTS
