"""``python -m benchmarks [--quick] [--scenario NAME ...]``: run, then write docs/benchmarks.md.

Results of earlier runs are kept, per broker, for the scenarios not rerun, so one scenario can be
refreshed on its own; each section of the document says when and how it ran.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import report
from benchmarks.harness import ROOT, Context, Plan
from benchmarks.scenarios import SCENARIOS

QUICK_DEFAULT = ("throughput", "commit", "memory", "rebalance")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller data and shorter stalls, still >= 3 repetitions; by default runs "
        + ", ".join(QUICK_DEFAULT),
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=list(SCENARIOS),
        help="run only this scenario (repeatable); default: all (quick: see --quick)",
    )
    parser.add_argument("--reps", type=int, default=None, help="repetitions (>= 3, default 3)")
    parser.add_argument(
        "--parallel",
        type=int,
        default=None,
        help="independent groups run at once in the rebalance and slow-listener scenarios "
        "(default 4, quick 7)",
    )
    parser.add_argument(
        "--docs", type=Path, default=ROOT / "docs", help="where benchmarks.md is written"
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="drop this broker's earlier results instead of merging (other brokers' stay)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: rewrite benchmarks.md and the plots from results.json "
        "(after editing docs/benchmarks/profile.md, say)",
    )
    parser.add_argument(
        "--processing-records",
        type=int,
        default=None,
        help="records in the processing scenario (default 200,000, quick 20,000)",
    )
    args = parser.parse_args(argv)
    args.argv = list(argv)
    if args.parallel is not None and args.parallel < 1:
        parser.error("--parallel must be >= 1")
    try:
        args.plan = Plan.make(args.quick, args.reps)
        if args.processing_records is not None:
            if args.processing_records < 100:
                raise ValueError(
                    f"--processing-records must be >= 100, got {args.processing_records}"
                )
            args.plan = dataclasses.replace(args.plan, processing_records=args.processing_records)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def _version(module: str) -> str:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return "not installed"


def environment(bootstrap: str, mode: str) -> dict[str, Any]:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import confluent_kafka

        librdkafka = confluent_kafka.libversion()[0]
    except Exception:
        librdkafka = "?"
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    except OSError:
        commit = "?"
    return {
        "machine": f"{cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "aiogroup commit": commit or "?",
        "aiokafka": _version("aiokafka"),
        "kafka-python": _version("kafka-python"),
        "confluent-kafka": f"{_version('confluent-kafka')} (librdkafka {librdkafka})",
        "pyarrow": _version("pyarrow"),
        "broker": f"{mode} ({_broker_name(mode, bootstrap)})",
    }


def _broker_name(mode: str, bootstrap: str) -> str:
    """What ran: the embedded Tansu, Apache Kafka from the Maven jars, or an address."""
    if mode == "embedded":
        return "Tansu 0.6.0"
    if mode in ("kafka", "kafka-cluster"):
        from aiogroup.testing.kafka import KAFKA_VERSION

        return f"Apache Kafka {KAFKA_VERSION}, {'3 nodes' if mode == 'kafka-cluster' else '1 node'}"
    return bootstrap


def load_previous(path: Path) -> dict[str, Any]:
    """Earlier results, keyed by broker (an older, unkeyed file is moved under its broker)."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return report.normalize(data)


def command_line(argv: list[str]) -> str:
    """How this run was started, as the document states it (broker included)."""
    broker = os.environ.get("AIOGROUP_BROKER", "").strip() or "tansu"
    return " ".join(["AIOGROUP_BROKER=" + broker, "python -m benchmarks", *argv])


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


async def main_async(args: argparse.Namespace) -> int:
    from aiogroup.testing import KafkaBroker

    plan: Plan = args.plan
    names = args.scenario or (list(QUICK_DEFAULT) if plan.quick else list(SCENARIOS))
    parallel = args.parallel or (7 if plan.quick else 4)
    results_path = args.docs / "benchmarks" / "results.json"
    results = load_previous(results_path) or report.normalize({})
    failures = 0
    async with KafkaBroker() as broker:
        ctx = Context(broker.bootstrap_servers, broker, plan, parallel=parallel)
        # Each broker's runs live under their own key: a Kafka run keeps Tansu's numbers.
        entry = results["brokers"].setdefault(report.broker_key(broker.mode), {})
        if args.fresh:
            entry["scenarios"] = {}
        entry.setdefault("scenarios", {})
        entry["name"] = _broker_name(broker.mode, broker.bootstrap_servers)
        entry["environment"] = environment(broker.bootstrap_servers, broker.mode)
        ctx.log(f"broker {broker.mode} at {broker.bootstrap_servers}; scenarios: {names}")
        for name in names:
            module = SCENARIOS[name]
            ctx.log(f"== {name}: {module.TITLE}")
            started = time.monotonic()
            load_before = _load()
            try:
                section = await module.run(ctx)
            except Exception as exc:  # one broken scenario must not lose the others
                failures += 1
                ctx.log(f"scenario {name} FAILED: {type(exc).__name__}: {exc}")
                section = {"error": f"{type(exc).__name__}: {exc}", "configs": {}}
            section["meta"] = {
                "quick": plan.quick,
                "reps": plan.reps,
                "plan": plan.to_json(),
                "finished": datetime.datetime.now(datetime.timezone.utc).strftime(
                    "%Y-%m-%d %H:%M UTC"
                ),
                "seconds": time.monotonic() - started,
                "broker": entry["name"],
                "command": command_line(args.argv),
                "load": {"before": load_before, "after": _load(), "cpus": os.cpu_count()},
            }
            entry["scenarios"][name] = section
            path = report.write(results, args.docs)
            ctx.log(f"== {name} done in {time.monotonic() - started:.0f}s; wrote {path}")
    return 1 if failures else 0


def report_only(docs: Path) -> int:
    results = load_previous(docs / "benchmarks" / "results.json")
    if not any(b.get("scenarios") for b in results.get("brokers", {}).values()):
        print(f"no results in {docs / 'benchmarks' / 'results.json'}; run a scenario first")
        return 1
    print(f"wrote {report.write(results, docs)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.report_only:
        return report_only(args.docs)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
