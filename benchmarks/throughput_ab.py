"""One payload of the throughput scenario, checkouts against each other and the peers.

``python -m benchmarks.throughput_ab [--payload 1KiB] [--tree PATH ...] [--reps 3]``

``python -m benchmarks --scenario throughput`` runs every payload and client and
rewrites docs/benchmarks.md; comparing a branch with main on one payload needs less
and must not touch the page.  This runs the scenario's own worker task
(``benchmarks.worker``, one process per drain, the same records/s and CPU seconds)
for aiogroup's tuned configuration from each ``--tree`` (run from the tree, whose
``aiogroup`` and ``benchmarks.worker`` it then imports; checked) and
confluent-kafka's two tuned configurations, interleaved repetition by repetition so
that the machine's load falls on all of them alike, and prints medians with
(min-max) and the load average.  Nothing is written unless ``--json``.

``--variant V`` (repeatable) runs those aiogroup variants of each tree instead of
``tuned`` alone, ``--peer CLIENT/VARIANT`` (repeatable) those peers instead of the
two tuned ones: e.g. ``--variant tuned --variant tuned-nocrc --peer confluent/tuned
--peer confluent/tuned-crc`` compares the CRC-32C check like against like.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 8
#: The peers, as the throughput scenario names them: (client, variant).
PEERS = (("confluent", "tuned"), ("confluent-aio", "tuned"))


def _env(tree: Path | None, extra: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    paths = [str(tree)] if tree is not None else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    return env


def _origin(tree: Path) -> str:
    code = "import aiogroup, pathlib; print(pathlib.Path(aiogroup.__file__).parent.parent)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(tree, {}),
        capture_output=True,
        text=True,
        check=True,
        cwd=str(tree),
    )
    return out.stdout.strip()


def run_one(spec: dict[str, Any], tree: Path | None) -> dict[str, Any]:
    """One drain in the scenario's worker; the result line it printed."""
    from benchmarks.harness import _variant_env
    from benchmarks.worker import RESULT_PREFIX

    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.worker", json.dumps(spec)],
        env=_env(tree, _variant_env(spec)),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        # The working directory comes first on sys.path: the tree's aiogroup (and its
        # copy of the worker, which the trees compared here share).
        cwd=str(tree or ROOT),
    )
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            result: dict[str, Any] = json.loads(line[len(RESULT_PREFIX) :])
            return result
    return {"ok": False, "error": done.stderr[-1500:]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.throughput_ab", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--payload", default="1KiB", help="a payload of benchmarks.data")
    parser.add_argument("--records", type=int, default=250_000)
    parser.add_argument("--tree", type=Path, action="append", help="a checkout (repeatable)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-peers", action="store_true", help="aiogroup trees only")
    parser.add_argument(
        "--variant", action="append", help="aiogroup variant(s) per tree (default: tuned)"
    )
    parser.add_argument(
        "--peer", action="append", help="peer CLIENT/VARIANT (repeatable; default: the tuned two)"
    )
    parser.add_argument("--json", type=Path, help="write the raw results here")
    args = parser.parse_args(argv)
    trees = [t.resolve() for t in args.tree] if args.tree else [ROOT]
    for tree in trees:
        if Path(_origin(tree)).resolve() != tree:
            parser.error(f"--tree {tree}: the worker would import aiogroup from elsewhere")

    sys.path.insert(0, str(ROOT))
    from aiogroup.testing import SyncKafkaBroker
    from benchmarks import adapters
    from benchmarks.data import PAYLOADS, produce

    ours = args.variant or ["tuned"]
    peers = [tuple(p.split("/", 1)) for p in args.peer] if args.peer else list(PEERS)
    for v in ours:
        if v not in adapters.variants("aiogroup"):
            parser.error(f"--variant {v}: aiogroup has no such variant")
    for p in peers:
        if len(p) != 2 or p[0] not in adapters.CLIENTS or p[1] not in adapters.variants(p[0]):
            parser.error(f"--peer {'/'.join(p)}: no such client/variant")
    configs: list[tuple[str, str, str, Path | None]] = [
        (f"aiogroup/{v} {tree}", "aiogroup", v, tree) for tree in trees for v in ours
    ]
    if not args.no_peers:
        configs += [(f"{c}/{v}", c, v, None) for c, v in peers]
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, *_ in configs}
    load = {"before": os.getloadavg()}
    with SyncKafkaBroker() as broker:
        topic = broker.create_topic(partitions=PARTITIONS)
        produce(broker.bootstrap_servers, topic, PAYLOADS[args.payload], args.records, PARTITIONS)
        print(f"produced {args.records:,} x {args.payload} to {topic}", flush=True)
        for rep in range(args.reps):
            for name, client, variant, tree in configs:
                spec = {
                    "task": "throughput",
                    "bootstrap": broker.bootstrap_servers,
                    "client": client,
                    "variant": variant,
                    "topic": topic,
                    "partitions": PARTITIONS,
                    "records": args.records,
                    "timeout": 180,
                }
                got = run_one(spec, tree)
                results[name].append(got)
                if got.get("ok"):
                    rate = got["records"] / got["seconds"]
                    print(f"  rep {rep}: {name}: {rate:,.0f} records/s, CPU {got['cpu_s']:.2f} s")
                else:
                    print(f"  rep {rep}: {name}: failed: {got.get('error')}")
    load["after"] = os.getloadavg()
    print(
        f"\n{args.payload}, {args.records:,} records, {args.reps} interleaved repetitions; "
        f"load average (1, 5, 15 min) {load['before']} before, {load['after']} after"
    )
    print("median (min-max): records/s; CPU seconds per drain")
    for name, runs in results.items():
        ok = [r for r in runs if r.get("ok")]
        if not ok:
            print(f"  {name:60s} no successful run")
            continue
        rate = [r["records"] / r["seconds"] for r in ok]
        cpu = [r["cpu_s"] for r in ok]
        print(
            f"  {name:60s} {statistics.median(rate):10,.0f} ({min(rate):,.0f}-{max(rate):,.0f})"
            f"  {statistics.median(cpu):5.2f} ({min(cpu):.2f}-{max(cpu):.2f})"
        )
    if args.json:
        args.json.write_text(json.dumps({"load": load, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
