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
    assert "| tansu | aiogroup/tuned | **not available**: aiogroup.fetcher missing" in text
    assert "throughput 100B / aiogroup/tuned: unavailable" in text
    assert (tmp_path / "benchmarks" / "results.json").exists()
    assert (tmp_path / "benchmarks" / "throughput-100B.png").stat().st_size > 0


def _join_cfg(unmoved: float, baseline: float = 0.26) -> dict[str, Any]:
    def s(v: float) -> dict[str, float]:
        return {"median": v, "min": v * 0.9, "max": v * 1.1, "n": 3}

    return {
        "status": "ok",
        "runs": [],
        "summary": {
            "baseline_gap_s": s(baseline),
            "gap_unmoved_s": s(unmoved),
            "unmoved_partitions": s(9.0),
        },
    }


def _join_section(configs: dict[str, Any]) -> dict[str, Any]:
    return {
        "meta": {"quick": False, "reps": 3, "finished": "now", "seconds": 1},
        "partitions": 12,
        "produce_rate": 1000,
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 1000,
        "parallel": 4,
        "configs": configs,
    }


def test_join_fourth_compares_eager_and_cooperative_from_the_medians(tmp_path: Path) -> None:
    section = _join_section(
        {
            "aiogroup/defaults eager": _join_cfg(3.2),
            "aiogroup/defaults cooperative": {
                **_join_cfg(0.27),
                "runs": [
                    {"ok": True, "unmoved_revoked": 0.0, "gap_unmoved_s": 0.27},
                    {"ok": True, "unmoved_revoked": 1.0, "gap_unmoved_s": 7.5},
                    {"ok": True, "unmoved_revoked": 0.0, "gap_unmoved_s": 0.29},
                ],
            },
            "kafka-python/defaults eager": _join_cfg(4.0),
            "kafka-python/defaults cooperative": _join_cfg(15.5),
            "confluent/tuned eager": _join_cfg(3.0),
            "confluent/tuned cooperative": {
                "status": "failed",
                "error": "TimeoutError: A+B+C+D settled",
                "runs": [],
            },
        }
    )
    text = report.join_fourth_md([("Tansu 0.6.0", section)])
    assert "| Tansu 0.6.0 | aiogroup/defaults cooperative | 0.26 (0.23-0.29) |" in text
    assert "| 0.27 (0.24-0.30) |" in text and "| 9 (8-10) |" in text
    assert "| Tansu 0.6.0 | confluent/tuned cooperative | **failed**: TimeoutError" in text
    assert (
        "aiogroup/defaults: the longest pause of an unmoved partition is 0.27 s cooperative "
        "against 3.20 s eager (baseline 0.26 s; eager is 11.9x longer): cooperative keeps "
        "them at the baseline. In 1 of 3 runs a kept partition was revoked and given back "
        "to the same member on the way (pausing it up to 7.50 s)." in text
    )
    assert "15.50 s cooperative against 4.00 s eager (baseline 0.26 s; cooperative is 3.9x" in text
    assert text.count("runs a kept partition was revoked") == 1  # only where one was
    assert "cooperative does not shorten the pause" in text
    assert "confluent/tuned: no comparison" in text
    # The full document places the section and lists the failure with the reason.
    page = report.write({"scenarios": {"join_fourth": section}}, tmp_path).read_text()
    assert "## 2b. A fourth member joins a 3-member group" in page
    assert "join_fourth / confluent/tuned cooperative: failed" in page


def test_report_only_rewrites_the_page_from_stored_results(tmp_path: Path) -> None:
    from benchmarks.__main__ import main

    assert main(["--report-only", "--docs", str(tmp_path)]) == 1  # nothing stored yet
    assert not (tmp_path / "benchmarks.md").exists()
    report.write(_results(_cfg(900_000)), tmp_path)
    (tmp_path / "benchmarks.md").unlink()
    assert main(["--report-only", "--docs", str(tmp_path)]) == 0
    assert "| tansu | aiogroup/tuned | 900,000" in (tmp_path / "benchmarks.md").read_text()


def _memory(defaults: float, pinned: float | None) -> dict[str, Any]:
    """Memory results: buffer growth of the defaults (max is +10%) and the pinned run."""
    growth, buffer = _cfg(defaults + 0.2, "growth_mib"), _cfg(defaults, "buffer_growth_mib")
    growth["summary"].update(buffer["summary"])
    configs = {"aiogroup/defaults": growth}
    if pinned is not None:
        configs["aiogroup/mmap128k"] = _cfg(pinned, "buffer_growth_mib")
    return {"scenarios": {"memory": {"configs": configs}}}


