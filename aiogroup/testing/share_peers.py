"""Share-group (KIP-932) peers and broker helpers: other clients in one share group.

Why: issue 28 asks that aiogroup's share consumer work in one share group with
Apache Kafka's own Java share consumer and with confluent-kafka's
``ShareConsumer``, and that its throughput be compared with theirs.  This module
runs those peers against a test broker and turns what each can show into
:mod:`aiogroup.testing.share_checker` events, so one history - aiogroup's
consumers, the peers and the broker's final view - is judged by one checker.

* :class:`JavaSharePeer` - Kafka's ``VerifiableShareConsumer`` (kafka-tools, a JVM
  per peer): JSON lines on stdout for every record it got and every
  acknowledgement it committed.  It shows no delivery count (None in the history)
  and stamps wall-clock milliseconds, shifted here onto ``time.monotonic()``.  Its
  ``--ack-pattern`` decides each record's acknowledgement by ``offset % len``.
* :class:`ConfluentSharePeer` - confluent-kafka's ``ShareConsumer`` (librdkafka,
  2.15+) in a thread, explicit acknowledgement, one ``commit_sync`` per poll; it
  shows each record's delivery count.  It has no RENEW.
* :func:`java_share_perf` - ``ShareConsumerPerformance`` (the
  ``kafka-share-consumer-perf-test`` tool): records/s of N Java share consumers;
  :func:`confluent_share_rate` the same measure for N confluent-kafka ones.
* :func:`configure_share_group` sets a group's ``share.*`` configs
  (IncrementalAlterConfigs on the GROUP resource): tests want
  ``share.auto.offset.reset=earliest`` (the default is latest: records produced
  before the group's first member are never seen) and locks / sessions of seconds.
* :func:`share_offsets` / :func:`record_broker_view`: the broker's start offsets and
  lag (DescribeShareGroupOffsets v1), the checker's ``broker_start`` events.

What a peer's history can claim is bounded by what the client shows: a peer's
``acquired`` is stamped when its poll returned, and its ``sent`` is when that
poll was called - a client that fetched ahead (librdkafka, the Java client) took
the lock earlier still, so the checker's sure end of the lock is later than the
truth by up to one poll; ``lock_ms`` is the group's configured lock.  An ack's
``t`` is when the commit was called (the earliest the broker can have applied it).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiogroup.testing.kafka import java_binary, kafka_tools
from aiogroup.testing.share_checker import AckType, ShareRecorder

__all__ = [
    "ConfluentSharePeer",
    "JavaSharePeer",
    "PerfResult",
    "configure_share_group",
    "confluent_share_rate",
    "java_share_perf",
    "record_broker_view",
    "share_offsets",
]

#: The JVM options of a peer: small heap, quick start (the machines have 2 cores).
_JVM = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
_LOG4J2 = "status = error\nrootLogger.level = WARN\n"


async def configure_share_group(
    bootstrap_servers: str,
    group: str,
    *,
    auto_offset_reset: str | None = "earliest",
    lock_ms: int | None = None,
    session_ms: int | None = None,
    heartbeat_ms: int | None = None,
    delivery_limit: int | None = None,
    timeout: float = 30.0,
) -> None:
    """Set a share group's own configs before (or while) it runs.

    Retries while the group coordinator is not available yet (a fresh broker
    creates ``__consumer_offsets`` on the first FindCoordinator); any other
    refusal - a value outside the broker's bounds - is raised with its message.
    """
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

    from aiogroup._protocol.share_admin import AlterGroupConfigsRequest, parse_alter_group_configs

    configs: dict[str, str | None] = {}
    if heartbeat_ms is not None:  # before the session: a session must exceed it
        configs["share.heartbeat.interval.ms"] = str(heartbeat_ms)
    for name, value in (
        ("share.session.timeout.ms", session_ms),
        ("share.record.lock.duration.ms", lock_ms),
        ("share.delivery.count.limit", delivery_limit),
        ("share.auto.offset.reset", auto_offset_reset),
    ):
        if value is not None:
            configs[name] = str(value)
    if not configs:
        raise ValueError("configure_share_group: name at least one config")
    deadline = time.monotonic() + timeout
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=10_000)
    await admin.start()
    try:
        while True:
            try:
                node = await admin.find_coordinator(group)
                code, message = parse_alter_group_configs(
                    await admin._client.send(node, AlterGroupConfigsRequest(group, configs))
                )
            except KafkaError as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"configure {group}: {exc!r} for {timeout}s") from exc
                await asyncio.sleep(0.3)
                continue
            if code in _RETRIABLE and time.monotonic() < deadline:
                await asyncio.sleep(0.3)
                continue
            if code:
                raise RuntimeError(f"configure share group {group} {configs}: {code} {message}")
            return
    finally:
        await admin.close()


#: Coordinator errors that asking again cures (loading, moving, not yet elected).
_RETRIABLE = (14, 15, 16)


async def share_offsets(bootstrap_servers: str, group: str, timeout: float = 30.0) -> list[Any]:
    """The group's share-partition start offsets and lag (``ShareStartOffset`` rows),
    asking again while the coordinator is loading or moving (a fresh broker's is)."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.errors import KafkaError

    from aiogroup._protocol.share_admin import (
        DescribeShareGroupOffsetsRequest,
        parse_describe_share_group_offsets,
    )

    deadline = time.monotonic() + timeout
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=10_000)
    await admin.start()
    try:
        while True:
            try:
                node = await admin.find_coordinator(group)
                result = parse_describe_share_group_offsets(
                    await admin._client.send(node, DescribeShareGroupOffsetsRequest(group))
                )
            except KafkaError as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"share offsets of {group}: {exc!r}") from exc
                await asyncio.sleep(0.3)
                continue
            if result.error_code in _RETRIABLE and time.monotonic() < deadline:
                await asyncio.sleep(0.3)
                continue
            if result.error_code:
                raise RuntimeError(
                    f"share offsets of {group}: {result.error_code} {result.error_message}"
                )
            return list(result.rows)
    finally:
        await admin.close()


