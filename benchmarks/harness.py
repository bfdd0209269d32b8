"""What every scenario shares: the broker, the produced topics and the worker runner."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.data import PAYLOADS, Dataset, produce
from benchmarks.stats import Summary, summarize
from benchmarks.worker import RESULT_PREFIX

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Plan:
    """Sizes for one run: ``quick`` keeps >= 3 repetitions and shrinks everything else."""

    quick: bool
    reps: int = 3
    records: int = 1_000_000
    records_1k: int = 250_000
    payloads: tuple[str, ...] = ("100B", "1KiB", "100B-lz4", "100B-zstd")
    commits: int = 200
    commit_partitions: int = 100
    stall_seconds: float = 20.0
    memory_records: int = 1_000_000
    session_timeout_ms: int = 6000
    heartbeat_interval_ms: int = 1000
    slow_revoke_seconds: float = 15.0
    scale_members: tuple[int, ...] = (1, 2, 4, 8)
    scale_partitions: int = 64
    scale_records: int = 2_000_000
    processing_records: int = 200_000
    processing_max_seconds: float = 30.0
    processing_kill_records: int = 20_000

    @classmethod
    def make(cls, quick: bool, reps: int | None = None) -> Plan:
        if reps is not None and reps < 3:
            raise ValueError(
                f"--reps must be >= 3 (median/min/max of fewer says little), got {reps}"
            )
        if quick:
            return cls(
                quick=True,
                reps=reps or 3,
                records=200_000,
                records_1k=50_000,
                payloads=("100B", "100B-lz4"),
                commits=100,
                stall_seconds=5.0,
                scale_members=(1, 2, 4),
                scale_records=300_000,
                processing_records=20_000,
                processing_max_seconds=10.0,
                processing_kill_records=5_000,
            )
        return cls(quick=False, reps=reps or 3)

    def records_for(self, payload: str) -> int:
        return self.records_1k if PAYLOADS[payload].value_bytes > 200 else self.records

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class Outcome:
    """All repetitions of one client configuration in one measurement."""

    status: str = "ok"  # ok | unavailable | failed
    error: str = ""
    runs: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Summary] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "error": self.error,
            "runs": self.runs,
            "summary": {k: v.to_json() for k, v in self.summary.items()},
            "info": self.info,
        }

    def summarize(self, metrics: dict[str, Callable[[dict[str, Any]], float]]) -> None:
        ok = [r for r in self.runs if r.get("ok")]
        if self.status != "ok" or not ok:
            return
        for name, f in metrics.items():
            # NaN marks "does not apply in this run" (e.g. no partition stayed put).
            values = [v for v in (float(f(r)) for r in ok) if not math.isnan(v)]
            if values:
                self.summary[name] = summarize(values)

    def record(self, result: dict[str, Any]) -> None:
        """Keep a run; the first unavailability or failure marks the whole configuration."""
        self.runs.append(result)
        if result.get("ok") or self.status != "ok":
            return
        self.status = "unavailable" if result.get("unavailable") else "failed"
        self.error = str(result.get("error", ""))


class Context:
    """Passed to every scenario: the broker, the plan, produced topics, logging."""

    def __init__(self, bootstrap_servers: str, broker: Any, plan: Plan, parallel: int = 1) -> None:
        self.bootstrap = bootstrap_servers
        #: group scenarios may run this many independent groups at once (timer-bound waits)
        self.parallel = parallel
        self.broker = broker
        self.plan = plan
        self._datasets: dict[tuple[str, int, int], Dataset] = {}
        self.started = time.monotonic()

    def log(self, message: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[{elapsed:7.1f}s] {message}", file=sys.stderr, flush=True)

    async def dataset(
        self, payload: str, partitions: int = 8, records: int | None = None
    ) -> Dataset:
        """The topic for ``payload``, produced on first use and reused by every client."""
        n = records if records is not None else self.plan.records_for(payload)
        key = (payload, partitions, n)
        if key not in self._datasets:
            topic = await self.broker.create_topic(
                f"bench-{payload.lower()}-{partitions}p-{n}-{os.getpid()}", partitions
            )
            self.log(f"producing {n} records ({PAYLOADS[payload].describe()}) to {topic}")
            self._datasets[key] = await asyncio.to_thread(
                produce, self.bootstrap, topic, PAYLOADS[payload], n, partitions
            )
            self.log(f"  produced in {self._datasets[key].produce_seconds:.1f}s")
        return self._datasets[key]

    async def run_worker(self, spec: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
        """Run one measurement in a fresh interpreter; a crash or hang becomes a failed run."""
        spec = {"bootstrap": self.bootstrap, **spec}
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.worker",
            json.dumps(spec),
            cwd=str(ROOT),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=worker_env(_variant_env(spec)),
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            return {
                "ok": False,
                "unavailable": False,
                "error": f"worker timed out after {timeout}s",
            }
        for line in reversed(out.decode(errors="replace").splitlines()):
            if line.startswith(RESULT_PREFIX):
                result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
                if not result.get("ok") and not result.get("unavailable"):
                    result["stderr_tail"] = err.decode(errors="replace")[-1500:]
                return result
        return {
            "ok": False,
            "unavailable": False,
            "error": f"worker exited {proc.returncode} without a result",
            "stderr_tail": err.decode(errors="replace")[-1500:],
        }


def _variant_env(spec: dict[str, Any]) -> dict[str, str]:
    """The process environment a worker's client variant asks for (none if unknown)."""
    from benchmarks import adapters

    client, variant = spec.get("client"), spec.get("variant")
    if client not in adapters.CLIENTS or not isinstance(variant, str):
        return {}
    try:
        table = adapters.variants(client)
    except ImportError:
        return {}  # the worker reports the client as unavailable
    chosen = table.get(variant)
    return dict(chosen.env) if chosen is not None else {}


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra or {})
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env
