"""``python -m aiogroup.testing``: start a test broker for manual use, until Ctrl-C/SIGTERM.

The mode follows ``AIOGROUP_BROKER`` as in the pytest fixture (embedded Tansu by
default, ``kafka`` for Apache Kafka, ``kafka-cluster`` for three nodes).  It prints
``bootstrap_servers`` and stops the broker on SIGINT or SIGTERM; if this process is
killed outright, the broker dies with it (its parent-death signal).

``--port 9092`` puts the embedded broker where the quickstart's default
``localhost:9092`` finds it; the last line printed is an ``export AIOGROUP_BOOTSTRAP=...``
line (read by the quickstart, the examples and the pytest fixtures), to paste into the
shell that runs them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from aiogroup.testing.broker import BrokerStartError, KafkaBroker, broker_mode


async def _serve(topics: list[str], partitions: int, port: int | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):  # before the line that says we are up
        loop.add_signal_handler(sig, stop.set)
    broker = KafkaBroker(port=port)
    await broker.start()
    try:
        for name in topics:
            await broker.create_topic(name, partitions)
        print(
            f"{broker.mode} broker at {broker.bootstrap_servers} (pid {broker.pid}, "
            f"started in {broker.startup_seconds:.1f}s); Ctrl-C to stop",
            flush=True,
        )
        print(f"export AIOGROUP_BOOTSTRAP={broker.bootstrap_servers}", flush=True)
        await stop.wait()
    finally:
        await broker.stop()


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 1-65535, got {port}")
    return port


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aiogroup.testing",
        description="Run a test broker (AIOGROUP_BROKER selects the mode) until Ctrl-C.",
    )
    parser.add_argument("--topic", action="append", default=[], help="create this topic")
    parser.add_argument("--partitions", type=int, default=1, help="partitions per --topic")
    parser.add_argument(
        "--port",
        type=_port,
        default=None,
        help="listen on this port (embedded broker only; default: a free one), e.g. 9092",
    )
    args = parser.parse_args(argv)
    try:
        mode = broker_mode()
        if args.port is not None and mode != "embedded":
            parser.error(
                f"--port works with the embedded broker only (this environment selects "
                f"{mode!r}, which picks its own ports and prints where it listens)"
            )
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve(args.topic, args.partitions, args.port))
    except BrokerStartError as exc:
        print(f"could not start the broker: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