async def record_broker_view(recorder: ShareRecorder, bootstrap_servers: str, group: str) -> None:
    """Append the broker's start offsets and lag to ``recorder`` (after a run).

    A partition whose share state is not initialized yet (start offset -1: the group
    has not read it) says nothing and is left out."""
    for row in await share_offsets(bootstrap_servers, group):
        if row.start_offset >= 0:
            recorder.broker_start(row.topic, row.partition, row.start_offset, row.lag)


# -- Java: VerifiableShareConsumer ----------------------------------------------------------


@dataclass
class JavaSharePeer:
    """Kafka's ``VerifiableShareConsumer`` as a share-group member, in its own JVM.

    ``ack_pattern`` ("accept,release", ...) selects explicit acknowledgement (sync
    commits); empty: implicit, every record accepted on the next poll.  Events go to
    ``recorder`` under ``name`` as the JVM reports them (:meth:`pump` reads them; a
    reader thread calls it while the peer runs).
    """

    name: str
    bootstrap_servers: str
    topic: str
    group: str
    recorder: ShareRecorder
    lock_ms: int
    ack_pattern: Sequence[AckType] = ()
    max_messages: int = -1
    #: Parsed JSON events, in order (for the test's own assertions).
    events: list[dict[str, Any]] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _reader: threading.Thread | None = field(default=None, repr=False)
    _last_poll: float = field(default=0.0, repr=False)
    _clock_shift: float = field(default=0.0, repr=False)
    _dir: Path | None = field(default=None, repr=False)

    def start(self) -> JavaSharePeer:
        self._dir = Path(tempfile.mkdtemp(prefix=f"aiogroup-{self.name}-"))
        (self._dir / "log4j2.properties").write_text(_LOG4J2)
        args = [
            "--bootstrap-server",
            self.bootstrap_servers,
            "--topic",
            self.topic,
            "--group-id",
            self.group,
            "--verbose",
            "--max-messages",
            str(self.max_messages),
        ]
        if self.ack_pattern:
            args += ["--acknowledgement-mode", "sync", "--ack-pattern", ",".join(self.ack_pattern)]
        self._clock_shift = time.monotonic() - time.time()
        self._last_poll = time.monotonic()
        self.process = subprocess.Popen(
            [
                java_binary(),
                *_JVM,
                f"-Dlog4j2.configurationFile={self._dir / 'log4j2.properties'}",
                "-cp",
                f"{kafka_tools()}/*",
                "org.apache.kafka.tools.VerifiableShareConsumer",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=(self._dir / "stderr.log").open("wb"),
            cwd=self._dir,
        )
        self._reader = threading.Thread(target=self._read, name=self.name, daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        for raw in self.process.stdout:
            self.pump(raw.decode(errors="replace"))

    def pump(self, line: str) -> None:
        """Turn one line of the JVM's output into history events."""
        line = line.strip()
        if not line.startswith("{"):
            return
        try:
            doc = json.loads(line)
        except ValueError:
            return
        self.events.append(doc)
        t = self._clock_shift + float(doc.get("timestamp", time.time() * 1000)) / 1000.0
        name = doc.get("name")
        if name == "record_data":
            self.recorder.acquired(
                self.name,
                str(doc["topic"]),
                int(doc["partition"]),
                int(doc["offset"]),
                None,
                sent=min(self._last_poll, t),
                lock_ms=self.lock_ms,
                t=t,
            )
        elif name == "records_consumed":
            self._last_poll = t
        elif name == "offsets_acknowledged":
            result = "ok" if doc.get("success") else str(doc.get("error", "error"))
            for part in doc.get("partitions", ()):
                for offset in part.get("offsets", ()):
                    self.recorder.acknowledged(
                        self.name,
                        str(part["topic"]),
                        int(part["partition"]),
                        int(offset),
                        self.ack_for(int(offset)),
                        sent=self._last_poll,
                        result=result,
                        answered=t,
                    )

    def ack_for(self, offset: int) -> AckType:
        """The acknowledgement the tool sends for ``offset`` (implicit mode: accept)."""
        if not self.ack_pattern:
            return "accept"
        return self.ack_pattern[offset % len(self.ack_pattern)]

    def kill(self) -> None:
        """kill -9: the records it holds stay locked until their lock times out."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.recorder.add(self.name, "crashed")
            self.process.wait(10)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM: the tool closes its consumer cleanly (acks, leaves the group)."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.recorder.add(self.name, "closed")
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self._reader is not None:
            self._reader.join(5)
        return self.process.returncode

    def wait(self, timeout: float) -> int:
        """Until the JVM exits by itself (``max_messages`` reached); then its status."""
        assert self.process is not None
        code = self.process.wait(timeout)
        if self._reader is not None:
            self._reader.join(5)
        return code

    def stderr_tail(self, chars: int = 2000) -> str:
        if self._dir is None or not (self._dir / "stderr.log").exists():
            return ""
        return (self._dir / "stderr.log").read_text(errors="replace")[-chars:]

    def cleanup(self) -> None:
        """Remove the peer's working directory (its stderr log) once the test is done."""
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)

    def consumed(self) -> list[tuple[str, int, int]]:
        return [
            (str(d["topic"]), int(d["partition"]), int(d["offset"]))
            for d in self.events
            if d.get("name") == "record_data"
        ]


# -- confluent-kafka ShareConsumer ------------------------------------------------------------


@dataclass
class ConfluentSharePeer:
    """confluent-kafka's ``ShareConsumer`` (explicit acknowledgement) in a thread.

    ``decide(topic, partition, offset, delivery_count)`` picks each record's
    acknowledgement ("accept" by default); ``handle_s`` is a handler's time per
    record (a sleep: the peer stands for an application that works).  Every
    acknowledgement is committed with ``commit_sync`` before the next poll.
    """

    name: str
    bootstrap_servers: str
    topic: str
    group: str
    recorder: ShareRecorder
    lock_ms: int
    decide: Callable[[str, int, int, int | None], AckType] | None = None
    handle_s: float = 0.0
    config: Mapping[str, Any] = field(default_factory=dict)
    consumed: list[tuple[str, int, int, int | None]] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)

    def start(self) -> ConfluentSharePeer:
        self._thread = threading.Thread(target=self._guarded, name=self.name, daemon=True)
        self._thread.start()
        return self

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported to the test, never swallowed
            self.errors.append(exc)

    def _run(self) -> None:
        import confluent_kafka

        if not hasattr(confluent_kafka, "ShareConsumer"):
            raise RuntimeError(
                f"confluent-kafka {confluent_kafka.version()[0]} has no ShareConsumer (2.15+)"
            )
        types = {
            "accept": confluent_kafka.AcknowledgeType.ACCEPT,
            "release": confluent_kafka.AcknowledgeType.RELEASE,
            "reject": confluent_kafka.AcknowledgeType.REJECT,
        }
        consumer = confluent_kafka.ShareConsumer(
            {
                "bootstrap.servers": self.bootstrap_servers,
                "group.id": self.group,
                "client.id": self.name,
                "share.acknowledgement.mode": "explicit",
                **self.config,
            }
        )
        consumer.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                called = time.monotonic()
                messages = consumer.poll(0.5)
                got = time.monotonic()
                pending: list[tuple[str, int, int, AckType]] = []
                batch = [m for m in messages if m.error() is None]
                # The whole batch is the consumer's from the poll on: recorded before any
                # handling, so a kill -9 mid-batch leaves its holds in the history.
                for msg in batch:
                    record = (str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0))
                    count = msg.delivery_count()
                    self.consumed.append((*record, count))
                    self.recorder.acquired(
                        self.name, *record, count, sent=called, lock_ms=self.lock_ms, t=got
                    )
                for msg in batch:
                    if self._stop.is_set():
                        break  # what is left goes back with the close
                    record = (str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0))
                    count = msg.delivery_count()
                    if self.handle_s:
                        if self._stop.wait(self.handle_s):
                            break  # stopped mid-record: it goes back with the close
                    ack = self.decide(*record, count) if self.decide else "accept"
                    consumer.acknowledge(msg, types[ack])
                    pending.append((*record, ack))
                if pending:
                    self._commit(consumer, pending)
        finally:
            self.recorder.add(self.name, "closed")
            consumer.close()

    def _commit(self, consumer: Any, pending: list[tuple[str, int, int, AckType]]) -> None:
        import confluent_kafka

        sent = time.monotonic()
        failed: BaseException | None = None
        try:
            results = consumer.commit_sync(30)
        except confluent_kafka.KafkaException as refused:  # the whole commit refused
            results, failed = {}, refused
        at = time.monotonic()
        answers = {(tp.topic, tp.partition): exc for tp, exc in (results or {}).items()}
        for topic, partition, offset, ack in pending:
            # A partition the answer leaves out was not acknowledged as far as the
            # application can tell (librdkafka drops acknowledgements it cannot send,
            # e.g. after its member was fenced): "unknown", never "ok".
            if failed is not None:
                result = _error_name(failed)
            elif (topic, partition) not in answers:
                result = "unknown"
            else:
                error = answers[(topic, partition)]
                result = "ok" if error is None else _error_name(error)
            self.recorder.acknowledged(
                self.name,
                topic,
                partition,
                offset,
                ack,
                sent=sent,
                result=result,
                answered=at,
            )

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()


