"""``python -m benchmarks.share_join_trace``: the first seconds of a share consumer, traced.

Why (issue 28): every aiogroup share run spent ~1.05 s before its first record while
confluent-kafka's whole 200,000-record runs took ~2 s.  This traces, on one Apache Kafka
4.4 node started here, what each client sends and gets in its first seconds, in a fresh
share group each: aiogroup's requests and answers (every ``AIOKafkaClient.send``, with
its time from the consumer's creation, and each ShareGroupHeartbeat's answer) and
librdkafka's own log (``debug=cgrp,protocol``, in a child process so its stderr is its
own), then when each got its first record.  ``--order`` picks who goes first on the
topic (the share coordinator initialises a share partition's state once per group, so
no client pays for another; the topic's first group may pay for the state topic).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import itertools
import os
import pstats
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aiogroup import ShareConsumer
from aiogroup.testing import kafka as kafka_fixture
from aiogroup.testing.broker import unique_name
from aiogroup.testing.kafka import KafkaCluster
from aiogroup.testing.share_peers import configure_share_group
from benchmarks.share_baseline import _produce

_CONFLUENT = r"""
import sys, time, confluent_kafka
bootstrap, topic, group, records, debug = sys.argv[1:6]
began = time.time()
print(f"created {began:.3f}", flush=True)
c = confluent_kafka.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
    "client.id": "confluent-trace", **({"debug": debug} if debug else {})})
c.subscribe([topic])
got, first = 0, None
while got < int(records):
    batch = [m for m in c.poll(0.2) if m.error() is None]
    if batch and first is None:
        first = time.time()
        cpu0 = time.process_time()
        print(f"first {first:.3f} after {first - began:.3f}", flush=True)
    got += len(batch)
