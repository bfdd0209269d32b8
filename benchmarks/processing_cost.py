"""The processor's own cost per record, in instructions, against bare asyncio tasks.

``python -m benchmarks.processing_cost [--tree PATH ...] [--records N] [--concurrency N]``

Issue 25's processing benchmark times the processor on a broker, where the machine's
load moves the rates by tens of percent and the consumer's decoding of the records
comes on top.  This counts what the processor itself adds: the real ``Processor`` is
fed from a list by a consumer whose ``getmany`` hands out prepared records (no
broker, no group, no decoding), with the benchmark's handler (``await
asyncio.sleep(0.005)``), 16 partitions and 10,000 keys; and the same handler is run
by N bare asyncio tasks on the same records (the ceiling row of the benchmark).
valgrind's callgrind counts the instructions between two marks around the
processing (``os.getsid``, as in :mod:`benchmarks.record_path_cost`), so start-up
and shutdown fall outside and the load does not move the count.  Nothing here is
timed against a clock: under callgrind the 5 ms timers are always due, and the loop
runs CPU-bound, which is the regime the processor is in at concurrency 1000.

``--tree PATH`` (repeatable) runs that checkout's ``aiogroup`` in the child, so two
commits are compared in one run.  Measured (docs/benchmarks.md, processing section):
bare tasks 52,600 instructions a record, the processor at c156dc4 94,000, at b479e21
77,500, at 5b915eb 75,400 and at da70cc7 73,700 (c1000, 20,000 records).
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 16
KEYS = 10_000
HANDLER_S = 0.005


def _mark() -> None:
    """callgrind dumps its counts here (``--dump-before=getsid``): a segment boundary."""
    os.getsid(0)


def _records(count: int) -> dict[Any, list[Any]]:
    from aiogroup.structs import ConsumerRecord, TopicPartition

    out: dict[Any, list[Any]] = {TopicPartition("t", p): [] for p in range(PARTITIONS)}
    tps = list(out)
    for i in range(count):
        tp = tps[i % PARTITIONS]
        key = f"k{i % KEYS}".encode()
        out[tp].append(
            ConsumerRecord(
                tp.topic, tp.partition, len(out[tp]), 0, 0, key, b"x" * 100, None, 6, 100, ()
            )
        )
    return out


async def _child(mode: str, concurrency: int, count: int) -> dict[str, Any]:
    import aiogroup
    from aiogroup import GroupConsumer, Processor

    origin = str(Path(aiogroup.__file__).parent)

    records = _records(count)
    done = asyncio.Event()
    finished = 0

    async def handler(record: Any) -> None:
        nonlocal finished
        await asyncio.sleep(HANDLER_S)
        finished += 1
        if finished == count:
            done.set()

    if mode == "ceiling":
        flat = iter([r for rs in records.values() for r in rs])

        async def worker() -> None:
            for record in flat:  # the shared iterator: the next record when one ends
                await handler(record)

        _mark()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        _mark()
        return {"finished": finished, "origin": origin}

    class ListConsumer(GroupConsumer):
        """``getmany`` hands out the prepared records; commits go nowhere."""

        def __init__(self) -> None:
            super().__init__(group_id="cost", enable_auto_commit=False)
            self.read = {tp: 0 for tp in records}
            self.stopped: set[Any] = set()

        def _require_started(self) -> Any:
            return None

        def assignment(self) -> set[Any]:
            return set(records)

        async def _fetch_committed(self, partitions: Any) -> dict[Any, Any]:
            return {}

        async def commit(self, offsets: Any = None) -> None:
            return None

        @property
        def _lifecycle_started(self) -> bool:
            return False

        def pause(self, *partitions: Any) -> None:
            self.stopped.update(partitions)

        def resume(self, *partitions: Any) -> None:
            self.stopped.difference_update(partitions)

        async def getmany(  # type: ignore[override]
            self, *partitions: Any, timeout_ms: int = 0, max_records: int | None = None
        ) -> dict[Any, list[Any]]:
            out: dict[Any, list[Any]] = {}
            left = max_records or 500
            for tp, rs in records.items():
                if left <= 0:
                    break
                if tp in self.stopped:
                    continue
                chunk = rs[self.read[tp] : self.read[tp] + min(left, 16)]
                if chunk:
                    out[tp] = chunk
                    self.read[tp] += len(chunk)
                    left -= len(chunk)
            if not out:
                await asyncio.sleep(timeout_ms / 1000)
            return out  # buffered records come back without suspending, as the real one

    consumer = ListConsumer()
    # No periodic commit inside the count: it runs per second of wall time, which
    # callgrind stretches fifty-fold (the benchmark's 1 s commits cost nothing there).
    processor = Processor(
        consumer, handler, concurrency=concurrency, ordering="key", commit_interval_ms=3_600_000
    )
    _mark()
    running = asyncio.ensure_future(processor.run())
    await done.wait()
    _mark()
    await processor.stop()
    await running
    return {"finished": finished, "origin": origin}


def _run_child(tree: Path, mode: str, concurrency: int, count: int) -> dict[str, Any]:
    """One child under callgrind, running ``tree``'s aiogroup (first on PYTHONPATH; the
    child reports the one it imported, and a mismatch is an error)."""
    env = dict(os.environ)
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
    with tempfile.TemporaryDirectory(prefix="processing-cost-") as tmp:
        out = os.path.join(tmp, "cg.out")
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--dump-before=getsid",
                f"--callgrind-out-file={out}",
                sys.executable,
                str(Path(__file__).resolve()),  # by path: the tree may predate this file
                "_child",
                mode,
                str(concurrency),
                str(count),
            ],
            cwd=str(ROOT),
            env=env,
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{mode} child failed ({done.returncode}): {done.stderr[-2000:]}")
        got: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        if Path(got["origin"]).resolve() != (tree / "aiogroup").resolve():
            raise RuntimeError(f"the child imported aiogroup from {got['origin']}, not {tree}")
        dumps = sorted(glob.glob(out + ".*"), key=lambda f: int(f.rsplit(".", 1)[1]))
        # Dump 1: start-up up to the first mark; dump 2: the processing.
        got["instructions"] = _total(dumps[1])
    got["per_record"] = got["instructions"] / count
    return got


def _total(dump: str) -> int:
    with open(dump) as f:
        for line in f:
            if line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError(f"no totals line in {dump}")


def main(argv: list[str]) -> int:
    if argv and argv[0] == "_child":
        result = asyncio.run(_child(argv[1], int(argv[2]), int(argv[3])))
        print(json.dumps(result), flush=True)
        return 0
    parser = argparse.ArgumentParser(prog="python -m benchmarks.processing_cost")
    parser.add_argument("--tree", type=Path, action="append", default=[])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=1000)
    args = parser.parse_args(argv)
    if args.records < 1 or args.concurrency < 1:
        parser.error("--records and --concurrency must be >= 1")
    ceiling = _run_child(ROOT, "ceiling", args.concurrency, args.records)
    print(f"bare asyncio tasks: {ceiling['per_record']:,.0f} instructions/record", flush=True)
    for tree in args.tree or [ROOT]:
        got = _run_child(tree, "processor", args.concurrency, args.records)
        own = got["per_record"] - ceiling["per_record"]
        print(
            f"processor ({tree}): {got['per_record']:,.0f} "
            f"instructions/record, {own:,.0f} of them its own",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
