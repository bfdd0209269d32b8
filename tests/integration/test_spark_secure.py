"""The Spark source and ``ingest()`` against the secured Apache Kafka node (issue 30):
SCRAM-SHA-512 over SASL_SSL, trust from the node's throwaway CA as PEM.

The source gets what a user of Spark's own Kafka source writes - ``kafka.security.protocol``,
``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.location`` with
``kafka.ssl.truststore.type=PEM`` - so the driver's group member, its watermark client and
every executor reader build their TLS context from those strings.  Judged from outside:
the sink's rows against what was produced, and the group's commits read over the node's
administrative listener.  The password is checked absent from what Spark shows of the
query (its plan, progress, errors).

Apache Kafka only (``caps.supports_secure_listeners``); in the Spark serial group by path
(tests/conftest.py): one JVM per module.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark  # noqa: F401  (the spark extra: a missing install fails here)
import pytest
from aiokafka import AIOKafkaProducer
from spark_session import new_session

from aiogroup import GroupConsumer, TopicPartition
from aiogroup.cli import Admin
from aiogroup.spark import BatchInfo, ingest, register
from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.kafka import KafkaCluster
from aiogroup.testing.secure import AclOperation, ResourceType, grant

pytestmark = [pytest.mark.integration, pytest.mark.spark]

PARTITIONS = 3
RECORDS = 600
USER = "alice"
GROUP_PREFIX = "spark-sec-"


class Secured:
    def __init__(self, cluster: KafkaCluster, topic: str, ends: dict[TopicPartition, int]):
        self.cluster = cluster
        self.topic = topic
        self.ends = ends

    @property
    def password(self) -> str:
        assert self.cluster.security is not None
        return self.cluster.security.passwords[USER]

    def source_options(self, group: str) -> dict[str, str]:
        """The options a Spark Kafka-source user writes (Java client names)."""
        assert self.cluster.security is not None
        return {
            "kafka.bootstrap.servers": self.cluster.secure_bootstrap_servers,
            "kafka.group.id": group,
            "subscribe": self.topic,
            "startingOffsets": "earliest",
            "kafka.session.timeout.ms": "6000",
            "kafka.heartbeat.interval.ms": "1000",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{USER}" password="{self.password}";'
            ),
            "kafka.ssl.truststore.location": str(self.cluster.security.ca_path),
            "kafka.ssl.truststore.type": "PEM",
        }

    async def committed(self, group: str) -> dict[TopicPartition, int]:
        async with Admin(self.cluster.bootstrap_servers) as admin:
            return await admin.committed(group)


async def _prepare(cluster: KafkaCluster) -> Secured:
    topic = await cluster.create_topic(unique_name("spark-sec"), PARTITIONS)
    producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, str(i).encode(), partition=i % PARTITIONS)
            for i in range(RECORDS)
        ]
        results = await asyncio.gather(*futures)
    finally:
        await producer.stop()
    ends: dict[TopicPartition, int] = {}
    for meta in results:
        tp = TopicPartition(topic, meta.partition)
        ends[tp] = max(ends.get(tp, 0), meta.offset + 1)
    principal = f"User:{USER}"
    await grant(cluster.bootstrap_servers, principal, ResourceType.TOPIC, topic, AclOperation.READ)
    await grant(
        cluster.bootstrap_servers,
        principal,
        ResourceType.GROUP,
        GROUP_PREFIX,
        AclOperation.READ,
        prefixed=True,
    )
    return Secured(cluster, topic, ends)


@pytest.fixture(scope="module")
def secured(kafka_broker: KafkaBroker, request: pytest.FixtureRequest) -> Secured:
    if not kafka_broker.caps.supports_secure_listeners:
        pytest.skip(
            "not applicable: the embedded Tansu fixture runs without TLS, SASL or an "
            "authorizer (caps.supports_secure_listeners); the Apache Kafka tier runs these"
        )
    cluster: KafkaCluster = request.getfixturevalue("secure_kafka")
    return asyncio.run(_prepare(cluster))


@pytest.fixture(scope="module")
def spark(secured: Secured) -> Iterator[Any]:
    session = new_session("aiogroup-spark-secure-tests")
    register(session)
    yield session
    session.stop()


def _expected(secured: Secured) -> list[bytes]:
    return sorted(str(i).encode() for i in range(RECORDS))


def test_source_over_sasl_ssl_with_scram_lands_every_record_and_commits(
    spark: Any, secured: Secured, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """availableNow over SASL_SSL: every record once in the sink, the group's commits at
    the ends; the password in neither the plan, the progress nor the query's error."""
    group = unique_name(GROUP_PREFIX + "source")
    reader = spark.readStream.format("aiogroup")
    for key, value in secured.source_options(group).items():
        reader = reader.option(key, value)
    frame = reader.load()
    frame.explain(extended=True)
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180), "availableNow query did not finish"
    assert query.exception() is None, query.exception()
    shown = [
        str(query.lastProgress),
        str(query.recentProgress),
        str(query.status),
        capsys.readouterr().out,  # the plan, as explain() printed it
    ]
    rows = spark.read.parquet(str(tmp_path / "out")).select("partition", "offset", "value")
    got = [(r.partition, r.offset, bytes(r.value)) for r in rows.collect()]
    assert len(got) == RECORDS and len({(p, o) for p, o, _ in got}) == RECORDS
    assert sorted(v for _, _, v in got) == _expected(secured)
    assert asyncio.run(secured.committed(group)) == secured.ends
    assert "Logical Plan" in shown[-1], "explain() printed the plan the scan reads"
    for text in shown:
        assert secured.password not in text


