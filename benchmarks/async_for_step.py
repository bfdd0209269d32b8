"""What one ``async for`` step over held records costs, in instructions, without a broker.

``python -m benchmarks.async_for_step [--small 20000] [--large 100000]``

``record_path_cost`` counts a whole drain; this isolates the step
(``aiogroup._fetch.iteration.iterate``) from fetching and decoding: a run of
``ConsumerRecord`` objects held by ``HeldRecords`` is handed out by ``async for``
(``n += 1`` per record), against an async generator yielding the same records from a
list (the protocol's own cost).  ``held`` is the pure-Python step (``iterate_python``,
an async generator), ``native`` the native module's ``HeldSteps`` (skipped, with a
note, when the installed module has none).  callgrind counts only the loop (``os.getsid`` marks,
as in ``record_path_cost``); per step is the difference of a small and a large run
over the difference in records.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

MODES = ("bare", "held", "native")


def _records(n: int) -> list[object]:
    from aiogroup.structs import ConsumerRecord

    return [ConsumerRecord("t", 0, i, 0, 0, None, b"x", None, -1, 1, ()) for i in range(n)]


async def _bare(records: list[object]) -> AsyncIterator[object]:
    for r in records:
        yield r


async def _loop(mode: str, n: int) -> None:
    from aiogroup._fetch.iteration import (
        HeldRecords,
        held_steps_type,
        iterate_native,
        iterate_python,
    )
    from aiogroup._state.subscription import SubscriptionState
    from aiogroup.structs import TopicPartition

    records = _records(n)
    count = 0
    if mode == "bare":
        os.getsid(0)
        async for _r in _bare(records):
            count += 1
        os.getsid(0)
    else:
        sub = SubscriptionState()
        tp = TopicPartition("t", 0)
        sub.assign_from_user([tp])
        assignment = sub.assignment
        assert assignment is not None
        assignment.state(tp).seek(0)
        held = HeldRecords(sub.delivery_changes)
        held.hold(assignment, {tp: records}, {tp: 0})  # type: ignore[dict-item]

        async def step() -> object:
            a = sub.assignment
            return None if a is None else held.take(a)

        if mode == "native":
            it = iterate_native(held_steps_type(), held, sub, time.monotonic, step)  # type: ignore[arg-type]
        else:
            it = iterate_python(held, sub, time.monotonic, step)  # type: ignore[arg-type]
        os.getsid(0)
        async for _r in it:
            count += 1
            if count >= n:
                break
        os.getsid(0)
    if count != n:
        raise RuntimeError(f"{mode}: {count} of {n} records")


def _count(mode: str, n: int) -> int:
    with tempfile.TemporaryDirectory(prefix="async-for-step-") as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--dump-before=getsid",
                f"--callgrind-out-file={out}",
                sys.executable,
                str(Path(__file__).resolve()),
                "_loop",
                mode,
                str(n),
            ],
            check=True,
            capture_output=True,
        )
        for line in Path(out + ".2").read_text().splitlines():
            if line.startswith("totals:"):
                return int(line.split()[1])
    raise RuntimeError("no totals line")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_loop"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's
        asyncio.run(_loop(argv[1], int(argv[2])))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.async_for_step", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--small", type=int, default=20_000)
    parser.add_argument("--large", type=int, default=100_000)
    args = parser.parse_args(argv)
    from aiogroup._fetch.iteration import held_steps_type

    for mode in MODES:
        if mode == "native" and held_steps_type() is None:
            print("native HeldSteps: not in the installed aiogroup_native (or AIOGROUP_NATIVE=0)")
            continue
        small, large = _count(mode, args.small), _count(mode, args.large)
        per = (large - small) / (args.large - args.small)
        what = {
            "bare": "async generator over a list",
            "held": "iterate_python() over held records",
            "native": "HeldSteps over held records",
        }[mode]
        print(f"{what:36s} {per:8,.0f} instructions per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
