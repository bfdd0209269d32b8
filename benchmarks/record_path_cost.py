"""The record path's cost per record, in instructions: a guard that load does not move.

``python -m benchmarks.record_path_cost [--tree PATH ...] [--wall REPS]``

Wall-clock throughput on a shared two-core machine moves by tens of percent with
whatever else runs; the number of instructions a drain executes barely moves.  So
this guard counts instructions with valgrind's callgrind (hardware counters are not
available in the VMs this runs in), which makes a regression of a few percent in the
record path visible where wall time cannot show it.

The scenario: the embedded broker (or ``AIOGROUP_BROKER``'s), two topics of 8
partitions holding ``--small`` and ``--large`` records of 100 B (``--payload 1KiB``:
1 KiB, to see what costs per byte rather than per record; ``100B-lz4`` / ``100B-zstd``:
100 B text-like values in lz4 / zstd batches, to see what a codec costs per record),
produced once.
Each measurement is a child process that starts a consumer in assign mode, then
drains one topic to its end with ``getmany`` (defaults, ``timeout_ms=1000``) or
``async for`` (``--tuned``: with the throughput scenario's aiogroup/tuned
configuration; or, asked for with ``--path getmany-each``, ``getmany`` whose loop runs
``async for``'s loop body once per record: the fair reference for ``async for``, see
``EXTRA_PATHS``); callgrind counts only the drain (the child calls ``os.getsid`` just
before and just after it and callgrind dumps its counts at each call, so imports,
start-up and shutdown fall outside).  Per record is the difference of the two
drains' counts over the difference of their sizes: what every drain pays once (the
first Fetch, connections, the last empty poll) cancels.  aiokafka's ``getmany`` is
measured the same way in the same run as the reference: instructions per record
differ between machines and Python builds, the ratio to aiokafka much less.

``--tree PATH`` (repeatable) runs that checkout's ``aiogroup`` in the child (it is
put first on ``PYTHONPATH`` and the child checks ``aiogroup.__file__``), so commits
can be compared, or bisected, in one run; the broker, the producer and this script
come from the current checkout.  ``--wall REPS`` also times the drains without
valgrind, interleaved tree by tree, ``REPS`` times each, on ``--wall-records``
records, and prints records/s with the spread.

It takes a few minutes: about 20 s of start-up under valgrind per child, six
children per tree plus two for aiokafka.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 8
#: aiogroup's measured ways of reading records (aiokafka's reference is its getmany).
PATHS = ("getmany", "async-for")
#: Measured only when asked for (``--path``).  ``getmany-each``: getmany whose loop runs,
#: for each record, the body ``async for``'s drain runs (``n += 1`` and the stop
#: check).  ``getmany``'s drain adds ``len(records)`` per batch and never visits a
#: record, so against it ``async for`` is also charged that body (the loop's bytecode
#: and a new int for ``n``: about 400 instructions a record), work any application
#: pays per record on either path; against ``getmany-each`` only the way the record
#: is reached differs (a list's ``for`` against an ``async for`` step).
EXTRA_PATHS = ("getmany-each",)
#: The bench row's threshold: aiogroup's getmany may cost at most this many times
#: aiokafka's getmany per record.  Measured (docs/benchmarks.md): da67187's tree
#: 0.59x, 6eb2725's and main's before the fix 0.92x, after it 0.64-0.65x (the
#: delivered-bytes count, now summed in C, still costs about 1,000 instructions a
#: record).  A return of the d3364ad regression crosses it, and so does a new
#: Python-level call per record of about 700 instructions or more (+0.06x); the
#: run-to-run movement (under 1 %) does not.
GETMANY_RATIO_LIMIT = 0.70
#: The same when the native record path is in use (``aiogroup_native`` with
#: ``consumer_records``, issue 29): measured 0.44x (5,437 against aiokafka's 12,435);
#: 0.39x (4,899 against 12,421) with the delivered bytes counted as the records are
#: built (branch ``delivbytes``).
#: A fall-back to the pure path (0.65x) crosses it, and so does a new Python-level
#: call per record (+0.06x); the run-to-run movement (under 1 %) does not.
GETMANY_RATIO_LIMIT_NATIVE = 0.50
#: The same for ``async for`` against aiogroup's own getmany per record (issue 29
#: asks for async for at >= 0.9x getmany's speed: <= 1.11x its cost).
ASYNC_FOR_RATIO_LIMIT = 1.11


def native_record_path() -> bool:
    """Whether ``getmany`` here builds records natively (the children share the environment)."""
    from aiogroup._fetch.native import native_records

    return native_records() is not None


def getmany_ratio_limit() -> float:
    """The getmany threshold for the record path this environment runs."""
    return GETMANY_RATIO_LIMIT_NATIVE if native_record_path() else GETMANY_RATIO_LIMIT


# -- the child: one drain -------------------------------------------------------------------


#: ``--tuned``: the throughput scenario's aiogroup/tuned configuration (and aiokafka's
#: tuned fetch sizes; ``benchmarks/adapters``), handed to the children by environment.
TUNED_ENV = "RECORD_PATH_COST_TUNED"
TUNED_FETCH = {"max_partition_fetch_bytes": 8 * 1024 * 1024, "fetch_max_bytes": 64 * 1024 * 1024}


def _mark() -> None:
    """callgrind dumps its counts here (``--dump-before=getsid``): a segment boundary."""
    os.getsid(0)


async def _drain(client: str, path: str, bootstrap: str, topic: str, records: int) -> None:
    """Drain ``records`` records of ``topic`` from the beginning; print what was read."""
    consumer: Any
    fetch: dict[str, int] = TUNED_FETCH if os.environ.get(TUNED_ENV) == "1" else {}
    if client == "aiogroup":
        import aiogroup
        from aiogroup import GroupConsumer, TopicPartition

        origin = str(Path(aiogroup.__file__).parent.parent)
        consumer = GroupConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **fetch)
    elif client == "aiokafka":
        from aiokafka import AIOKafkaConsumer, TopicPartition  # type: ignore[assignment]

        origin = ""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **fetch,
        )
    else:
        raise ValueError(f"unknown client {client!r}: aiogroup or aiokafka")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        n = 0
        _mark()
        started, cpu0 = time.perf_counter(), time.process_time()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        if path == "getmany":
            while n < records:
                for recs in (await consumer.getmany(timeout_ms=1000)).values():
                    n += len(recs)
        elif path == "getmany-each":
            while n < records:
                for recs in (await consumer.getmany(timeout_ms=1000)).values():
                    for _record in recs:
                        n += 1
                        if n >= records:
                            break
        elif path == "async-for":
            async for _record in consumer:
                n += 1
                if n >= records:
                    break
        else:
            raise ValueError(f"unknown read path {path!r}: getmany, getmany-each or async-for")
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu0
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        _mark()
    finally:
        await consumer.stop()
    # user and system time apart, and page faults: what a codec costs by the clock but
    # not in instructions (page faults, kernel copies) shows there
    usage = {
        "user": ru1.ru_utime - ru0.ru_utime,
        "system": ru1.ru_stime - ru0.ru_stime,
        "minor_faults": ru1.ru_minflt - ru0.ru_minflt,
    }
    print(json.dumps({"records": n, "seconds": seconds, "cpu": cpu, "origin": origin, **usage}))


# -- the parent ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Drain:
    """What one child reported, and the instructions callgrind counted in its drain."""

    records: int
    seconds: float
    cpu: float
    instructions: int | None
    user: float = 0.0
    system: float = 0.0
    minor_faults: int = 0


def _child_env(tree: Path | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = "0"
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH", "")])])
    return env


def run_drain(
    client: str,
    path: str,
    bootstrap: str,
    topic: str,
    records: int,
    tree: Path | None,
    *,
    callgrind: bool,
    keep: Path | None = None,
) -> Drain:
    """One drain in a child process, counted by callgrind when ``callgrind``.

    ``keep``: a directory the drain's callgrind dump is copied to, for
    ``callgrind_annotate`` (where the instructions go, by function).
    """
    args = [sys.executable, str(Path(__file__).resolve()), "_drain"]
    args += [client, path, bootstrap, topic, str(records)]
    with tempfile.TemporaryDirectory(prefix="record-path-cost-") as tmp:
        out = os.path.join(tmp, "cg.out")
        if callgrind:
            args = [
                "valgrind",
                "--tool=callgrind",
                "--dump-before=getsid",
                # every dump names its functions in full: the kept drain's dump is the
                # second part, whose compressed names would point into the first
                "--compress-strings=no",
                f"--callgrind-out-file={out}",
                *args,
            ]
        done = subprocess.run(
            args,
            env=_child_env(tree if client == "aiogroup" else None),
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{client} {path} drain failed ({done.returncode}): {done.stderr[-2000:]}"
            )
        got = json.loads(done.stdout.strip().splitlines()[-1])
        if tree is not None and client == "aiogroup":
            if Path(got["origin"]).resolve() != tree.resolve():
                raise RuntimeError(f"the child imported aiogroup from {got['origin']}, not {tree}")
        instructions = _segment_total(out + ".2") if callgrind else None
        if callgrind and keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            name = f"{client}-{path}-{records}-{Path(tree).name if tree else 'ref'}.callgrind"
            shutil.copyfile(out + ".2", keep / name)
    return Drain(
        got["records"],
        got["seconds"],
        got["cpu"],
        instructions,
        got.get("user", 0.0),
        got.get("system", 0.0),
        got.get("minor_faults", 0),
    )


def _segment_total(dump: str) -> int:
    """The instructions of one callgrind dump (its ``totals:`` line)."""
    with open(dump) as f:
        for line in f:
            if line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError(f"no totals line in {dump}")


@dataclass(frozen=True)
class Cost:
    """Instructions per record of one read path, from a small and a large drain."""

    small: Drain
    large: Drain

    @property
    def per_record(self) -> float:
        assert self.small.instructions is not None and self.large.instructions is not None
        return (self.large.instructions - self.small.instructions) / (
            self.large.records - self.small.records
        )


def measure_costs(
    bootstrap: str,
    topics: dict[int, str],
    trees: list[Path],
    paths: tuple[str, ...] = PATHS,
    log: Any = print,
    keep: Path | None = None,
) -> tuple[dict[str, dict[str, Cost]], Cost]:
    """Every tree's aiogroup paths and aiokafka's getmany, counted by callgrind."""
    small, large = sorted(topics)
    costs: dict[str, dict[str, Cost]] = {}
    for tree in trees:
        name = str(tree)
        for path in paths:
            drains = [
                run_drain(
                    "aiogroup", path, bootstrap, topics[n], n, tree, callgrind=True, keep=keep
                )
                for n in (small, large)
            ]
            costs.setdefault(name, {})[path] = cost = Cost(*drains)
            log(f"  {name}: aiogroup {path}: {cost.per_record:,.0f} instructions/record")
    drains = [
        run_drain("aiokafka", "getmany", bootstrap, topics[n], n, None, callgrind=True, keep=keep)
        for n in (small, large)
    ]
    reference = Cost(*drains)
    log(f"  aiokafka getmany: {reference.per_record:,.0f} instructions/record")
    return costs, reference


def measure_wall(
    bootstrap: str,
    topic: str,
    records: int,
    trees: list[Path],
    reps: int,
    paths: tuple[str, ...] = PATHS,
) -> dict[str, list[Drain]]:
    """Each tree's paths and aiokafka's getmany timed, interleaved ``reps`` times."""
    rates: dict[str, list[Drain]] = {}
    for _ in range(reps):
        for tree in trees:
            for path in paths:
                d = run_drain("aiogroup", path, bootstrap, topic, records, tree, callgrind=False)
                rates.setdefault(f"{tree} {path}", []).append(d)
        d = run_drain("aiokafka", "getmany", bootstrap, topic, records, None, callgrind=False)
        rates.setdefault("aiokafka getmany", []).append(d)
    return rates


def produce_topics(
    broker: Any, sizes: list[int], log: Any = print, payload: str = "100B"
) -> dict[int, str]:
    """One topic of ``payload`` records per size, 8 partitions, produced with librdkafka."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.data import PAYLOADS, produce

    topics: dict[int, str] = {}
    for n in sorted(set(sizes)):
        topic = broker.create_topic(partitions=PARTITIONS)
        produce(broker.bootstrap_servers, topic, PAYLOADS[payload], n, PARTITIONS)
        topics[n] = topic
        log(f"produced {n:,} records to {topic}")
    return topics