def test_memory_target_is_judged_on_defaults_and_names_the_pinned_allocator_run() -> None:
    rows = {t: (m, v) for t, m, v in report.targets(_memory(60.0, 58.0))}
    measured, verdict = rows[
        "memory within the configured buffer bound (max_buffered_bytes = 64 MiB)"
    ]
    assert verdict == "**not met**"  # the max of 60 +10% is 66 MiB
    assert "worst buffer growth 66.0 MiB (RSS growth" in measured
    assert "worst buffer growth 63.8 MiB with glibc's mmap threshold fixed" in measured
    rows = {t: (m, v) for t, m, v in report.targets(_memory(50.0, None))}
    measured, verdict = rows[
        "memory within the configured buffer bound (max_buffered_bytes = 64 MiB)"
    ]
    assert verdict == "**met**" and "mmap" not in measured


def _broker_results(key: str, name: str, aiogroup: float, finished: str) -> dict[str, Any]:
    """One broker's run of the throughput scenario, as ``python -m benchmarks`` stores it."""
    section = _results(_cfg(aiogroup))["scenarios"]["throughput"]
    section["meta"] = {
        "quick": False,
        "reps": 3,
        "finished": finished,
        "seconds": 60,
        "broker": name,
        "command": f"AIOGROUP_BROKER={key} python -m benchmarks --scenario throughput --reps 3",
        "load": {"before": [1.5, 1.0, 0.5], "after": [2.25, 1.2, 0.6], "cpus": 2},
    }
    return {
        "brokers": {key: {"name": name, "environment": {}, "scenarios": {"throughput": section}}}
    }


def test_results_are_keyed_by_broker_and_each_broker_gets_its_rows(tmp_path: Path) -> None:
    # A file from before the keying: one broker's scenarios at the top, named by its
    # environment; it moves under that broker.
    legacy = _results(_cfg(800_000))
    legacy["environment"] = {"broker": "embedded (Tansu 0.6.0)"}
    keyed = report.normalize(legacy)
    assert set(keyed) == {"brokers"} and set(keyed["brokers"]) == {"tansu"}
    assert keyed["brokers"]["tansu"]["name"] == "Tansu 0.6.0"
    # A Kafka run added next to it keeps the Tansu numbers (what a run merges into).
    kafka = _broker_results("kafka", "Apache Kafka 4.4.0, 1 node", 700_000, "later")
    keyed["brokers"].update(kafka["brokers"])
    assert [b for b, _ in report.sections_of(keyed, "throughput")] == [
        "Tansu 0.6.0",
        "Apache Kafka 4.4.0, 1 node",
    ]
    text = report.write(keyed, tmp_path).read_text()
    assert "| Tansu 0.6.0 | aiogroup/tuned | 800,000 (720,000-880,000) |" in text
    assert "| Apache Kafka 4.4.0, 1 node | aiogroup/tuned | 700,000 (630,000-770,000) |" in text
    # Ratios are within one broker's run: Kafka's aiokafka against Kafka's aiogroup.
    assert "| Apache Kafka 4.4.0, 1 node | aiokafka/tuned | 600,000" in text
    assert "| 0.86x |" in text and "| 0.75x |" in text
    assert (
        "*Apache Kafka 4.4.0, 1 node: run later, full plan, 3 repetitions, 60 s; load "
        "average (1 min) 1.5 at the start, 2.2 at the end; `AIOGROUP_BROKER=kafka python -m "
        "benchmarks --scenario throughput --reps 3`.*" in text
    )
    assert "### Runs on Tansu 0.6.0" in text and "### Runs on Apache Kafka 4.4.0" in text
    # The issue-5 targets stay on the first broker in table order (Tansu).
    rows = {t: m for t, m, _ in report.targets(keyed)}
    assert rows["getmany throughput >= 1.3x aiokafka getmany (100 B)"].startswith("1.33x")
    # --report-only reads the keyed file back unchanged.
    stored = (tmp_path / "benchmarks" / "results.json").read_text()
    from benchmarks.__main__ import load_previous

    again = load_previous(tmp_path / "benchmarks" / "results.json")
    assert set(again["brokers"]) == {"tansu", "kafka"}
    assert report.write(again, tmp_path).read_text() == text
    assert (tmp_path / "benchmarks" / "results.json").read_text() == stored


def test_join_verdict_compares_aiogroup_with_the_fastest_peer_per_protocol() -> None:
    configs = {
        "aiogroup/defaults eager": _cfg(0.50, "join_assigned_s"),
        "aiokafka/defaults eager": _cfg(0.60, "join_assigned_s"),
        "confluent/tuned eager": _cfg(0.40, "join_assigned_s"),
        "aiogroup/defaults cooperative": _cfg(1.40, "join_assigned_s"),
        "confluent/tuned cooperative": _cfg(1.50, "join_assigned_s"),
        "aiogroup consumer protocol (KIP-848)": _cfg(1.0, "join_assigned_s"),
    }
    text = report.join_verdict(configs, "join_assigned_s", "Kafka")
    assert "eager: aiogroup 0.50 s, fastest peer confluent/tuned 0.40 s (0.10 s above it)" in text
    assert (
        "cooperative: aiogroup 1.40 s, fastest peer confluent/tuned 1.50 s (at or below it)" in text
    )
    assert "consumer protocol" not in text  # no peer ran it: nothing to compare