async def test_ingest_with_a_secure_member_delivers_every_record_and_commits(
    spark: Any, secured: Secured
) -> None:
    """ingest() takes the application's GroupConsumer: its SASL_SSL options carry."""
    group = unique_name(GROUP_PREFIX + "ingest")
    options = dict(secured.cluster.client_options(USER))
    consumer = GroupConsumer(
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=6000,
        heartbeat_interval_ms=1000,
        **options,
    )
    loop = asyncio.get_running_loop()
    lock = threading.Lock()
    rows: list[tuple[int, int, bytes]] = []
    done = asyncio.Event()
    stop = asyncio.Event()

    def handle(df: Any, info: BatchInfo) -> None:
        batch = df.select("partition", "offset", "value").collect()
        with lock:
            rows.extend((r.partition, r.offset, bytes(r.value)) for r in batch)
            if len(rows) >= RECORDS:
                loop.call_soon_threadsafe(done.set)

    await consumer.start()
    try:
        task = loop.create_task(
            ingest(
                consumer,
                spark,
                handle,
                topics=[secured.topic],
                max_records=250,
                max_interval=0.5,
                stop=stop,
            )
        )
        try:
            await asyncio.wait_for(done.wait(), 120)
            # The last batch's commit follows its function: wait for the broker to hold it.
            deadline = time.monotonic() + 30
            while await secured.committed(group) != secured.ends:
                assert time.monotonic() < deadline, await secured.committed(group)
                await asyncio.sleep(0.2)
        finally:
            stop.set()
            progress = await asyncio.wait_for(task, 60)
        conns = list(consumer._client._conns.values())  # type: ignore[union-attr]
        assert conns and all(c._security_protocol == "SASL_SSL" for c in conns)
    finally:
        await consumer.stop()
    assert sorted(v for _, _, v in rows) == _expected(secured)
    assert len({(p, o) for p, o, _ in rows}) == RECORDS
    assert progress.records >= RECORDS, progress
    assert secured.password not in repr(progress)


def test_source_without_read_on_its_group_fails_the_query_naming_it(
    spark: Any, secured: Secured, tmp_path: Path
) -> None:
    """The principal lacks READ on the group: the query fails promptly with the member's
    error (the group and the missing permission named), not a wait for an assignment;
    the password appears nowhere in it."""
    group = unique_name("no-acl-spark")  # outside the granted prefix
    reader = spark.readStream.format("aiogroup")
    for key, value in secured.source_options(group).items():
        reader = reader.option(key, value)
    began = time.monotonic()
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    with pytest.raises(Exception) as caught:  # pyspark's StreamingQueryException
        query.awaitTermination(120)
    elapsed = time.monotonic() - began
    message = str(caught.value)
    assert "GroupAuthorizationFailedError" in message, message[-2000:]
    assert repr(group) in message and "READ" in message, message[-2000:]
    assert secured.password not in message
    assert elapsed < 60, elapsed  # the source's own start bound is 120 s
