"""Apache Kafka 4 in KRaft mode, from the jars ``make install`` fetched with Maven.

Why: Apache Kafka is the broker users run, so it is the reference the integration
tier must pass on (issue 13).  There is no Docker engine on the development
machines, so the broker runs as plain JVMs from ``.kafka/<version>/libs`` (filled by
``maven/pom.xml``; nothing is downloaded at test time).

One node is a combined broker + controller; a cluster is three such nodes with a
static controller quorum, replication factor 3 and ``min.insync.replicas`` 2.  Each
node's storage is formatted in a temporary directory (``kafka.tools.StorageTool``),
listens on free loopback ports and runs with a bounded heap.  The configuration is
what a user's broker has, except the test-only settings in :data:`TEST_SETTINGS`.

``KafkaCluster(secure=True)`` adds a SASL_SSL (SCRAM-SHA-512) and an OAUTHBEARER
listener and the ``StandardAuthorizer`` (:mod:`aiogroup.testing.secure`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aiogroup.testing.process import kill, spawn_owned, terminate
from aiogroup.testing.secure import SecureSetup

log = logging.getLogger("aiogroup.testing.kafka")

__all__ = [
    "KAFKA_VERSION",
    "SHARE_TEST_SETTINGS",
    "TEST_SETTINGS",
    "KafkaCluster",
    "KafkaNode",
    "KafkaSetupError",
    "broker_rack",
    "java_binary",
    "kafka_libs",
    "kafka_tools",
]

#: The Apache Kafka release maven/pom.xml fetches (tests/unit checks they agree).
KAFKA_VERSION = "4.4.0"

#: Share groups (KIP-932, issue 28).  Kafka 4.4 needs no switch for them: a cluster
#: formatted by 4.4 finalizes ``share.version`` 2 and ``group.coordinator.rebalance.
#: protocols`` (deprecated) lists "share" by default.  What the tests need is time:
#: the floors below let a test's group ask for a session and a record lock of
#: seconds (``share.session.timeout.ms`` / ``share.record.lock.duration.ms`` group
#: configs; floors 45 s and 15 s by default), so a kill -9 or a SIGSTOP scenario
#: ends in seconds.  The broker-wide defaults stay a user's (lock 30 s, delivery
#: limit 5).  A group's ``share.auto.offset.reset`` is a group config too (default
#: latest); tests set it to earliest per group (``aiogroup._protocol.share_admin.
#: AlterGroupConfigsRequest``), as ``kafka-configs --entity-type groups`` does.
SHARE_TEST_SETTINGS: Mapping[str, str] = {
    "group.share.min.session.timeout.ms": "3000",
    "group.share.min.heartbeat.interval.ms": "500",
    # A group's session must exceed its heartbeat interval, which defaults to the
    # broker's (5 s): 1 s lets a group ask for a 3 s session.
    "group.share.heartbeat.interval.ms": "1000",
    "group.share.min.record.lock.duration.ms": "1000",
    "group.share.min.delivery.count.limit": "2",
}

#: Where a broker departs from a user's defaults, and why (all test-only).
TEST_SETTINGS: Mapping[str, str] = {
    # A new group's first rebalance waits this long for more members (default 3 s);
    # every test makes new groups.
    "group.initial.rebalance.delay.ms": "0",
    # Consumer-protocol (KIP-848) groups: the broker owns session and heartbeat
    # interval (defaults 45 s / 5 s, floors 45 s / 5 s); crash and slow-listener
    # tests need a session of seconds, like the classic tests' 6 s.
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.heartbeat.interval.ms": "1000",
    # Online migration of a live classic group to the consumer protocol (and back when
    # the last KIP-848 member leaves): Kafka 4's default, stated so the migration
    # scenario does not hang on a default a later release may change.
    "group.consumer.migration.policy": "bidirectional",
    # Classic groups: the floor is 6 s by default; the bounded slow-listener chaos
    # cases (make test) run with a 3 s session to stay short.
    "group.min.session.timeout.ms": "3000",
    # A single node cannot hold 3 replicas of the internal topics (cluster: 3).
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    **SHARE_TEST_SETTINGS,
}

#: The cluster mode's replication settings (what a production cluster has).
CLUSTER_SETTINGS: Mapping[str, str] = {
    "group.initial.rebalance.delay.ms": "0",
    # Consumer-protocol groups: a session of seconds, as in TEST_SETTINGS.
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "500",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.migration.policy": "bidirectional",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "share.coordinator.state.topic.replication.factor": "3",
    "share.coordinator.state.topic.min.isr": "2",
    **SHARE_TEST_SETTINGS,
    # Racks (KIP-392): each node is its own rack (``rack-<node id>``, see
    # :func:`broker_rack`), and leaders name a same-rack follower to consumers that
    # send their rack, as a multi-zone production cluster is set up.
    "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
}


def broker_rack(node_id: int) -> str:
    """The ``broker.rack`` of a cluster-mode node."""
    return f"rack-{node_id}"


#: Bounded heap per node; C1-only JIT and the serial collector start fastest on the
#: 2-core CI machines.  ``AIOGROUP_KAFKA_JVM_OPTS`` replaces these.
DEFAULT_JVM_OPTS = (
    "-Xms128m",
    "-Xmx512m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
)

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


class KafkaSetupError(RuntimeError):
    """Something Apache Kafka mode needs is missing; the message says what to do."""


def java_binary() -> str:
    """``$JAVA_HOME/bin/java`` or ``java`` on PATH, checked to be Java 17 or newer."""
    home = os.environ.get("JAVA_HOME")
    candidate = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not candidate or not os.access(candidate, os.X_OK):
        raise KafkaSetupError(
            "kafka mode: no Java on this machine (install Java 17+ or set JAVA_HOME)"
        )
    out = subprocess.run(
        [candidate, "-version"], capture_output=True, text=True, timeout=30, check=False
    )
    found = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    major = int(found.group(1)) if found else 0
    if major == 1 and found and found.group(2):  # "1.8.0_x" is Java 8
        major = int(found.group(2))
    if major < 17:
        raise KafkaSetupError(f"kafka mode: {candidate} is Java {major or '?'}; Kafka 4 needs 17+")
    return candidate


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    """The directory of Kafka's jars: ``AIOGROUP_KAFKA_LIBS``, else ``.kafka/<version>/libs``
    in the working directory or in the source checkout this module belongs to."""
    override = os.environ.get("AIOGROUP_KAFKA_LIBS")
    candidates = (
        [Path(override)]
        if override
        else [
            Path.cwd() / ".kafka" / version / "libs",
            Path(__file__).resolve().parents[2] / ".kafka" / version / "libs",
        ]
    )
    for path in candidates:
        if (path / f"kafka_2.13-{version}.jar").exists():
            return path
    raise KafkaSetupError(
        f"kafka mode: Apache Kafka {version} jars not fetched (looked in "
        f"{', '.join(str(p) for p in candidates)}); run `make install` (needs Maven) "
        "or set AIOGROUP_KAFKA_LIBS"
    )


def kafka_tools(version: str = KAFKA_VERSION) -> Path:
    """The directory of Kafka's tools jars (``kafka-tools``: the console and verifiable
    share consumers, the share-consumer perf test): ``AIOGROUP_KAFKA_TOOLS``, else
    ``.kafka/<version>/tools`` beside :func:`kafka_libs`' candidates."""
    override = os.environ.get("AIOGROUP_KAFKA_TOOLS")
    candidates = (
        [Path(override)]
        if override
        else [
            Path.cwd() / ".kafka" / version / "tools",
            Path(__file__).resolve().parents[2] / ".kafka" / version / "tools",
        ]
    )
    for path in candidates:
        if (path / f"kafka-tools-{version}.jar").exists():
            return path
    raise KafkaSetupError(
        f"kafka mode: Apache Kafka {version} tools not fetched (looked in "
        f"{', '.join(str(p) for p in candidates)}); run `make install` (maven/fetch.sh "
        "fetches them with -Ptools) or set AIOGROUP_KAFKA_TOOLS"
    )


