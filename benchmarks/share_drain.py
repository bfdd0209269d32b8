"""``python -m benchmarks.share_drain``: a share consumer's drain rate after its join (issue 28).

Why: :mod:`benchmarks.share_consumer` measures as Java's perf tool does - from the
consumers' creation to the last record - and with its 200,000 records about half of
that is the join (the broker's ``group.share.assignment.interval.ms``, ~1 s, paid alike
by every client): the ranking then follows the noise of a sub-second drain.  This
splits the two on a larger backlog: seconds to the first record, then records/s from
the first record to the last.

``--acquire-mode record_limit`` drains aiogroup with strict record-limit acquisition
(KIP-1206) instead; confluent-kafka stays batch-optimized (all its ShareFetch v1 has).

Both clients with the same ``max_poll_records`` (librdkafka sends it as the ShareFetch's
MaxRecords and BatchSize, as aiogroup does), batch-optimized acquisition, implicit
acknowledgement, each in a fresh share group reading the same backlog on one Apache
Kafka 4.4 node started here; aiogroup's consumers on this process's one event loop,
confluent-kafka's in one thread each.  Rounds alternate the clients.

``--tree PATH`` (repeatable) A/B-tests aiogroup checkouts in the same broker run: each
tree's consumers run in a child process that imports that tree's ``aiogroup`` (and this
checkout's ``benchmarks``), measured by the same :func:`aiogroup_share_rate`; in each
round and consumer count the clients - confluent-kafka and every tree - take their turn
in a rotated order.  Without it, aiogroup runs in this process, as before.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from aiogroup.testing.broker import unique_name
from aiogroup.testing.kafka import KafkaCluster
from aiogroup.testing.share_peers import configure_share_group, confluent_share_rate
from benchmarks.share_baseline import _produce
from benchmarks.share_consumer import aiogroup_share_rate
from benchmarks.share_record_cost import extra_path

ROOT = Path(__file__).resolve().parent.parent


#: The child that drains with one tree's aiogroup: prints where aiogroup came from and
#: the measurement (seconds from the consumers' creation to the last record, and to the
#: first).
_CHILD = """
import asyncio, json, sys
import aiogroup
from benchmarks.share_consumer import aiogroup_share_rate
bootstrap, topic, group, records, consumers, max_poll_records, mode = sys.argv[1:8]
stats = {}
result, first = asyncio.run(aiogroup_share_rate(bootstrap, topic, group, int(records),
    consumers=int(consumers), max_poll_records=int(max_poll_records),
    acquire_mode=mode, stats=stats))
print(json.dumps({"origin": aiogroup.__file__, "seconds": result.seconds, "first": first,
    "cpu": stats.get("cpu_s", float("nan"))}))
"""


def _tree_drain(
    tree: Path,
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    consumers: int,
    max_poll_records: int,
    acquire_mode: str = "batch_optimized",
) -> tuple[float, float, float]:
    """One drain by ``tree``'s aiogroup in a child process: (seconds, first record's,
    the child's CPU seconds from its first record to its last)."""
    with tempfile.TemporaryDirectory() as only:
        # The tree's aiogroup alone first on the path: the benchmarks stay this checkout's.
        (Path(only) / "aiogroup").symlink_to(tree / "aiogroup")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([only, str(ROOT), *extra_path()]))
        args = [
            bootstrap,
            topic,
            group,
            str(records),
            str(consumers),
            str(max_poll_records),
            acquire_mode,
        ]
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, *args],
            env=env,
            cwd=only,  # ``-c`` puts the working directory first on the path
            capture_output=True,
            text=True,
            timeout=360,
            check=True,
        ).stdout
        got = json.loads(out.strip().splitlines()[-1])
        if not Path(got["origin"]).resolve().is_relative_to((tree / "aiogroup").resolve()):
            raise RuntimeError(f"the child imported aiogroup from {got['origin']}, not {tree}")
    return float(got["seconds"]), float(got["first"]), float(got["cpu"])


