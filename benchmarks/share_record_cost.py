"""A share consumer's cost per record, in instructions: load does not move it (issue 28).

``python -m benchmarks.share_record_cost [--tree PATH ...] [--keep DIR]``

The drain benchmark (:mod:`benchmarks.share_drain`) measures records/s, which on two
shared cores moves by tens of percent with whatever else runs.  This counts what one
share consumer executes per record with valgrind's callgrind, as
:mod:`benchmarks.record_path_cost` does for the classic path: one Apache Kafka 4.4 node
started here, two topics of 2 partitions holding ``--small`` and ``--large`` records of
100 B; each measurement is a child process whose one ``ShareConsumer`` (batch-optimized
acquisition, ``max_poll_records`` 500, implicit acknowledgement, a fresh share group)
drains one topic with ``getmany``.  Callgrind counts from the first records handed out
to the last (the child calls ``os.getsid`` at both and callgrind dumps its counts at
each call: the join and the close fall outside); per record is the difference of the
two drains' counts over the difference of the records they counted, so what every
drain pays once cancels.

``--acquire-mode record_limit``: the child acquires with the strict limit instead.

``--tree PATH`` (repeatable) runs that checkout's ``aiogroup`` in the child (its
``aiogroup`` alone is put first on the path; the child checks ``aiogroup.__file__``),
so commits can be compared in one run.  ``--keep DIR`` keeps the large drains'
callgrind dumps for ``callgrind_annotate``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def extra_path() -> list[str]:
    """This process's PYTHONPATH entries that hold no ``aiogroup`` of their own - a
    private ``aiogroup_native`` build (``pip install --target DIR ./native``) reaches
    the children too; a checkout's ``aiogroup`` on it would shadow the tree's."""
    return [
        p
        for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
        if p and not (Path(p) / "aiogroup").exists()
    ]


PARTITIONS = 2


def _mark() -> None:
    os.getsid(0)  # callgrind --dump-before=getsid: a segment boundary


async def _child(
    bootstrap: str, topic: str, group: str, records: int, acquire_mode: str = "batch_optimized"
) -> None:
    import aiogroup
    from aiogroup import ShareConsumer

    consumer = ShareConsumer(
        topic,
        group_id=group,
        bootstrap_servers=bootstrap,
        max_poll_records=500,
        acquire_mode=acquire_mode,
    )
    await consumer.start()
    try:
        got = counted = 0
        cpu0 = time.process_time()
        while got < records:
            batch = await consumer.getmany(timeout_ms=1000)
            n = sum(len(rs) for rs in batch.values())
            if n and not got:
                _mark()  # from the first records handed out
                cpu0 = time.process_time()
            elif got:
                counted += n
            got += n
        _mark()
        cpu = time.process_time() - cpu0
    finally:
        await consumer.stop(timeout=10)
    try:
        import aiogroup_native

        has = hasattr(aiogroup_native, "share_records")
        native = f"{aiogroup_native.__file__} (share_records: {has})"
    except ImportError:
        native = "none"
    print(
        json.dumps({"counted": counted, "cpu": cpu, "origin": aiogroup.__file__, "native": native})
    )


def _drain(
    tree: Path,
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    keep: Path | None,
    label: str,
    acquire_mode: str = "batch_optimized",
) -> tuple[int, int]:
    """(records counted, instructions) of one drain by ``tree``'s aiogroup under callgrind."""
    with tempfile.TemporaryDirectory(prefix="share-record-cost-") as tmp:
        (Path(tmp) / "aiogroup").symlink_to(tree / "aiogroup")
        out = os.path.join(tmp, "cg.out")
        env = dict(os.environ, PYTHONHASHSEED="0")
        env["PYTHONPATH"] = os.pathsep.join([tmp, str(ROOT), *extra_path()])
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--dump-before=getsid",
                f"--callgrind-out-file={out}",
                sys.executable,
                "-m",
                "benchmarks.share_record_cost",
                "_drain",
                bootstrap,
                topic,
                group,
                str(records),
                acquire_mode,
            ],
            env=env,
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"drain failed ({done.returncode}): {done.stderr[-2000:]}")
        got = json.loads(done.stdout.strip().splitlines()[-1])
        if not Path(got["origin"]).resolve().is_relative_to((tree / "aiogroup").resolve()):
            raise RuntimeError(f"the child imported aiogroup from {got['origin']}, not {tree}")
        dump = out + ".2"
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(dump, keep / f"share-{label}-{records}.callgrind")
        with open(dump) as f:
            total = next(int(line.split()[1]) for line in f if line.startswith("totals:"))
    print(f"  {tree} ({records} records): aiogroup_native {got['native']}", flush=True)
    return int(got["counted"]), total


async def _run(
    trees: list[Path],
    small: int,
    large: int,
    keep: Path | None,
    acquire_mode: str = "batch_optimized",
) -> None:
    from aiogroup.testing.broker import unique_name
    from aiogroup.testing.kafka import KafkaCluster
    from aiogroup.testing.share_peers import configure_share_group
    from benchmarks.share_baseline import _produce
    from benchmarks.share_consumer import aiogroup_share_rate

    cluster = await KafkaCluster().start()
    try:
        bootstrap = cluster.bootstrap_servers
        topics = {}
        for n in (small, large):
            topic = await cluster.create_topic(unique_name("share-cost"), PARTITIONS)
            await _produce(bootstrap, topic, n, PARTITIONS)
            warm = unique_name("warm")  # the topic's first share group sets its state up
            await configure_share_group(bootstrap, warm)
            await aiogroup_share_rate(bootstrap, topic, warm, min(n, 1_000))
            topics[n] = topic
        for i, tree in enumerate(trees):
            counts = []
            for n in (small, large):
                group = unique_name("share-cost")
                await configure_share_group(bootstrap, group)
                counts.append(
                    await asyncio.to_thread(
                        _drain, tree, bootstrap, topics[n], group, n, keep, str(i), acquire_mode
                    )
                )
            (n0, i0), (n1, i1) = counts
            print(
                f"{tree}: {(i1 - i0) / (n1 - n0):,.0f} instructions a record "
                f"(drains: {n0} records {i0:,}, {n1} records {i1:,})",
                flush=True,
            )
    finally:
        await cluster.stop()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_drain":
        bootstrap, topic, group, records, mode = sys.argv[2:7]
        asyncio.run(_child(bootstrap, topic, group, int(records), mode))
        return
    parser = argparse.ArgumentParser(prog="python -m benchmarks.share_record_cost")
    parser.add_argument("--tree", type=Path, action="append")
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--keep", type=Path)
    parser.add_argument(
        "--acquire-mode", choices=["batch_optimized", "record_limit"], default="batch_optimized"
    )
    args = parser.parse_args()
    trees = [t.resolve() for t in args.tree] if args.tree else [ROOT]
    for tree in trees:
        if not (tree / "aiogroup" / "__init__.py").is_file():
            parser.error(f"--tree {tree}: no aiogroup/__init__.py there")
    asyncio.run(_run(trees, args.small, args.large, args.keep, args.acquire_mode))


if __name__ == "__main__":
    main()
