"""``python -m aiogroup.testing``: start a test broker for manual use, until Ctrl-C/SIGTERM.

The mode follows ``AIOGROUP_BROKER`` as in the pytest fixture (embedded Tansu by
default, ``kafka`` for Apache Kafka, ``kafka-cluster`` for three nodes).  It prints
``bootstrap_servers`` and stops the broker on SIGINT or SIGTERM; if this process is
killed outright, the broker dies with it (its parent-death signal).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from aiogroup.testing.broker import BrokerStartError, KafkaBroker


async def _serve(topics: list[str], partitions: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # before the line that says we are up
        loop.add_signal_handler(sig, stop.set)
    broker = KafkaBroker()
    await broker.start()
    try:
        for name in topics:
            await broker.create_topic(name, partitions)
        print(
            f"{broker.mode} broker at {broker.bootstrap_servers} (pid {broker.pid}, "
            f"started in {broker.startup_seconds:.1f}s); Ctrl-C to stop",
            flush=True,
        )
        await stop.wait()
    finally:
        await broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aiogroup.testing",
        description="Run a test broker (AIOGROUP_BROKER selects the mode) until Ctrl-C.",
    )
    parser.add_argument("--topic", action="append", default=[], help="create this topic")
    parser.add_argument("--partitions", type=int, default=1, help="partitions per --topic")
    args = parser.parse_args(argv)
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve(args.topic, args.partitions))
    except BrokerStartError as exc:
        print(f"could not start the broker: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
