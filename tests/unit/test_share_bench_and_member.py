"""Pure parts of the share benchmark (its verdicts) and of the share member process
(the outcome log a scenario reads to learn what the application was told)."""

from __future__ import annotations

from pathlib import Path

from aiogroup.share import AcknowledgeType, AckResult
from aiogroup.structs import TopicPartition
from aiogroup.testing.share_member import OutcomeLog, load_outcomes
from benchmarks.share_consumer import report, verdict
from benchmarks.stats import summarize


def test_verdict_needs_every_run() -> None:
    ours = summarize([100, 110, 120])
    assert verdict(ours, summarize([50, 90, 99])) == "met (every run)"
    assert verdict(ours, summarize([121, 130])) == "not met (every run)"
    assert verdict(ours, summarize([90, 105])) == "not shown (ranges overlap)"
    # Within 2x: every run of ours above half of every run of theirs.
    assert verdict(ours, summarize([150, 190]), 0.5) == "met (every run)"
    assert verdict(ours, summarize([150, 230]), 0.5) == "not shown (ranges overlap)"
    assert verdict(ours, summarize([250, 300]), 0.5) == "not met (every run)"


def test_report_states_both_targets_per_consumer_count() -> None:
    rows = [
        {"client": c, "consumers": n, "handler_ms": 0, "records_per_s": rate}
        for n in (1, 4)
        for c, rate in (("aiogroup", 30_000), ("confluent", 90_000), ("java", 50_000))
    ]
    lines = report(rows, [])
    assert "| 1 | 0 ms | aiogroup | 30,000 | 30,000-30,000 | 1 |" in lines
    (one,) = [line for line in lines if line.startswith("- 1 consumer")]
    assert "aiogroup/confluent 0.33x" in one and "ahead of confluent-kafka: not met" in one
    assert "aiogroup/Java 0.60x" in one and "within 2x of Java: met" in one


def test_report_separates_the_join_from_the_drain() -> None:
    rows = [
        {
            "client": "aiogroup",
            "consumers": 1,
            "handler_ms": 0,
            "records": 200_000,
            "seconds": seconds,
            "records_per_s": 200_000 / seconds,
            "first_record_s": 1.0,
        }
        for seconds in (3.0, 5.0, 2.0)
    ]
    rows += [
        {"client": c, "consumers": n, "handler_ms": 0, "records_per_s": 50_000}
        for n, c in ((1, "confluent"), (1, "java"), (4, "aiogroup"), (4, "confluent"), (4, "java"))
    ]
    (line,) = [x for x in report(rows, []) if "first record" in x]
    assert line == (
        "- aiogroup, 1 consumer(s): first record 1.00-1.00 s after creation (the join); "
        "from it to the last, 100,000 records/s at the median (50,000-200,000)"
    )


def test_outcome_log_writes_what_the_application_was_told(tmp_path: Path) -> None:
    path = tmp_path / "outcomes.jsonl"
    assert load_outcomes(path) == []
    log = OutcomeLog(path, "m1")
    log.write("started", member_id="abc")
    tp = TopicPartition("t", 0)
    log.results(
        {
            tp: [
                AckResult("t", 0, AcknowledgeType.ACCEPT, (3, 4), 0),
                AckResult("t", 0, AcknowledgeType.RELEASE, (5,), -1, "fenced", sent=False),
            ]
        },
        "callback",
    )
    log.close()
    log.write("ignored after close")
    started, *acks = load_outcomes(path)
    assert started["k"] == "started" and started["member_id"] == "abc" and started["c"] == "m1"
    assert [(a["offset"], a["ack"], a["outcome"], a["error"], a["via"]) for a in acks] == [
        (3, "accept", "ok", None, "callback"),
        (4, "accept", "ok", None, "callback"),
        (5, "release", "failed", "-1 fenced", "callback"),
    ]
