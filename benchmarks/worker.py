"""One measurement in a process of its own: ``python -m benchmarks.worker '<json spec>'``.

A fresh process per measurement makes CPU seconds and peak RSS belong to one client
alone and keeps one client's leftovers (threads, buffers, a wedged connection) from
touching the next.  The result is the last stdout line, prefixed ``RESULT ``.
"""

from __future__ import annotations

import asyncio
import json
import math
import resource
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from benchmarks import adapters, rawfetch
from benchmarks.adapters.base import NotAvailable

RESULT_PREFIX = "RESULT "
#: Records the memory scenario takes before stalling (a small first batch).
FIRST_BATCH = 100


def peak_rss_mib() -> float:
    """This process's own RSS high-water mark.

    Not ``ru_maxrss``: Linux carries that across fork+exec, so a worker started by a
    big orchestrator would report the orchestrator's size.  ``VmHWM`` belongs to the
    address space the worker got at exec.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rusage() -> dict[str, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_total_s": usage.ru_utime + usage.ru_stime, "peak_rss_mib": peak_rss_mib()}


def _cpu() -> float:
    return time.process_time()  # all threads of this process: librdkafka's count too


async def throughput(spec: dict[str, Any]) -> dict[str, Any]:
    topic, partitions, records = spec["topic"], list(range(spec["partitions"])), spec["records"]
    if spec["client"] == "raw-fetch":
        cpu0 = _cpu()
        count, nbytes, seconds = await rawfetch.drain(
            spec["bootstrap"], topic, partitions, records, spec["timeout"]
        )
        return {"records": count, "bytes": nbytes, "seconds": seconds, "cpu_s": _cpu() - cpu0}
    adapter = adapters.make(spec["client"], spec["variant"], spec["bootstrap"])
    adapter.preload()  # a one-time import is not throughput
    await adapter.assign(topic, partitions)
    try:
        cpu0 = _cpu()
        t0 = time.monotonic()
        count, nbytes = await adapter.drain(records, spec["timeout"])
        seconds = time.monotonic() - t0
        cpu = _cpu() - cpu0
    finally:
        await adapter.close()
    if count < records:
        raise RuntimeError(f"consumed {count} of {records}")
    return {"records": count, "bytes": nbytes, "seconds": seconds, "cpu_s": cpu}


async def commit_latency(spec: dict[str, Any]) -> dict[str, Any]:
    """Awaited commits of one offset and of every partition, timed one by one."""
    adapter = adapters.make(spec["client"], spec["variant"], spec["bootstrap"])
    topic, parts = spec["topic"], spec["partitions"]
    await adapter.assign(topic, list(range(parts)), group_id=spec["group_id"])
    samples: dict[str, list[float]] = {"one": [], "all": []}
    try:
        for _ in range(spec["warmup"]):
            await adapter.commit(topic, {0: 1})
        for i in range(spec["commits"]):
            t0 = time.perf_counter()
            await adapter.commit(topic, {0: i + 1})
            samples["one"].append(time.perf_counter() - t0)
        for i in range(spec["commits"]):
            offsets = {p: i + 1 for p in range(parts)}
            t0 = time.perf_counter()
            await adapter.commit(topic, offsets)
            samples["all"].append(time.perf_counter() - t0)
    finally:
        await adapter.close()
    return {"samples": samples, "partitions": parts}


class _RssSampler:
    """Samples this process's RSS from a thread, so a blocked client cannot skip samples."""

    def __init__(self, interval: float = 0.05) -> None:
        import psutil  # type: ignore[import-untyped]

        self._proc = psutil.Process()
        self.interval = interval
        self.peak = 0
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def rss(self) -> int:
        return int(self._proc.memory_info().rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = self.rss()
            self.peak = max(self.peak, rss)
            self.samples.append((time.monotonic(), rss))
            self._stop.wait(self.interval)

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _trimmed_rss(sampler: _RssSampler) -> int | None:
    """RSS after glibc's malloc_trim(0): what is live, without freed memory kept mapped.

    Diagnostic only, taken after the peak was recorded: the difference to the peak
    is memory the allocator kept after the client freed it (transient response
    copies), which RSS still counts.  None where the C library is not glibc.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        trim = None
    if trim is None:
        return None
    trim(0)
    return sampler.rss()


async def memory(spec: dict[str, Any]) -> dict[str, Any]:
    """Start, take one small batch so fetching is under way, then stall and watch RSS."""
    adapter = adapters.make(spec["client"], spec["variant"], spec["bootstrap"])
    adapter.preload()
    sampler = _RssSampler()
    baseline = sampler.rss()
    first = 0
    with sampler:
        await adapter.assign(spec["topic"], list(range(spec["partitions"])))
        try:
            if spec.get("idle"):
                # The same consumer on an empty topic: what it costs with nothing to
                # buffer (connections, metadata, tasks), so the buffer's own growth can
                # be told apart from the client's fixed footprint.
                first = (await adapter.poll(2.0, max_records=FIRST_BATCH)).count
                if first:
                    raise RuntimeError(f"idle topic held {first} records")
            else:
                deadline = time.monotonic() + 30
                while first == 0 and time.monotonic() < deadline:
                    # A small batch: the records the application holds are its memory,
                    # not the consumer's read-ahead, which is what this scenario bounds.
                    first = (await adapter.poll(1.0, max_records=FIRST_BATCH)).count
                if first == 0:
                    raise RuntimeError("no record within 30 s")
            await asyncio.sleep(spec["stall_seconds"])  # the application is busy elsewhere
            stalled_peak = sampler.peak
            trimmed = _trimmed_rss(sampler)
        finally:
            await adapter.close()
    return {
        "baseline_mib": baseline / 2**20,
        "stall_peak_mib": stalled_peak / 2**20,
        "growth_mib": (stalled_peak - baseline) / 2**20,
        "trimmed_growth_mib": math.nan if trimmed is None else (trimmed - baseline) / 2**20,
        "first_poll_records": first,
        "buffer_bound": adapter.describe_bound(),
        "rss_trace": [(round(t - sampler.samples[0][0], 3), r / 2**20) for t, r in sampler.samples][
            ::4
        ],
    }


TASKS = {"throughput": throughput, "commit": commit_latency, "memory": memory}


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    try:
        result: dict[str, Any] = {"ok": True, **asyncio.run(TASKS[spec["task"]](spec))}
    except NotAvailable as exc:
        result = {"ok": False, "unavailable": True, "error": str(exc)}
    except Exception as exc:
        traceback.print_exc()
        result = {"ok": False, "unavailable": False, "error": f"{type(exc).__name__}: {exc}"}
    result.update(_rusage())
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
