"""The benchmark scenarios, by name, in the order a full run executes them."""

from __future__ import annotations

from benchmarks import processing
from benchmarks.scenarios import (
    commit,
    join_fourth,
    memory,
    rebalance,
    record_cost,
    scale,
    slow_listener,
    throughput,
)

SCENARIOS = {
    "throughput": throughput,
    "commit": commit,
    "memory": memory,
    "rebalance": rebalance,
    "join_fourth": join_fourth,
    "slow-listener": slow_listener,
    "scale": scale,
    "processing": processing,
    "record-cost": record_cost,
}

__all__ = ["SCENARIOS"]