def summary(costs: dict[str, dict[str, Cost]], reference: Cost) -> list[str]:
    ref = reference.per_record
    lines = [f"{'tree':50s} {'path':10s} {'instr/record':>13s} {'x aiokafka':>10s}"]
    for name, paths in costs.items():
        for path, cost in paths.items():
            lines.append(
                f"{name:50s} {path:10s} {cost.per_record:13,.0f} {cost.per_record / ref:10.2f}"
            )
    lines.append(f"{'aiokafka':50s} {'getmany':10s} {ref:13,.0f} {1:10.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_drain"]:
        client, path, bootstrap, topic, records = argv[1:6]
        asyncio.run(_drain(client, path, bootstrap, topic, int(records)))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.record_path_cost", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--tree",
        type=Path,
        action="append",
        help="a checkout whose aiogroup the child runs (repeatable; default: this one)",
    )
    parser.add_argument(
        "--path",
        action="append",
        choices=PATHS + EXTRA_PATHS,
        help="aiogroup's read path to measure (repeatable; default: getmany and async-for; "
        "getmany-each: getmany with async for's loop body run per record)",
    )
    parser.add_argument(
        "--payload",
        default="100B",
        choices=("100B", "1KiB", "100B-lz4", "100B-zstd"),
        help="the records' values: 100 B (the guard's), 1 KiB (what costs per byte), or "
        "100 B in lz4 / zstd batches (what a codec costs per record)",
    )
    parser.add_argument(
        "--tuned",
        action="store_true",
        help="the throughput scenario's tuned configuration: 8 MiB partition fetches, "
        "64 MiB responses, AIOGROUP_MALLOC_TUNE=1 (default: library defaults)",
    )
    parser.add_argument("--small", type=int, default=20_000, help="records of the small drain")
    parser.add_argument("--large", type=int, default=100_000, help="records of the large drain")
    parser.add_argument(
        "--wall", type=int, default=0, help="also time REPS interleaved drains without valgrind"
    )
    parser.add_argument("--wall-records", type=int, default=500_000)
    parser.add_argument("--no-callgrind", action="store_true", help="only the --wall timing")
    parser.add_argument("--json", type=Path, help="write the numbers here too")
    parser.add_argument(
        "--keep",
        type=Path,
        help="copy each drain's callgrind dump here (read it with callgrind_annotate)",
    )
    args = parser.parse_args(argv)
    if not 0 < args.small < args.large:
        parser.error(f"need 0 < --small < --large, got {args.small} and {args.large}")
    trees: list[Path] = [t.resolve() for t in args.tree] if args.tree else [ROOT]
    for tree in trees:
        if not (tree / "aiogroup" / "__init__.py").is_file():
            parser.error(f"--tree {tree}: no aiogroup/__init__.py there")

    paths = tuple(args.path or PATHS)
    if args.tuned:
        # the children inherit this process's environment (_child_env)
        os.environ[TUNED_ENV] = "1"
        os.environ["AIOGROUP_MALLOC_TUNE"] = "1"
    from aiogroup.testing import SyncKafkaBroker

    result: dict[str, Any] = {
        "load_before": os.getloadavg(),
        "payload": args.payload,
        "tuned": args.tuned,
    }
    with SyncKafkaBroker() as broker:
        sizes = [args.small, args.large] if not args.no_callgrind else []
        if args.wall:
            sizes.append(args.wall_records)
        topics = produce_topics(broker, sizes, payload=args.payload)
        if not args.no_callgrind:
            costs, reference = measure_costs(
                broker.bootstrap_servers,
                {n: topics[n] for n in (args.small, args.large)},
                trees,
                paths,
                keep=args.keep,
            )
            print("\n".join(summary(costs, reference)))
            result["instructions_per_record"] = {
                name: {path: c.per_record for path, c in paths.items()}
                for name, paths in costs.items()
            }
            result["aiokafka_getmany"] = reference.per_record
        if args.wall:
            rates = measure_wall(
                broker.bootstrap_servers,
                topics[args.wall_records],
                args.wall_records,
                trees,
                args.wall,
                paths,
            )
            print(
                f"\n{args.wall} interleaved repetitions, median (min-max): "
                "records/s, and CPU seconds per million records"
            )
            for name, drains in rates.items():
                rate = [d.records / d.seconds for d in drains]
                cpu = [d.cpu / d.records * 1e6 for d in drains]
                user = statistics.median(d.user / d.records * 1e6 for d in drains)
                system = statistics.median(d.system / d.records * 1e6 for d in drains)
                faults = statistics.median(d.minor_faults / d.records for d in drains)
                print(
                    f"  {name:45s} {statistics.median(rate):9,.0f} "
                    f"({min(rate):,.0f}-{max(rate):,.0f})  {statistics.median(cpu):5.2f} "
                    f"({min(cpu):.2f}-{max(cpu):.2f})  user {user:.2f} system {system:.2f} "
                    f"faults/record {faults:.3f}"
                )
            result["wall"] = {
                name: [
                    {
                        "records": d.records,
                        "seconds": d.seconds,
                        "cpu": d.cpu,
                        "user": d.user,
                        "system": d.system,
                        "minor_faults": d.minor_faults,
                    }
                    for d in drains
                ]
                for name, drains in rates.items()
            }
    result["load_after"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
