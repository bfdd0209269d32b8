"""``python -m benchmarks.share_answers``: what each tree's ShareFetches brought back (issue 28).

Why: the drain benchmark (:mod:`benchmarks.share_drain`) gives records/s, which on two
shared cores moves by up to 2-3x between rounds; a change to when fetches leave (reading
ahead) shows first in the answers: how many, how many empty or short of
``max_poll_records`` (other consumers holding the partitions up to the broker's lock
limit), and how many bytes.  On one Apache Kafka 4.4 node started here, one topic of 2
partitions with ``--records`` records of 100 B; for each ``--tree`` in turn (the order
reversed every other round) a child process drains it with that tree's ``aiogroup``
(``--consumers`` share consumers, batch-optimized acquisition, ``max_poll_records`` 500,
the drain benchmark's :func:`aiogroup_share_rate`), ``parse_share_fetch`` wrapped to count
the answers.  One JSON line per drain.
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
from aiogroup.testing.share_peers import configure_share_group
from benchmarks.share_baseline import _produce
from benchmarks.share_consumer import aiogroup_share_rate
from benchmarks.share_record_cost import extra_path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import asyncio, json, sys
import aiogroup
import aiogroup._fetch.share_fetcher as fetcher
from benchmarks.share_consumer import aiogroup_share_rate
parse = fetcher.parse_share_fetch
seen = {"answers": 0, "empty": 0, "short": 0, "acquired": 0, "bytes": 0}
def counting(resp):
    result = parse(resp)
    n = sum(a.last_offset - a.first_offset + 1 for p in result.partitions for a in p.acquired)
    seen["answers"] += 1
    seen["acquired"] += n
    seen["bytes"] += sum(len(p.records or b"") for p in result.partitions)
    if n == 0:
        seen["empty"] += 1
    elif n < 500:
        seen["short"] += 1
    return result
fetcher.parse_share_fetch = counting
bootstrap, topic, group, records, consumers = sys.argv[1:6]
result, first = asyncio.run(aiogroup_share_rate(bootstrap, topic, group, int(records),
    consumers=int(consumers), max_poll_records=500, acquire_mode="batch_optimized"))
print(json.dumps({"origin": aiogroup.__file__,
    "drain_per_s": round(int(records) / (result.seconds - first)), **seen}))
"""


def _child(
    tree: Path, bootstrap: str, topic: str, group: str, records: int, n: int
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as only:
        # The tree's aiogroup alone first on the path: the benchmarks stay this checkout's.
        (Path(only) / "aiogroup").symlink_to(tree / "aiogroup")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([only, str(ROOT), *extra_path()]))
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, bootstrap, topic, group, str(records), str(n)],
            env=env,
            cwd=only,
            capture_output=True,
            text=True,
            timeout=360,
            check=True,
        ).stdout
        got: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        # Checked while the child's path still resolves through the link to the tree.
        if not Path(got["origin"]).resolve().is_relative_to((tree / "aiogroup").resolve()):
            raise RuntimeError(f"the child imported aiogroup from {got['origin']}, not {tree}")
    return got


async def _run(records: int, consumers: int, rounds: int, trees: list[Path]) -> None:
    cluster = await KafkaCluster().start()
    try:
        bootstrap = cluster.bootstrap_servers
        topic = await cluster.create_topic(unique_name("share-answers"), 2)
        await _produce(bootstrap, topic, records, 2)
        warm = unique_name("warm")  # untimed: the broker's first share group
        await configure_share_group(bootstrap, warm)
        await aiogroup_share_rate(bootstrap, topic, warm, min(records, 1_000))
        for round_ in range(rounds):
            for tree in trees if round_ % 2 == 0 else trees[::-1]:
                group = unique_name("answers")
                await configure_share_group(bootstrap, group)
                got = await asyncio.to_thread(
                    _child, tree, bootstrap, topic, group, records, consumers
                )
                got |= {"tree": str(tree), "round": round_, "load": round(os.getloadavg()[0], 1)}
                del got["origin"]
                print(json.dumps(got), flush=True)
    finally:
        await cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.share_answers")
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--consumers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tree", type=Path, action="append", required=True)
    args = parser.parse_args()
    asyncio.run(_run(args.records, args.consumers, args.rounds, args.tree))


if __name__ == "__main__":
    main()
