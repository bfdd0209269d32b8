"""What a drain's Fetch responses look like on this broker: one drain, counted.

``python -m benchmarks.fetch_shape [--payload 1KiB] [--records 250000] [--variant tuned]``
(broker: ``AIOGROUP_BROKER``, as every benchmark; ``--profile`` adds a cProfile split)

Why: the same 1 KiB drain costs aiogroup about twice the CPU on Tansu that it costs on
Apache Kafka (docs/benchmarks/profile.md), and the per-record work is the same on both.
What differs is the shape of the traffic - how many responses, how large, how many
partitions each answers, how the socket hands the bytes over - so this counts it, for
one drain with aiogroup's throughput configurations (``benchmarks.adapters``' options),
in the drain's own process:

* per Fetch: partitions asked, partitions answered with records, record bytes and
  records (the cursor's advance), the round trip;
* per socket read (``data_received`` of aiokafka's protocol): how many, what sizes;
* per frame (``readexactly`` of the size the 4-byte prefix gave): how many, what sizes;
* the drain's wall and CPU seconds, getmany calls and records per call.

``SHAPE_TOUCH=1`` in the environment also reads every record's value, as the benchmark
worker does.  Nothing is written unless ``--json``; no timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 8


class Counts:
    """What the hooks saw during the drain (only while ``on`` is set)."""

    def __init__(self) -> None:
        self.on = False
        self.requests: list[int] = []  # partitions asked per Fetch
        self.responses: list[tuple[int, int, int, int, float]] = []
        # (partitions answered, partitions with records, record bytes, records, seconds)
        self.reads: list[int] = []  # data_received sizes
        self.frames: list[int] = []  # readexactly sizes >= 8
        self.polls = 0
        self.polled: list[int] = []
        # The timeline (perf_counter seconds): each Fetch sent, each answer's handling
        # begun and ended, each getmany return.
        self.sent: list[float] = []
        self.answered: list[float] = []
        self.handled: list[float] = []
        self.returned: list[float] = []


def _install(counts: Counts) -> None:
    """Wrap the fetcher's and the connection's methods with counters (this process only)."""
    import aiokafka.conn as conn

    from aiogroup._fetch import fetcher as fmod
    from aiogroup._support import frame_reader

    orig_received = conn.AIOKafkaProtocol.data_received

    def data_received(self: Any, data: bytes) -> None:
        if counts.on:
            counts.reads.append(len(data))
        orig_received(self, data)

    conn.AIOKafkaProtocol.data_received = data_received  # type: ignore[method-assign]

    for cls in (asyncio.StreamReader, frame_reader.FrameReader):
        orig_read = cls.__dict__["readexactly"]

        def make(orig: Any, cls: type) -> Any:
            async def readexactly(self: Any, n: int) -> bytes:
                if counts.on and n >= 8 and type(self) is cls:
                    counts.frames.append(n)
                return await orig(self, n)  # type: ignore[no-any-return]

            return readexactly

        cls.readexactly = make(orig_read, cls)  # type: ignore[method-assign]

    orig_fetch = fmod.Fetcher._fetch
    orig_handle = fmod.Fetcher._handle_response

    async def _fetch(self: Any, node: int, request: Any, plan: Any, reserved: int) -> None:
        self._shape_sent = time.perf_counter()
        if counts.on:
            counts.requests.append(len(plan))
            counts.sent.append(self._shape_sent)
        await orig_fetch(self, node, request, plan, reserved)

    def _handle_response(self: Any, response: Any, plan: Any, node: int) -> Any:
        answered = time.perf_counter()
        rtt = answered - getattr(self, "_shape_sent", answered)
        before = {tp: p.cursor.offset for tp, p in plan.items()}
        n_answered = with_records = nbytes = 0
        for _topic, parts in response.topics:
            for p in parts:
                n_answered += 1
                if p[-1]:
                    with_records += 1
                    nbytes += len(p[-1])
        got = orig_handle(self, response, plan, node)
        records = sum(p.cursor.offset - before[tp] for tp, p in plan.items())
        if counts.on:
            counts.responses.append((n_answered, with_records, nbytes, records, rtt))
            counts.answered.append(answered)
            counts.handled.append(time.perf_counter())
        return got

    fmod.Fetcher._fetch = _fetch  # type: ignore[method-assign]
    fmod.Fetcher._handle_response = _handle_response  # type: ignore[method-assign]


def timeline(counts: Counts) -> dict[str, list[float]]:
    """Where a drain's wall time goes between one Fetch and the next (milliseconds).

    * ``in_flight``: sent -> its answer's handling begins (broker time, the wire, and
      the socket reads, which share the event loop with the application);
    * ``gap``: an answer handled -> the next Fetch sent (no Fetch in flight: the broker
      idles; summed, the drain's wall time the broker was not asked for anything);
    * ``returns_before_send``: getmany returns between an answer and the next send
      (records were built while the broker waited for a request).
    """
    in_flight = [(a - s) * 1e3 for s, a in zip(counts.sent, counts.answered, strict=False)]
    gaps: list[float] = []
    returns = 0
    for handled, nxt in zip(counts.handled, counts.sent[1:], strict=False):
        gaps.append((nxt - handled) * 1e3)
        returns += sum(1 for r in counts.returned if handled <= r < nxt)
    return {"in_flight": in_flight, "gap": gaps, "returns": [float(returns)]}


def _spread(values: list[int] | list[float]) -> str:
    if not values:
        return "-"
    q = statistics.quantiles(values, n=10) if len(values) > 1 else [values[0]] * 9
    return (
        f"n={len(values):,} median {statistics.median(values):,.0f} "
        f"(p10 {q[0]:,.0f}, p90 {q[-1]:,.0f}, max {max(values):,.0f}) sum {sum(values):,.0f}"
    )


async def drain(
    bootstrap: str, topic: str, records: int, variant: str, profile: bool
) -> dict[str, Any]:
    from aiogroup import GroupConsumer, TopicPartition
    from benchmarks.adapters.aiogroup_consumer import VARIANTS

    counts = Counts()
    _install(counts)
    consumer = GroupConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **VARIANTS[variant].options,
    )
    await consumer.start()
    prof = cProfile.Profile(time.process_time) if profile else None
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        n = nbytes = 0
        touch = os.environ.get("SHAPE_TOUCH") == "1"
        counts.on = True
        t0, c0 = time.perf_counter(), time.process_time()
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        if prof is not None:
            prof.enable()
        while n < records:
            got = await consumer.getmany(timeout_ms=1000)
            counts.polls += 1
            counts.returned.append(time.perf_counter())
            k = sum(len(r) for r in got.values())
            if touch:  # what the benchmark worker does with each record
                nbytes += sum(len(r.value) for recs in got.values() for r in recs)
            counts.polled.append(k)
            n += k
        if prof is not None:
            prof.disable()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        counts.on = False
    finally:
        await consumer.stop()
    resp = counts.responses
    out: dict[str, Any] = {
        "records": n,
        "seconds": seconds,
        "cpu_s": cpu,
        "user_s": r1.ru_utime - r0.ru_utime,
        "sys_s": r1.ru_stime - r0.ru_stime,
        "minor_faults": r1.ru_minflt - r0.ru_minflt,
        "voluntary_switches": r1.ru_nvcsw - r0.ru_nvcsw,
        "involuntary_switches": r1.ru_nivcsw - r0.ru_nivcsw,
        "responses": len(resp),
        "requests_partitions": counts.requests,
        "responses_detail": resp,
        "reads": counts.reads,
        "frames": counts.frames,
        "polls": counts.polls,
        "polled": counts.polled,
        "timeline": timeline(counts),
    }
    if prof is not None:
        buf = io.StringIO()
        stats = pstats.Stats(prof, stream=buf)
        stats.sort_stats("tottime").print_stats(25)
        out["profile"] = buf.getvalue()
    return out


def report(got: dict[str, Any]) -> list[str]:
    resp = got["responses_detail"]
    n, secs = got["records"], got["seconds"]
    tl = got["timeline"]
    lines = [
        f"drain: {n:,} records in {secs:.2f} s ({n / secs:,.0f}/s), CPU {got['cpu_s']:.2f} s",
        f"  user {got['user_s']:.2f} s, system {got['sys_s']:.2f} s, minor page faults "
        f"{got['minor_faults']:,}, context switches {got['voluntary_switches']:,} voluntary "
        f"{got['involuntary_switches']:,} involuntary",
        f"Fetch requests: {len(got['requests_partitions']):,}, partitions asked "
        f"{Counter(got['requests_partitions']).most_common()}",
        f"responses: {len(resp):,} ({len(resp) / secs:,.0f}/s)",
        f"  partitions answered: {Counter(r[0] for r in resp).most_common()}",
        f"  partitions with records: {Counter(r[1] for r in resp).most_common()}",
        f"  record bytes: {_spread([r[2] for r in resp])}",
        f"  records: {_spread([r[3] for r in resp])}",
        f"  round trip ms: {_spread([r[4] * 1000 for r in resp])}",
        f"  empty responses: {sum(1 for r in resp if r[3] == 0):,}",
        f"socket reads: {_spread(got['reads'])}",
        f"frames >= 8 B: {_spread(got['frames'])}",
        f"getmany calls: {got['polls']:,}, records per call {_spread(got['polled'])}",
        f"timeline ms: Fetch in flight {_spread(tl['in_flight'])}",
        f"  answer handled -> next Fetch sent {_spread(tl['gap'])}",
        f"  getmany returns inside those gaps: {tl['returns'][0]:,.0f}",
        f"per record: {got['cpu_s'] / n * 1e6:.2f} us CPU; "
        f"per response {got['cpu_s'] / max(1, len(resp)) * 1e3:.2f} ms CPU",
    ]
    if "profile" in got:
        lines.append(got["profile"])
    return lines


def rdkafka_drain(bootstrap: str, topic: str, records: int) -> dict[str, Any]:
    """The same drain with confluent-kafka tuned; its Fetches come from librdkafka's log.

    librdkafka's own stderr logger (no ``logger=`` given) stamps each line with the
    wall clock in ms: ``debug=protocol`` says when each FetchRequest was sent and each
    FetchResponse received (with its size), so the same timeline can be drawn.
    """
    from confluent_kafka import Consumer, TopicPartition

    from benchmarks.adapters.confluent_common import VARIANTS, config

    consumer = Consumer(config(bootstrap, VARIANTS["tuned"], None, debug="protocol"))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    n = 0
    t0, c0 = time.perf_counter(), time.process_time()
    w0 = time.time()
    while n < records:
        for msg in consumer.consume(10_000, 1.0):
            if msg.error() is None:
                n += 1
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    w1 = time.time()
    consumer.close()
    return {"records": n, "seconds": seconds, "cpu_s": cpu, "wall_from": w0, "wall_to": w1}


def rdkafka_timeline(stderr: str, w0: float, w1: float) -> dict[str, list[float]]:
    """Fetch requests and responses of the drain span, from librdkafka's protocol log."""
    import re

    sent: list[float] = []
    received: list[tuple[float, int]] = []
    stamp = re.compile(r"^%\d\|(\d+\.\d+)\|")
    for line in stderr.splitlines():
        m = stamp.match(line)
        if m is None or "Fetch" not in line:
            continue
        t = float(m.group(1))
        if not w0 <= t <= w1:
            continue
        if "Sent FetchRequest" in line:
            sent.append(t)
        elif "Received FetchResponse" in line:
            size = re.search(r"\((?:v\d+, )?(\d+) bytes", line)
            received.append((t, int(size.group(1)) if size else 0))
    in_flight = [(r - s) * 1e3 for s, (r, _) in zip(sent, received, strict=False)]
    gaps = [(s - r) * 1e3 for (r, _), s in zip(received, sent[1:], strict=False)]
    return {
        "in_flight": in_flight,
        "gap": gaps,
        "bytes": [float(b) for _, b in received],
    }


async def two_in_flight(bootstrap: str, topic: str, reps: int) -> list[tuple[float, float]]:
    """Raw Fetches, no consumer: one at a time against two at a time on one connection.

    Would a second Fetch in flight to the same broker (disjoint partitions) pay?  16
    single-partition Fetches (each partition from offset 0 and from 5,000) are sent one
    after another, and the same 16 as 8 pairs sent together, in alternating order after
    one warm-up pass; returns (one at a time, two at a time) seconds per repetition.
    """
    from aiokafka.client import AIOKafkaClient

    from aiogroup._fetch.responses import build_fetch_request
    from aiogroup.structs import TopicPartition

    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    await client._wait_on_metadata(topic)
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    node = client.cluster.leader_for_partition(tps[0])

    async def one(tp: TopicPartition, offset: int) -> int:
        request = build_fetch_request(
            [(tp, offset)],
            max_wait_ms=500,
            min_bytes=1,
            max_bytes=21 << 20,
            partition_bytes=8 << 20,
            read_committed=False,
            rack_id="",
        )
        response = await client.send(node, request)
        return sum(len(p[-1] or b"") for _, parts in response.topics for p in parts)

    async def serial() -> float:
        t0 = time.perf_counter()
        for offset in (0, 5_000):
            for tp in tps:
                await one(tp, offset)
        return time.perf_counter() - t0

    async def paired() -> float:
        t0 = time.perf_counter()
        half = PARTITIONS // 2
        for offset in (0, 5_000):
            for i in range(half):
                await asyncio.gather(one(tps[i], offset), one(tps[i + half], offset))
        return time.perf_counter() - t0

    out = []
    try:
        await serial()  # warm-up: the broker's first read of each partition
        for rep in range(reps):  # alternated, so neither always runs first
            if rep % 2:
                b = await paired()
                a = await serial()
            else:
                a = await serial()
                b = await paired()
            out.append((a, b))
    finally:
        await client.close()
    return out


def _child(cmd: list[str]) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    """Run one drain in a child process; its last ``RESULT`` line (None: it failed)."""
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=str(ROOT))
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    return done, (json.loads(line[-1][len("RESULT ") :]) if line else None)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_rdkafka"]:
        got = rdkafka_drain(argv[1], argv[2], int(argv[3]))
        print("RESULT " + json.dumps(got))
        return 0
    if argv[:1] == ["_drain"]:
        bootstrap, topic, records, variant, profile = argv[1:6]
        got = asyncio.run(drain(bootstrap, topic, int(records), variant, profile == "1"))
        print("RESULT " + json.dumps(got))
        return 0
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fetch_shape", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--payload", default="1KiB", help="a payload of benchmarks.data")
    parser.add_argument("--records", type=int, default=250_000)
    parser.add_argument("--variant", action="append", help="aiogroup variant(s): tuned, defaults")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--profile", action="store_true", help="cProfile the drain (slower)")
    parser.add_argument("--json", type=Path, help="write the raw counts here")
    parser.add_argument(
        "--two-in-flight",
        action="store_true",
        help="instead of drains: raw single-partition Fetches one at a time against two at "
        "a time on one connection (would a second Fetch in flight per broker pay?)",
    )
    parser.add_argument(
        "--librdkafka",
        action="store_true",
        help="also drain with confluent-kafka tuned and draw its Fetch timeline from "
        "librdkafka's debug=protocol log (ms stamps)",
    )
    args = parser.parse_args(argv)
    variants = args.variant or ["tuned"]

    sys.path.insert(0, str(ROOT))
    from aiogroup.testing import SyncKafkaBroker
    from benchmarks.data import PAYLOADS, produce

    results: dict[str, list[dict[str, Any]]] = {}
    with SyncKafkaBroker() as broker:
        topic = broker.create_topic(partitions=PARTITIONS)
        produce(broker.bootstrap_servers, topic, PAYLOADS[args.payload], args.records, PARTITIONS)
        print(f"produced {args.records:,} x {args.payload} to {topic}; load {os.getloadavg()}")
        if args.two_in_flight:
            pairs = asyncio.run(two_in_flight(broker.bootstrap_servers, topic, args.reps))
            for rep, (serial, paired) in enumerate(pairs):
                print(
                    f"rep {rep}: 16 Fetches one at a time {serial * 1e3:,.0f} ms, two at a "
                    f"time {paired * 1e3:,.0f} ms: {serial / paired:.2f}x"
                )
            print(f"load {os.getloadavg()}")
            return 0
        for rep in range(args.reps):
            for variant in variants:
                cmd = [sys.executable, "-m", "benchmarks.fetch_shape", "_drain"]
                cmd += [broker.bootstrap_servers, topic, str(args.records), variant]
                cmd += ["1" if args.profile else "0"]
                done, got = _child(cmd)
                if got is None:
                    print(f"rep {rep} {variant}: failed\n{done.stderr[-2000:]}")
                    continue
                results.setdefault(variant, []).append(got)
                print(f"\n== rep {rep}, aiogroup/{variant}, load {os.getloadavg()}")
                print("\n".join(report(got)), flush=True)
            if args.librdkafka:
                cmd = [sys.executable, "-m", "benchmarks.fetch_shape", "_rdkafka"]
                cmd += [broker.bootstrap_servers, topic, str(args.records)]
                done, got = _child(cmd)
                if got is None:
                    print(f"rep {rep} librdkafka: failed\n{done.stderr[-2000:]}")
                    continue
                tl = rdkafka_timeline(done.stderr, got["wall_from"], got["wall_to"])
                got["timeline"] = tl
                results.setdefault("confluent-tuned", []).append(got)
                n, secs = got["records"], got["seconds"]
                print(f"\n== rep {rep}, confluent/tuned, load {os.getloadavg()}")
                print(
                    f"drain: {n:,} records in {secs:.2f} s ({n / secs:,.0f}/s), "
                    f"CPU {got['cpu_s']:.2f} s",
                    f"\nFetch responses: {len(tl['bytes']):,}, bytes {_spread(tl['bytes'])}",
                    f"\ntimeline ms (librdkafka's ms stamps): Fetch in flight "
                    f"{_spread(tl['in_flight'])}",
                    f"\n  response received -> next Fetch sent {_spread(tl['gap'])}",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