def _error_name(exc: BaseException) -> str:
    err = exc.args[0] if exc.args else None
    name = getattr(err, "name", None)
    return str(name() if callable(name) else exc)


# -- Java: ShareConsumerPerformance ------------------------------------------------------------


@dataclass(frozen=True)
class PerfResult:
    """One ``ShareConsumerPerformance`` run: records and the tool's own rate."""

    records: int
    seconds: float
    records_per_s: float
    #: Wall time of the whole JVM run (start-up and group join included).
    wall_seconds: float
    #: Seconds from the start to the first record, where the runner knows it (the join
    #: and the first fetch: how much of ``seconds`` is start-up).
    first_seconds: float | None = None


def java_share_perf(
    bootstrap_servers: str,
    topic: str,
    group: str,
    records: int,
    *,
    threads: int = 1,
    timeout_s: float = 120.0,
    properties: Mapping[str, str] | None = None,
) -> PerfResult:
    """Run Kafka's share-consumer perf test (``kafka-share-consumer-perf-test``):
    ``threads`` Java share consumers in one JVM read ``records`` records.

    The group must read from the earliest record (:func:`configure_share_group`).
    The tool's rate counts from its start to its last record (the join included).
    ``properties``: consumer properties passed as the tool's ``--command-property``
    (for example ``share.acquire.mode``).
    """
    props: list[str] = []
    for key, value in (properties or {}).items():
        props += ["--command-property", f"{key}={value}"]
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="aiogroup-share-perf-") as tmp:
        (Path(tmp) / "log4j2.properties").write_text(_LOG4J2)
        out = subprocess.run(
            [
                java_binary(),
                # A measurement: the full JIT (the peers' quick-start options are C1 only).
                "-Xmx512m",
                f"-Dlog4j2.configurationFile={Path(tmp) / 'log4j2.properties'}",
                "-cp",
                f"{kafka_tools()}/*",
                "org.apache.kafka.tools.ShareConsumerPerformance",
                "--bootstrap-server",
                bootstrap_servers,
                "--topic",
                topic,
                "--group",
                group,
                "--num-records",
                str(records),
                "--threads",
                str(threads),
                "--timeout",
                str(int(timeout_s * 1000)),
                *props,
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s + 60,
            check=False,
            cwd=tmp,
        )
    wall = time.monotonic() - began
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) >= 7 and re.fullmatch(r"\d+", cells[5]):
            return PerfResult(int(cells[5]), int(cells[6]) / 1000.0, float(cells[4]), wall)
    raise RuntimeError(
        f"ShareConsumerPerformance printed no result (exit {out.returncode}):\n"
        f"{out.stdout[-1500:]}\n{out.stderr[-1500:]}"
    )