def test_rebalance_section_names_its_clock_and_the_broker_counts(tmp_path: Path) -> None:
    metrics = ("baseline_gap_s", "join_assigned_s", "join_settle_s", "join_rebalances")
    cfg = {
        "status": "ok",
        "runs": [],
        "summary": {m: {"median": 1.0, "min": 1.0, "max": 2.0, "n": 3} for m in metrics},
    }
    section = {
        "partitions": 8,
        "produce_rate": 1000,
        "session_timeout_ms": 6000,
        "heartbeat_interval_ms": 1000,
        "parallel": 4,
        "meta": {"quick": False, "reps": 3, "finished": "now", "seconds": 1},
        "configs": {"aiogroup/defaults eager": cfg},
    }
    text = report.rebalance_md([("Tansu 0.6.0", section)])
    assert "**Clock of the join figures**: from the joining member's call into its client" in text
    assert "| join: settled (broker) | join: rebalances (broker) |" in text
    assert (
        "| Tansu 0.6.0 | aiogroup/defaults eager | 1.00 (1.00-2.00) | 1.00 (1.00-2.00) | - |"
        in text
    )
    assert "| 1 (1-2) |" in text


def _cost(per_record: float) -> dict[str, Any]:
    return {"status": "ok", "instructions_per_record": per_record, "drains": {}}


def test_record_cost_guard_judges_ratios_against_the_stated_thresholds(tmp_path: Path) -> None:
    section = {
        "meta": {"quick": False, "reps": 3, "finished": "now", "seconds": 1, "broker": "Tansu"},
        "small": 20_000,
        "large": 100_000,
        "limits": {"getmany_vs_aiokafka": 0.6, "async_for_vs_getmany": 1.11},
        "configs": {
            "aiogroup/getmany": _cost(7_000),
            "aiogroup/async-for": _cost(14_000),
            "aiokafka/getmany": _cost(12_500),
        },
    }
    rows = {t: (m, v) for t, m, v in report.record_cost_targets(section)}
    assert len(rows) == 2
    (getmany, verdict), (loop, loop_verdict) = rows.values()
    assert getmany.startswith("0.56x") and verdict == "**met**"
    assert loop.startswith("2.00x") and loop_verdict == "**not met**"
    section["configs"]["aiogroup/getmany"] = _cost(11_500)  # the d3364ad regression
    assert next(v for _, _, v in report.record_cost_targets(section)) == "**not met**"
    results = {"scenarios": {"record-cost": section}}
    text = report.write(results, tmp_path).read_text()
    assert "## Record path cost per record" in text and "d3364ad" in text
    assert "| aiogroup/getmany | 11,500 | 0.92x | <= 0.60x aiokafka getmany | **not met** |" in text
    assert [v for _, _, v in report.record_cost_targets({})] == ["not measured"] * 2


def _spread_cfg(median: float, low: float, high: float, cpu: float) -> dict[str, Any]:
    return {
        "status": "ok",
        "runs": [],
        "summary": {
            "records_per_s": {"median": median, "min": low, "max": high, "n": 3},
            "cpu_s": {"median": cpu, "min": cpu, "max": cpu, "n": 3},
        },
    }


def test_record_path_targets_are_met_only_where_every_run_beats_the_fastest_peer() -> None:
    results = _broker_results("kafka", "Apache Kafka", 1.0, "now")
    configs = results["brokers"]["kafka"]["scenarios"]["throughput"]["payloads"]["100B"]["configs"]
    configs["confluent-aio/tuned"] = _spread_cfg(650_000, 600_000, 680_000, 0.8)

    def verdicts(low: float, median: float, high: float, cpu: float) -> list[str]:
        configs["aiogroup/tuned"] = _spread_cfg(median, low, high, cpu)
        rows = report.record_path_targets(results)
        assert "confluent-aio/tuned" in rows[0][1]  # the fastest peer, not aiokafka
        return [v for _, _, v in rows[:2]]

    # Every run at least 1.2x the peer's best run, and less CPU in every run.
    assert verdicts(820_000, 850_000, 900_000, 0.7) == ["**met** (every run)"] * 2
    # 1.2x at the median, but the worst run is not: ranges overlap.
    assert verdicts(700_000, 800_000, 900_000, 0.7)[0].startswith("**not met**: met at the median")
    assert verdicts(550_000, 600_000, 700_000, 0.9) == ["**not met**"] * 2
