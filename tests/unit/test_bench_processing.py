"""The processing benchmark's verdicts: the issue's target, and the measured ceiling beside it."""

from __future__ import annotations

import asyncio
from typing import Any

from benchmarks import processing


def _row(rate: float, bound: float | None = None) -> dict[str, Any]:
    return {
        "status": "ok",
        "error": "",
        "runs": [{"ok": True, "rate": rate, "finished": 1000, "seconds": 1.0, "cpu_total_s": 1.0}],
        "info": {"bound": bound},
        "summary": {},
    }


def test_met_is_the_issues_target_whatever_the_ceiling() -> None:
    configs = {
        "aiogroup/processor-c10": _row(1_700, bound=2_000),
        "asyncio/ceiling-c10": _row(1_500),
    }
    assert processing.verdict(configs, "aiogroup/processor-c10") == "c10 met"


def test_a_miss_is_blamed_on_the_loop_only_when_the_ceiling_measured_it() -> None:
    below = {
        "aiogroup/processor-c1000": _row(60_000, bound=200_000),
        "asyncio/ceiling-c1000": _row(120_000),
    }
    said = processing.verdict(below, "aiogroup/processor-c1000")
    assert said is not None
    assert said.startswith("c1000 not met: target above the event loop's ceiling")
    assert "120,000/s < target 160,000/s" in said
    above = {
        "aiogroup/processor-c1000": _row(60_000, bound=200_000),
        "asyncio/ceiling-c1000": _row(170_000),
    }
    assert processing.verdict(above, "aiogroup/processor-c1000") == "c1000 not met"
    # A run from before the ceiling rows: the plain verdict.
    alone = {"aiogroup/processor-c1000": _row(60_000, bound=200_000)}
    assert processing.verdict(alone, "aiogroup/processor-c1000") == "c1000 not met"


def test_the_ceiling_belongs_to_processor_rows_of_the_same_concurrency() -> None:
    configs = {
        "aiogroup/processor-c100": _row(15_000, bound=20_000),
        "asyncio/ceiling-c100": _row(16_000),
        "asyncio/ceiling-c1000": _row(110_000),
        "aiokafka/gather": _row(40_000),
    }
    assert processing.ceiling_rate(configs, "aiogroup/processor-c100") == 16_000
    assert processing.ceiling_rate(configs, "aiokafka/gather") is None
    assert processing.verdict(configs, "asyncio/ceiling-c100") is None
    md = processing.markdown([("Tansu", {"records": 1000, "max_seconds": 10, "configs": configs})])
    assert "| aiogroup/processor-c100 | 15,000 |" in md
    assert "| 0.75 | 0.94 |" in md  # / bound, / ceiling


def test_the_ceiling_runs_the_handler_on_every_record_at_the_concurrency() -> None:
    running = 0
    most = 0
    seen: list[int] = []

    async def main() -> dict[str, Any]:
        tally = processing.Tally(50, 10.0, 50)

        async def handle(record: Any) -> None:
            nonlocal running, most
            tally.start()
            running += 1
            most = max(most, running)
            await asyncio.sleep(0)
            running -= 1
            seen.append(record.offset)
            tally.finish(record.key)

        await processing.run_ceiling({"records": 50, "concurrency": 7}, tally, handle)
        return tally.result()

    result = asyncio.run(main())
    assert result["complete"] and result["finished"] == 50
    assert sorted(seen) == list(range(50))
    assert most == 7


def test_the_cost_childs_processor_and_ceiling_finish_every_record() -> None:
    """benchmarks.processing_cost counts between marks; what it counts must be the work."""
    from benchmarks import processing_cost

    for mode in ("processor", "ceiling"):
        got = asyncio.run(processing_cost._child(mode, 20, 300))
        assert got["finished"] == 300, mode
