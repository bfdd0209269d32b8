"""The benchmark report: number formatting, target verdicts, unavailable clients."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks import report


def _cfg(median: float, metric: str = "records_per_s") -> dict[str, Any]:
    return {
        "status": "ok",
        "runs": [],
        "summary": {metric: {"median": median, "min": median * 0.9, "max": median * 1.1, "n": 3}},
    }


def _results(aiogroup: dict[str, Any]) -> dict[str, Any]:
    return {
        "scenarios": {
            "throughput": {
                "meta": {"quick": True, "reps": 3, "finished": "now", "seconds": 1},
                "payloads": {
                    "100B": {
                        "dataset": {"records": 1000, "partitions": 8},
                        "configs": {
                            "raw-fetch": _cfg(3_000_000),
                            "aiogroup/tuned": aiogroup,
                            "aiokafka/defaults": _cfg(500_000),
                            "aiokafka/tuned": _cfg(600_000),
                        },
                    }
                },
            }
        }
    }


def test_cell_shows_median_then_range() -> None:
    cell = report.cell({"median": 1234.5, "min": 1000.0, "max": 2000.0, "n": 3}, 0)
    assert cell == "1,234 (1,000-2,000)"
    assert report.cell(None) == "-"


def test_targets_compare_with_the_best_aiokafka_configuration() -> None:
    rows = {t: (m, v) for t, m, v in report.targets(_results(_cfg(900_000)))}
    measured, verdict = rows["getmany throughput >= 1.3x aiokafka getmany (100 B)"]
    assert measured.startswith("1.50x") and verdict == "**met**"
    measured, verdict = rows["getmany within 2x of the raw fetch ceiling (100 B)"]
    assert measured.startswith("ceiling is 3.33x") and verdict == "**not met**"


def test_unavailable_aiogroup_is_not_measured_and_shown_as_such(tmp_path: Path) -> None:
    missing = {"status": "unavailable", "error": "aiogroup.fetcher missing", "runs": []}
    results = _results(missing)
    verdicts = [v for _, _, v in report.targets(results)]
    assert verdicts and all(v == "not measured" for v in verdicts)
    text = report.write(results, tmp_path).read_text()
    assert "| aiogroup/tuned | **not available**: aiogroup.fetcher missing" in text
    assert "throughput 100B / aiogroup/tuned: unavailable" in text
    assert (tmp_path / "benchmarks" / "results.json").exists()
    assert (tmp_path / "benchmarks" / "throughput-100B.png").stat().st_size > 0