async def _run(
    records: int,
    partitions: int,
    consumers: list[int],
    rounds: int,
    max_poll_records: int,
    trees: list[Path] | None = None,
    warm_records: int = 1_000,
    acquire_mode: str = "batch_optimized",
) -> list[dict[str, Any]]:
    cluster = await KafkaCluster().start()
    rows: list[dict[str, Any]] = []
    try:
        bootstrap = cluster.bootstrap_servers
        topic = await cluster.create_topic(unique_name("share-drain"), partitions)
        await _produce(bootstrap, topic, records, partitions)
        # Untimed: the broker's first share group loads its coordinators.  A longer
        # warm-up (``--warm``) also warms the broker's share fetch path (its JIT): the
        # first drains after the start are the slowest whoever runs them, and in round
        # 0 an aiogroup tree always runs first (issue 28).
        warm = unique_name("warm")
        await configure_share_group(bootstrap, warm)
        await aiogroup_share_rate(bootstrap, topic, warm, min(records, warm_records))
        for round_ in range(rounds):
            for n in consumers:
                clients = ["confluent", *(str(t) for t in trees or ["aiogroup"])]
                shift = round_ % len(clients)
                # Rotated each round (two clients: alternated, aiogroup first in round 0).
                order = (clients[shift:] + clients[:shift])[::-1]
                for client in order:
                    group = unique_name(f"drain-{client}")
                    await configure_share_group(bootstrap, group)
                    if client == "confluent":
                        result = await asyncio.to_thread(
                            confluent_share_rate,
                            bootstrap,
                            topic,
                            group,
                            records,
                            consumers=n,
                            max_poll_records=max_poll_records,
                            timeout_s=300.0,
                        )
                        total, first = result.seconds, result.first_seconds or float("nan")
                        cpu = float("nan")  # librdkafka's threads share this process
                    elif trees:
                        total, first, cpu = await asyncio.to_thread(
                            _tree_drain,
                            Path(client),
                            bootstrap,
                            topic,
                            group,
                            records,
                            n,
                            max_poll_records,
                            acquire_mode,
                        )
                    else:
                        stats: dict[str, float] = {}
                        result, first = await aiogroup_share_rate(
                            bootstrap,
                            topic,
                            group,
                            records,
                            consumers=n,
                            max_poll_records=max_poll_records,
                            acquire_mode=acquire_mode,
                            stats=stats,
                        )
                        total = result.seconds
                        # This process also runs the harness: an upper bound.
                        cpu = stats.get("cpu_s", float("nan"))
                    row = {
                        "client": client,
                        "consumers": n,
                        "round": round_,
                        "first_s": round(first, 3),
                        "drain_per_s": round(records / (total - first)),
                        # Client CPU seconds over wall seconds, first record to last.
                        "cpu_per_wall": round(cpu / (total - first), 2),
                        "load": round(os.getloadavg()[0], 1),
                    }
                    rows.append(row)
                    print(row, flush=True)
    finally:
        await cluster.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.share_drain")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--consumers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-poll-records", type=int, default=500)
    parser.add_argument(
        "--warm",
        type=int,
        default=1_000,
        help="records of the untimed warm-up drain before round 0 (at most --records)",
    )
    parser.add_argument(
        "--acquire-mode",
        choices=["batch_optimized", "record_limit"],
        default="batch_optimized",
        help="aiogroup's acquire_mode (confluent-kafka's ShareFetch v1 has batch-optimized "
        "acquisition only: with record_limit the ratio compares different broker work)",
    )
    parser.add_argument(
        "--tree",
        type=Path,
        action="append",
        help="an aiogroup checkout to measure in a child process (repeatable: A/B)",
    )
    args = parser.parse_args()
    trees = [t.resolve() for t in args.tree] if args.tree else None
    for tree in trees or []:
        if not (tree / "aiogroup" / "__init__.py").is_file():
            parser.error(f"--tree {tree}: no aiogroup/__init__.py there")
    rows = asyncio.run(
        _run(
            args.records,
            args.partitions,
            args.consumers,
            args.rounds,
            args.max_poll_records,
            trees,
            args.warm,
            args.acquire_mode,
        )
    )
    for n in args.consumers:
        theirs = [
            r["drain_per_s"] for r in rows if r["client"] == "confluent" and r["consumers"] == n
        ]
        for client in [str(t) for t in trees or ["aiogroup"]]:
            ours = [r["drain_per_s"] for r in rows if r["client"] == client and r["consumers"] == n]
            ratios = " / ".join(f"{a / b:.2f}" for a, b in zip(ours, theirs, strict=True))
            print(
                f"{n} consumer(s), max_poll_records {args.max_poll_records}: {client} "
                f"{ours} confluent-kafka {theirs} records/s after the first record, per "
                f"round; ratio per round {ratios}"
            )


if __name__ == "__main__":
    main()