#: Starts tried when a node finds its port taken (see :meth:`KafkaCluster.start`).
START_ATTEMPTS = 3


def _port_taken(error: BaseException) -> bool:
    """A start failed because a node could not bind its port (its log tail says so)."""
    text = str(error)
    return "BindException" in text or "Address already in use" in text


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (held open together so none repeats)."""
    socks = []
    try:
        for _ in range(n):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _cluster_id() -> str:
    """What ``kafka-storage random-uuid`` prints: 16 random bytes, base64url, unpadded."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass
class KafkaNode:
    """One KRaft node (broker + controller) of a :class:`KafkaCluster`."""

    node_id: int
    port: int
    controller_port: int
    directory: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    #: Secure mode: the SASL_SSL (SCRAM-SHA-512) and the OAUTHBEARER listeners' ports.
    secure_port: int | None = None
    oauth_port: int | None = None

    @property
    def config_path(self) -> Path:
        return self.directory / "server.properties"

    @property
    def log_path(self) -> Path:
        return self.directory / "server.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return self.log_path.read_text(errors="replace")[-chars:]


@dataclass
class KafkaCluster:
    """``size`` Apache Kafka nodes on loopback, formatted and started by :meth:`start`.

    ``start`` formats every node's storage (in parallel) and starts the JVMs on the
    calling thread (their parent-death signal follows it); it returns once every
    node answers ApiVersions and metadata lists all of them.
    """

    size: int = 1
    start_timeout: float = 90.0
    settings: Mapping[str, str] = field(default_factory=dict)
    #: Add the SASL_SSL and OAUTHBEARER listeners and the authorizer (secure mode).
    secure: bool = False
    nodes: list[KafkaNode] = field(default_factory=list, init=False)
    #: Secure mode: the CA, the SCRAM users' passwords and the listener settings.
    security: SecureSetup | None = field(default=None, init=False, repr=False)
    _root: Path | None = field(default=None, init=False, repr=False)
    _java: str = field(default="", init=False, repr=False)
    _libs: Path | None = field(default=None, init=False, repr=False)
    startup_seconds: float = field(default=0.0, init=False)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(n.address for n in self.nodes)

    @property
    def secure_bootstrap_servers(self) -> str:
        """Secure mode: the SASL_SSL (SCRAM-SHA-512) listeners."""
        return ",".join(f"127.0.0.1:{n.secure_port}" for n in self.nodes)

    @property
    def oauth_bootstrap_servers(self) -> str:
        """Secure mode: the SASL_PLAINTEXT OAUTHBEARER listeners (unsecured JWTs)."""
        return ",".join(f"127.0.0.1:{n.oauth_port}" for n in self.nodes)

    def client_options(self, user: str) -> dict[str, object]:
        """Secure mode: GroupConsumer / aiokafka keyword arguments for a SCRAM ``user``
        (``bootstrap_servers`` included)."""
        if self.security is None:
            raise RuntimeError("client_options() needs KafkaCluster(secure=True)")
        return {
            "bootstrap_servers": self.secure_bootstrap_servers,
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": user,
            "sasl_plain_password": self.security.passwords[user],
            "ssl_context": self.security.ssl_context(),
        }

    @property
    def mode(self) -> str:
        base = "kafka" if self.size == 1 else "kafka-cluster"
        return f"secure-{base}" if self.secure else base

    def node(self, node_id: int) -> KafkaNode:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no Kafka node {node_id} (have {[n.node_id for n in self.nodes]})")

    # -- lifecycle -----------------------------------------------------------------

    async def start(self) -> KafkaCluster:
        """Format and launch every node, and wait until all answer.

        The ports are picked free and then released for the JVMs to bind seconds later;
        in between another process can take one (a parallel test worker's broker or a
        client's ephemeral port: it happened once in a fresh-clone CI, failing a whole
        tier).  A start whose node could not bind its port is tried again on new ports,
        up to ``START_ATTEMPTS`` times; any other failure is raised at once.
        """
        began = time.monotonic()
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                await self._start_once()
            except KafkaSetupError as exc:
                if attempt == START_ATTEMPTS or not _port_taken(exc):
                    raise
                log.warning(
                    "%s mode: a port was taken before the broker bound it; starting again "
                    "on new ports (attempt %d of %d)",
                    self.mode,
                    attempt + 1,
                    START_ATTEMPTS,
                )
                await self.stop()
                continue
            break
        self.startup_seconds = time.monotonic() - began
        return self

    async def _start_once(self) -> None:
        self._java = java_binary()
        self._libs = kafka_libs()
        self._root = Path(tempfile.mkdtemp(prefix=f"aiogroup-{self.mode}-"))
        ports = _free_ports(4 * self.size)
        self.nodes = [
            KafkaNode(
                i + 1,
                ports[4 * i],
                ports[4 * i + 1],
                self._root / f"node-{i + 1}",
                secure_port=ports[4 * i + 2] if self.secure else None,
                oauth_port=ports[4 * i + 3] if self.secure else None,
            )
            for i in range(self.size)
        ]
        try:
            if self.secure:
                self.security = SecureSetup.create(self._root / "tls")
            self._write_configs()
            await asyncio.get_running_loop().run_in_executor(None, self._format_all)
            for n in self.nodes:
                self._launch(n)
            await self.wait_ready()
        except BaseException:
            await self.stop(keep_logs=True)
            raise

    def _base_settings(self) -> dict[str, str]:
        base = dict(TEST_SETTINGS if self.size == 1 else CLUSTER_SETTINGS)
        base.update(self.settings)
        return base

    def _write_configs(self) -> None:
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        for n in self.nodes:
            n.directory.mkdir(parents=True)
            config = {
                "process.roles": "broker,controller",
                "node.id": str(n.node_id),
                "controller.quorum.voters": voters,
                "listeners": f"PLAINTEXT://{n.address},CONTROLLER://127.0.0.1:{n.controller_port}",
                "advertised.listeners": f"PLAINTEXT://{n.address}",
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "log.dirs": str(n.directory / "data"),
                **self._base_settings(),
            }
            if self.security is not None:
                assert n.secure_port is not None and n.oauth_port is not None
                secure = f"SECURE://127.0.0.1:{n.secure_port},OAUTH://127.0.0.1:{n.oauth_port}"
                config["listeners"] += "," + secure
                config["advertised.listeners"] += "," + secure
                config["listener.security.protocol.map"] += ",SECURE:SASL_SSL,OAUTH:SASL_PLAINTEXT"
                config.update(self.security.listeners())
            if self.size > 1:
                config.setdefault("broker.rack", broker_rack(n.node_id))
            n.config_path.write_text("".join(f"{k}={v}\n" for k, v in config.items()))
        assert self._root is not None
        (self._root / "log4j2.properties").write_text(_LOG4J2)

    def _java_command(self, main: str, *args: str, heap: bool = True) -> list[str]:
        assert self._root is not None and self._libs is not None
        opts = os.environ.get("AIOGROUP_KAFKA_JVM_OPTS")
        jvm = opts.split() if opts else list(DEFAULT_JVM_OPTS)
        if not heap:
            jvm = ["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
        return [
            self._java,
            *jvm,
            f"-Dlog4j2.configurationFile={self._root / 'log4j2.properties'}",
            "-cp",
            f"{self._libs}/*",
            main,
            *args,
        ]

    def _format_all(self) -> None:
        """``kafka-storage format`` for every node at once (one short JVM each)."""
        cluster_id = _cluster_id()
        running = []
        for n in self.nodes:
            cmd = self._java_command(
                "kafka.tools.StorageTool",
                "format",
                f"--cluster-id={cluster_id}",  # one argument: an id may start with "-"
                "--config",
                str(n.config_path),
                "--ignore-formatted",
                *(self.security.format_args() if self.security is not None else []),
                heap=False,
            )
            log = (n.directory / "format.log").open("wb")
            running.append((n, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log))
        for n, proc, log in running:
            code = proc.wait(timeout=120)
            log.close()
            if code != 0:
                text = (n.directory / "format.log").read_text(errors="replace")[-2000:]
                raise KafkaSetupError(
                    f"{self.mode} mode: formatting node {n.node_id}'s storage failed "
                    f"(exit {code}); log {n.directory / 'format.log'}:\n{text}"
                )

    def _launch(self, n: KafkaNode) -> None:
        with n.log_path.open("ab") as log:
            n.process = spawn_owned(
                self._java_command("kafka.Kafka", str(n.config_path)), log, cwd=n.directory
            )

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Until every running node answers ApiVersions and metadata lists them all."""
        from aiokafka.client import AIOKafkaClient

        deadline = time.monotonic() + (timeout if timeout is not None else self.start_timeout)
        live = [n for n in self.nodes if n.running]
        last_error: BaseException | None = None
        pending = list(live)
        while pending:
            for n in self.nodes:
                if n.process is not None and n.process.poll() is not None:
                    raise KafkaSetupError(
                        f"{self.mode} mode: node {n.node_id} exited with code "
                        f"{n.process.returncode}; log {n.log_path}:\n{n.log_tail()}"
                    )
            if time.monotonic() > deadline:
                n = pending[0]
                raise KafkaSetupError(
                    f"{self.mode} mode: node {n.node_id} at {n.address} did not answer within "
                    f"{timeout or self.start_timeout}s: {last_error!r}; log {n.log_path}:\n"
                    f"{n.log_tail()}"
                )
            n = pending[0]
            if not _listening(n.port):
                await asyncio.sleep(0.1)
                continue
            client = AIOKafkaClient(bootstrap_servers=n.address, request_timeout_ms=5000)
            try:
                await client.bootstrap()
                brokers = {b.nodeId for b in client.cluster.brokers()}
                if {m.node_id for m in live} <= brokers:
                    pending.pop(0)
                    continue
            except Exception as exc:
                last_error = exc
            finally:
                await client.close()
            await asyncio.sleep(0.2)

    async def kill_node(self, node_id: int) -> None:
        """SIGKILL one node: a crash, no controlled shutdown."""
        n = self.node(node_id)
        if n.process is not None:
            await asyncio.get_running_loop().run_in_executor(None, kill, n.process)

    async def stop_node(self, node_id: int, grace: float = 30.0) -> None:
        """SIGTERM one node and wait for its controlled shutdown (a rolling restart)."""
        n = self.node(node_id)
        if n.process is not None:
            await asyncio.get_running_loop().run_in_executor(None, terminate, n.process, grace)

    async def start_node(self, node_id: int, timeout: float | None = None) -> None:
        """Start a stopped node again on its storage and ports; wait until it is back."""
        n = self.node(node_id)
        if n.running:
            raise RuntimeError(f"Kafka node {node_id} is running")
        self._launch(n)
        await self.wait_ready(timeout)

    async def stop(self, keep_logs: bool = False) -> None:
        """Stop every node (SIGTERM, SIGKILL after 5 s) and remove the storage.

        ``keep_logs`` (after a failed start) leaves the directory for the error message.
        """
        procs = [n.process for n in self.nodes if n.process is not None]
        for n in self.nodes:
            n.process = None
        if procs:
            loop = asyncio.get_running_loop()
            await asyncio.gather(*(loop.run_in_executor(None, terminate, p, 5.0) for p in procs))
        if self._root is not None and not keep_logs and not os.environ.get("AIOGROUP_KEEP_LOGS"):
            with contextlib.suppress(OSError):
                shutil.rmtree(self._root)

    async def create_topic(self, name: str, partitions: int = 1, timeout: float = 30.0) -> str:
        """Create a topic over the administrative listener; return once every partition
        has a leader in metadata (replication factor: 1, or 3 in a cluster)."""
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic
        from aiokafka.client import AIOKafkaClient
        from aiokafka.structs import TopicPartition

        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(name, partitions, min(3, self.size))])
        finally:
            await admin.close()
        client = AIOKafkaClient(bootstrap_servers=self.bootstrap_servers)
        await client.bootstrap()
        try:
            deadline = time.monotonic() + timeout
            while True:
                cluster = await client.fetch_all_metadata()
                found = cluster.partitions_for_topic(name) or set()
                if len(found) == partitions and all(
                    cluster.leader_for_partition(TopicPartition(name, p)) not in (None, -1)
                    for p in found
                ):
                    return name
                if time.monotonic() > deadline:
                    raise TimeoutError(f"topic {name} not in metadata after {timeout}s")
                await asyncio.sleep(0.1)
        finally:
            await client.close()

    @property
    def root(self) -> Path | None:
        """The temporary directory holding every node's config, data and log."""
        return self._root


def _listening(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0