end = time.time()
cpu = time.process_time() - cpu0
print(f"last {end:.3f} after {end - began:.3f} records {got}, cpu {cpu:.2f} s", flush=True)
c.close()
"""


async def trace_aiogroup(
    bootstrap: str,
    topic: str,
    group: str,
    records: int,
    acquire_mode: str = "record_limit",
    max_poll_records: int = 500,
    profile_gap: Path | None = None,
    wire: bool = False,
    fetch_max_bytes: int | None = None,
) -> list[str]:
    """One aiogroup share consumer reads ``records``; every request it sends is logged
    with its send and answer times from the consumer's creation, and its ShareFetch
    round trips are summed up (:func:`_fetch_summary`).  ``profile_gap``: cProfile runs
    only from each ShareFetch's answer to the next ShareFetch's sending (whatever the
    loop runs in that window: the answer's handling, the application's batch), and
    its statistics are written there (``pstats``) and summed up in the lines.
    ``wire``: each ShareFetch's way through the client is stamped too
    (:class:`_WireStamps`)."""
    from aiokafka.conn import AIOKafkaConnection

    from aiogroup._protocol.share import parse_share_fetch

    lines: list[str] = []
    #: Per ShareFetch: (sent, answered, records acquired).
    fetches: list[tuple[float, float, int]] = []
    began = time.monotonic()
    original = AIOKafkaConnection.send

    profiler = cProfile.Profile() if profile_gap is not None else None
    gap_open = False
    stamps = _WireStamps() if wire else None

    def traced(self: Any, request: Any, expect_response: bool = True) -> Any:
        # The connection's write, not AIOKafkaClient.send: the share fetcher writes
        # some ShareFetches on the connection itself (from the application's take).
        nonlocal gap_open
        name = type(request).__name__
        if profiler is not None and gap_open and name == "ShareFetchRequest":
            profiler.disable()
            gap_open = False
        sent = time.monotonic() - began
        node_id = f"{getattr(self, '_host', '?')}:{getattr(self, '_port', '?')}"
        built = time.perf_counter()
        try:
            waiter = original(self, request, expect_response)
        except Exception as exc:
            lines.append(f"{sent:7.3f} -> {name} to {node_id}: failed {exc!r}")
            raise
        stamp = None
        if stamps is not None and name == "ShareFetchRequest":
            stamp = stamps.written(self, built)
        if not expect_response:
            return waiter
        return answered_by(waiter, name, node_id, sent, stamp)

    async def answered_by(
        waiter: Any, name: str, node_id: Any, sent: float, stamp: list[float] | None = None
    ) -> Any:
        nonlocal gap_open
        try:
            resp = await waiter
        except Exception as exc:
            lines.append(f"{sent:7.3f} -> {name} to {node_id}: failed {exc!r}")
            raise
        answered = time.monotonic() - began
        if stamp is not None:
            stamp.append(time.perf_counter())
        extra = ""
        if "ShareGroupHeartbeat" in name:
            extra = " " + _heartbeat_summary(resp)
        if name == "ShareFetchRequest":
            got = sum(
                a.last_offset - a.first_offset + 1
                for part in parse_share_fetch(resp).partitions
                for a in part.acquired
            )
            fetches.append((sent, answered, got))
            if len(fetches) <= 3:
                extra = " acquired " + " ".join(
                    f"{a.first_offset}-{a.last_offset}"
                    for part in parse_share_fetch(resp).partitions
                    for a in part.acquired
                )
            if profiler is not None and not gap_open:
                gap_open = True
                profiler.enable()
        lines.append(f"{sent:7.3f} -> {name} to {node_id}, answered {answered:7.3f}{extra}")
        return resp

    AIOKafkaConnection.send = traced  # type: ignore[method-assign]
    if stamps is not None:
        stamps.hook_selector(asyncio.get_running_loop())
    try:
        consumer = ShareConsumer(
            topic,
            group_id=group,
            bootstrap_servers=bootstrap,
            acquire_mode=acquire_mode,
            max_poll_records=max_poll_records,
            **({} if fetch_max_bytes is None else {"fetch_max_bytes": fetch_max_bytes}),
        )
        await consumer.start()
        lines.append(f"{time.monotonic() - began:7.3f}    start() returned")
        got = 0
        try:
            while got < records:
                batch = await consumer.getmany(timeout_ms=200)
                n = sum(len(rs) for rs in batch.values())
                if n and not got:
                    lines.append(f"{time.monotonic() - began:7.3f}    first record(s): {n}")
                    cpu0 = time.process_time()
                got += n
            cpu = time.process_time() - cpu0
            lines.append(f"{time.monotonic() - began:7.3f}    last record ({got}), cpu {cpu:.2f} s")
        finally:
            await consumer.stop(timeout=10)
    finally:
        if profiler is not None and gap_open:
            profiler.disable()
        AIOKafkaConnection.send = original  # type: ignore[method-assign]
    # Fetches after the first answered one say nothing new.
    out, n = [], 0
    for line in lines:
        if "ShareFetch" in line:
            n += 1
            if n > 3:
                continue
        out.append(line)
    out.append(_fetch_summary(fetches))
    if stamps is not None:
        out.extend(stamps.summary())
    if profiler is not None and profile_gap is not None:
        profiler.dump_stats(profile_gap)
        out.append(_gap_profile_summary(profile_gap))
    return out


#: ShareFetch's API key.
_SHARE_FETCH_KEY = 78


class _WireStamps:
    """Where a ShareFetch's round trip goes on the client's side (issue 28, ``--wire``).

    Per ShareFetch, ``time.perf_counter()`` at: (0) aiokafka's ``send`` called (it
    encodes the request, then writes it), (a) the request written to the
    transport (aiokafka's ``send`` returned; asyncio writes at once when nothing is
    queued), (b) the answer's first bytes handed to the connection's stream reader
    (the loop's read of the socket), (c) the answer's frame complete (aiokafka's reader
    task calls ``_handle_frame``), (d) aiokafka's decode of it done and the awaiting
    future resolved, (e) the caller's ``await`` back.  (b)-(a) holds the broker and the
    wire *and* any time the loop was busy before it read the socket; the socket options
    are read once per connection.  The hooks are instance attributes on the connection
    and its reader: the classes are not changed."""

    def __init__(self) -> None:
        #: Per ShareFetch: [0, a, b, c, d, e] (b, c, d filled as they happen).
        self.fetches: list[list[float]] = []
        #: Per connection hooked: its ShareFetches waiting for (b), (c), in order.
        self._first: dict[int, list[list[float]]] = {}
        self._frame: dict[int, list[list[float]]] = {}
        self.chunks: list[int] = []
        self.sockopts: dict[str, str] = {}
        #: Per answer's first read: how long the loop ran callbacks (busy, not in
        #: ``select``) just before the ``select`` that reported the answer readable.
        self.busy: list[float] = []
        self._select_out = 0.0
        self._busy_before = 0.0

    def hook_selector(self, loop: Any) -> None:
        """Stamp the loop's ``select`` calls: an answer that came while the loop was
        busy waited in the socket up to that long (the round trip as the client sees
        it, not the wire's)."""
        selector = loop._selector
        select = selector.select

        def stamped(timeout: float | None = None) -> Any:
            entered = time.perf_counter()
            self._busy_before = entered - self._select_out
            try:
                return select(timeout)
            finally:
                self._select_out = time.perf_counter()

        selector.select = stamped

    def written(self, conn: Any, called: float) -> list[float]:
        stamp = [called, time.perf_counter()]
        self.fetches.append(stamp)
        key = id(conn)
        if key not in self._first:
            self._hook(conn, key)
        self._first[key].append(stamp)
        self._frame[key].append(stamp)
        return stamp

    def _hook(self, conn: Any, key: int) -> None:
        import socket as socket_mod

        first, frame = self._first.setdefault(key, []), self._frame.setdefault(key, [])
        reader = conn._reader
        feed = reader.feed_data
        handle = conn._handle_frame

        def fed(data: Any) -> None:
            if first:
                first.pop(0).append(time.perf_counter())
                self.busy.append(self._busy_before)
            if frame:
                self.chunks.append(len(data))
            feed(data)

        def handled(resp: Any) -> None:
            mine = (
                frame
                and len(frame[0]) == 3
                and conn._requests
                and getattr(conn._requests[0][1], "API_KEY", None) == _SHARE_FETCH_KEY
            )
            if mine:
                frame[0].append(time.perf_counter())
            handle(resp)
            if mine:
                frame.pop(0).append(time.perf_counter())

        reader.feed_data = fed
        conn._handle_frame = handled
        sock = conn._writer.transport.get_extra_info("socket")
        if sock is not None:
            tcp = socket_mod.IPPROTO_TCP
            self.sockopts[f"{conn.host}:{conn.port}"] = (
                f"TCP_NODELAY {sock.getsockopt(tcp, socket_mod.TCP_NODELAY)}, "
                f"SO_RCVBUF {sock.getsockopt(socket_mod.SOL_SOCKET, socket_mod.SO_RCVBUF)}, "
                f"SO_SNDBUF {sock.getsockopt(socket_mod.SOL_SOCKET, socket_mod.SO_SNDBUF)}, "
                f"reader {type(reader).__name__}"
            )

    def summary(self) -> list[str]:
        done = [s for s in self.fetches if len(s) == 6]
        out = [f"        socket {k}: {v}" for k, v in self.sockopts.items()]
        if not done:
            return [*out, "        (no ShareFetch stamped)"]
        names = [
            "encoded and written",
            "first byte - written",
            "frame - first byte",
            "decoded - frame",
            "awaited - decoded",
        ]
        parts = []
        for i, name in enumerate(names):
            ms = [(s[i + 1] - s[i]) * 1000 for s in done]
            parts.append(
                f"{name} median {statistics.median(ms):.3f} ms (sum {sum(ms) / 1000:.2f} s)"
            )
        chunks = self.chunks
        out.append(f"        {len(done)} ShareFetch stamped: " + "; ".join(parts))
        if self.busy:
            busy = [b * 1000 for b in self.busy]
            out.append(
                f"        loop busy before the select that found an answer: median "
                f"{statistics.median(busy):.3f} ms, mean {statistics.fmean(busy):.3f} ms, "
                f"over 0.2 ms in {sum(b > 0.2 for b in busy)} of {len(busy)}"
            )
        if chunks:
            out.append(
                f"        answer reads: {len(chunks)} chunks for {len(done)} answers, median "
                f"{statistics.median(chunks):.0f} B, max {max(chunks)} B"
            )
        return out


def _gap_profile_summary(path: Path, top: int = 25) -> str:
    """The functions with the most cumulative and own time in the profiled gaps."""
    buf = io.StringIO()
    stats = pstats.Stats(str(path), stream=buf)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)
    return f"        gaps profiled ({path}):\n{buf.getvalue()}"


def _fetch_summary(fetches: list[tuple[float, float, int]]) -> str:
    """How a drain's time splits: ShareFetch round trips (the broker's share and the
    wire's) against the time between an answer and the next request (the client's)."""
    if not fetches:
        return "        (no ShareFetch)"
    rtts = [b - a for a, b, _ in fetches]
    gaps = [nxt[0] - cur[1] for cur, nxt in itertools.pairwise(fetches)]
    sizes = [n for _, _, n in fetches if n]
    return (
        f"        {len(fetches)} ShareFetch: records each median "
        f"{statistics.median(sizes or [0]):.0f}"
        f"; round trip median {statistics.median(rtts) * 1000:.2f} ms, sum {sum(rtts):.2f} s;"
        f" answer to next request median {statistics.median(gaps or [0]) * 1000:.2f} ms,"
        f" sum {sum(g for g in gaps if g > 0):.2f} s (overlapping: {sum(g < 0 for g in gaps)})"
    )


def _heartbeat_summary(resp: Any) -> str:
    from aiogroup._protocol.share import parse_share_group_heartbeat

    try:
        r = parse_share_group_heartbeat(resp)
    except Exception as exc:  # the trace shows whatever came
        return f"(unparsed: {exc!r})"
    parts = {str(t)[:8]: sorted(ps) for t, ps in (r.assignment or {}).items()}
    return (
        f"error {r.error_code} epoch {r.member_epoch} interval {r.heartbeat_interval_ms} "
        f"assignment {parts if r.assignment is not None else None}"
    )


def trace_confluent(
    bootstrap: str, topic: str, group: str, records: int, debug: str, out: Path
) -> list[str]:
    """confluent-kafka's ShareConsumer in a child process, librdkafka's debug log in
    ``out``; returns its protocol lines about the group and first fetches, with times
    from its creation."""
    with out.open("w") as err:
        proc = subprocess.run(
            [sys.executable, "-c", _CONFLUENT, bootstrap, topic, group, str(records), debug],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            timeout=120,
            check=True,
        )
    created = float(re.search(r"created ([\d.]+)", proc.stdout).group(1))  # type: ignore[union-attr]
    lines: list[str] = []
    keep = re.compile(
        r"ShareGroupHeartbeat|HEARTBEAT|ASSIGN|SHAREFETCH|ShareFetch|FindCoordinator|"
        r"Metadata|SUBSCRIBE|JOIN|Sent |Received",
        re.IGNORECASE,
    )
    fetches = 0
    rtts: list[float] = []
    for raw in out.read_text(errors="replace").splitlines():
        rtt = re.search(r"Received ShareFetchResponse .*rtt ([\d.]+)ms", raw)
        if rtt:
            rtts.append(float(rtt.group(1)) / 1000)
        m = re.match(r"%\d\|([\d.]+)\|([^|]+)\|[^|]*\| (.*)", raw)
        if not m or not keep.search(raw):
            continue
        t = float(m.group(1)) - created
        if "ShareFetch" in raw or "SHAREFETCH" in raw:
            fetches += 1
            if fetches > 8:
                continue
        lines.append(f"{t:7.3f} {m.group(2)} {m.group(3)[:220]}")
    if rtts:
        lines.append(
            f"        {len(rtts)} ShareFetch: round trip median "
            f"{statistics.median(rtts) * 1000:.2f} ms, sum {sum(rtts):.2f} s"
        )
    for line in proc.stdout.splitlines():
        m = re.match(r"(first|last) ([\d.]+) after ([\d.]+)(.*)", line)
        if m:
            lines.append(f"{float(m.group(3)):7.3f}    {m.group(1)} record{m.group(4)}")
    return lines


async def _run(
    records: int,
    partitions: int,
    order: list[str],
    debug: str,
    logdir: Path,
    settings: dict[str, str],
    max_poll_records: int = 500,
    profile_gap: bool = False,
    wire: bool = False,
    request_log: bool = False,
    fetch_max_bytes: int | None = None,
) -> None:
    if request_log:
        kafka_fixture._LOG4J2 = _REQUEST_LOG4J2
    try:
        cluster = await KafkaCluster(settings=settings).start()
    finally:
        kafka_fixture._LOG4J2 = _FIXTURE_LOG4J2
    logs = {n.node_id: n.log_path for n in cluster.nodes}
    try:
        bootstrap = cluster.bootstrap_servers
        topic = await cluster.create_topic(unique_name("share-trace"), partitions)
        await _produce(bootstrap, topic, records, partitions)
        for n, client in enumerate(order):
            group = unique_name(f"share-trace-{client}")
            await configure_share_group(bootstrap, group)
            print(f"== {n}: {client}, group {group}, load {os.getloadavg()[0]:.1f}", flush=True)
            broker_cpu = _cpu_seconds(cluster)
            log_from = {i: path.stat().st_size for i, path in logs.items()}
            if client.startswith("aiogroup"):
                mode = "batch_optimized" if client == "aiogroup-batch" else "record_limit"
                lines = await trace_aiogroup(
                    bootstrap,
                    topic,
                    group,
                    records,
                    mode,
                    max_poll_records,
                    logdir / f"aiogroup-gaps-{n}.pstats" if profile_gap else None,
                    wire,
                    fetch_max_bytes,
                )
            else:
                out = logdir / f"librdkafka-{n}.log"
                lines = await asyncio.to_thread(
                    trace_confluent, bootstrap, topic, group, records, debug, out
                )
                lines.append(f"        (librdkafka's whole log: {out})")
            lines.append(
                f"        broker cpu {_cpu_seconds(cluster) - broker_cpu:.2f} s "
                "(the JVM's, the client's whole run)"
            )
            if request_log:
                lines.extend(
                    _request_log_summary(logs, log_from, logdir / f"broker-requests-{n}.log")
                )
            print("\n".join(lines), flush=True)
    finally:
        await cluster.stop()


#: The fixture's broker logging, and the same with the broker's request log on
#: (``kafka.request.logger`` at DEBUG: a "Completed request" line per request, with the
#: broker's own times) - ``--request-log``.
_FIXTURE_LOG4J2 = kafka_fixture._LOG4J2
_REQUEST_LOG4J2 = _FIXTURE_LOG4J2.replace(
    "logger.request.level = WARN", "logger.request.level = DEBUG"
)
#: The broker's times of a request, as its request log names them.
_BROKER_TIMES = (
    "totalTimeMs",
    "requestQueueTimeMs",
    "localTimeMs",
    "remoteTimeMs",
    "responseQueueTimeMs",
    "sendTimeMs",
)


def _request_log_summary(
    logs: dict[int, Path], start: dict[int, int], keep: Path | None = None
) -> list[str]:
    """The broker's own times of the ShareFetches it completed since ``start`` (each
    log's size then): medians and sums per time, from its request log.  What the broker
    counts is from the request's arrival on its socket to its answer's last byte
    handed to the socket; the client's round trip less ``totalTimeMs`` is the wire's
    and the client's share.  ``keep``: the ShareFetch lines are written there."""
    times: dict[str, list[float]] = {k: [] for k in _BROKER_TIMES}
    kept: list[str] = []
    for node, path in logs.items():
        with path.open("rb") as f:
            f.seek(start.get(node, 0))
            text = f.read().decode(errors="replace")
        for line in text.splitlines():
            if "Completed request" not in line or '"requestApiKey":78' not in line:
                continue
            kept.append(line)
            for key in _BROKER_TIMES:
                m = re.search(rf'"{key}":([\d.]+)', line)
                if m:
                    times[key].append(float(m.group(1)))
    if keep is not None:
        keep.write_text("\n".join(kept) + "\n")
    n = len(times["totalTimeMs"])
    if not n:
        return ["        broker request log: no ShareFetch found"]
    parts = [
        f"{k[:-2]} {statistics.median(v):.3f} (sum {sum(v) / 1000:.2f} s)"
        for k, v in times.items()
        if v
    ]
    total = sorted(times["totalTimeMs"])
    tail = f"; totalTime p90 {total[int(n * 0.9)]:.3f}, max {total[-1]:.3f}"
    return [
        f"        broker's request log, {n} ShareFetch, median ms: " + ", ".join(parts) + tail,
        *([f"        (its lines: {keep})"] if keep is not None else []),
    ]


def _cpu_seconds(cluster: KafkaCluster) -> float:
    """CPU seconds (user + system) the broker JVMs have used so far (/proc)."""
    total = 0.0
    for node in cluster.nodes:
        if node.process is None:
            continue
        fields = Path(f"/proc/{node.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.share_join_trace")
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument(
        "--order",
        nargs="+",
        default=["aiogroup", "confluent", "aiogroup", "confluent"],
        choices=["aiogroup", "aiogroup-batch", "confluent"],
        help="aiogroup-batch: acquire_mode='batch_optimized'",
    )
    parser.add_argument("--debug", default="cgrp,protocol")
    parser.add_argument("--max-poll-records", type=int, default=500, help="aiogroup's")
    parser.add_argument("--logdir", type=Path, default=Path("/tmp"))
    parser.add_argument(
        "--profile-gap",
        action="store_true",
        help="cProfile aiogroup's loop from each ShareFetch answer to the next request "
        "(LOGDIR/aiogroup-gaps-N.pstats; the profiler slows what it measures)",
    )
    parser.add_argument(
        "--wire",
        action="store_true",
        help="stamp each of aiogroup's ShareFetches: written, first byte read, frame "
        "complete, decoded, awaited (and the share connection's socket options)",
    )
    parser.add_argument(
        "--fetch-max-bytes",
        type=int,
        help="aiogroup's fetch_max_bytes (its ShareFetch's MaxBytes; default the consumer's)",
    )
    parser.add_argument(
        "--request-log",
        action="store_true",
        help="turn the broker's request log on (kafka.request.logger at DEBUG) and sum up "
        "its own times of each client's ShareFetches",
    )
    parser.add_argument(
        "--broker",
        nargs="*",
        default=[],
        metavar="NAME=VALUE",
        help="broker settings over the fixture's (group.share.assignment.interval.ms=100)",
    )
    args = parser.parse_args()
    settings = dict(item.split("=", 1) for item in args.broker)
    # librdkafka's log and the gap profiles are written there: a missing directory
    # failed the confluent run only after the broker had been started and filled.
    args.logdir.mkdir(parents=True, exist_ok=True)
    asyncio.run(
        _run(
            args.records,
            args.partitions,
            args.order,
            args.debug,
            args.logdir,
            settings,
            args.max_poll_records,
            args.profile_gap,
            args.wire,
            args.request_log,
            args.fetch_max_bytes,
        )
    )


if __name__ == "__main__":
    main()