def confluent_share_rate(
    bootstrap_servers: str,
    topic: str,
    group: str,
    records: int,
    *,
    consumers: int = 1,
    handle_s: float = 0.0,
    timeout_s: float = 120.0,
    max_poll_records: int | None = None,
) -> PerfResult:
    """``consumers`` confluent-kafka share consumers (implicit acknowledgement, one
    thread each) read ``records`` records between them; measured as
    :func:`java_share_perf` measures (from the consumers' creation to the last record,
    the join included; ``first_seconds`` says when the first record came).
    ``handle_s`` sleeps per record: a handler that works.  ``max_poll_records``:
    librdkafka's (its ShareFetch's MaxRecords and BatchSize; None: its default, 500).
    """
    import confluent_kafka

    lock = threading.Lock()
    got = [0]
    first: list[float] = []
    done = threading.Event()
    errors: list[BaseException] = []
    config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, "group.id": group}
    if max_poll_records is not None:
        config["max.poll.records"] = max_poll_records

    def count(n: int) -> None:
        with lock:
            if n and not first:
                first.append(time.monotonic())
            got[0] += n
            if got[0] >= records:
                done.set()

    def run(n: int) -> None:
        try:
            consumer = confluent_kafka.ShareConsumer(config | {"client.id": f"confluent-perf-{n}"})
            consumer.subscribe([topic])
            try:
                while not done.is_set():
                    batch = [m for m in consumer.poll(0.2) if m.error() is None]
                    if not handle_s:  # counted per poll, as aiogroup's runner counts
                        count(len(batch))
                        continue
                    for _ in batch:
                        time.sleep(handle_s)
                        count(1)
                        if done.is_set():
                            break
            finally:
                consumer.close()
        except BaseException as exc:  # reported below
            errors.append(exc)
            done.set()

    began = time.monotonic()
    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(consumers)]
    for thread in threads:
        thread.start()
    finished = done.wait(timeout_s)
    seconds = time.monotonic() - began
    for thread in threads:
        thread.join(30)
    if errors:
        raise errors[0]
    if not finished:
        raise TimeoutError(f"{consumers} confluent share consumer(s) read {got[0]} of {records}")
    first_seconds = first[0] - began if first else None
    return PerfResult(got[0], seconds, got[0] / seconds, time.monotonic() - began, first_seconds)


def _main(argv: Sequence[str] | None = None) -> None:
    """``python -m aiogroup.testing.share_peers BOOTSTRAP TOPIC GROUP NAME HISTORY
    --lock-ms N [--handle-s S]``: one confluent-kafka share consumer in its own process,
    appending its share history to HISTORY, until SIGTERM (a clean close) or kill -9."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m aiogroup.testing.share_peers")
    for name in ("bootstrap", "topic", "group", "name", "history"):
        parser.add_argument(name)
    parser.add_argument("--lock-ms", type=int, required=True)
    parser.add_argument("--handle-s", type=float, default=0.0)
    args = parser.parse_args(argv)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with ShareRecorder(args.history) as recorder:
        peer = ConfluentSharePeer(
            args.name,
            args.bootstrap,
            args.topic,
            args.group,
            recorder,
            lock_ms=args.lock_ms,
            handle_s=args.handle_s,
        ).start()
        while not stop.wait(0.2) and peer.running:
            pass
        peer.stop()
    if peer.errors:
        raise SystemExit(f"{args.name}: {peer.errors[0]!r}")


if __name__ == "__main__":
    _main()
