"""pytest fixtures: one broker per test session, unique topics and groups per test."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import pytest

from aiogroup.testing.broker import KafkaBroker, unique_name
from aiogroup.testing.kafka import KafkaCluster

TopicFactory = Callable[..., Awaitable[str]]


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """A running broker for the whole session (started on first use, stopped at the end).

    ``AIOGROUP_BROKER`` picks it (embedded Tansu, ``kafka``, ``kafka-cluster``, ``docker``);
    ``kafka_broker.caps`` says how it behaves where brokers differ.

    Started on a private event loop so that it can outlive every test's own loop;
    its methods open fresh connections, so they may be awaited from any test loop.
    """
    broker = KafkaBroker()
    # On this (the main) thread: a broker process's parent-death signal follows the
    # thread that started it, and asyncio.run's executor threads end with the run.
    asyncio.run(broker.start())
    try:
        yield broker
    finally:
        asyncio.run(broker.stop())


@pytest.fixture
def kafka_topic(kafka_broker: KafkaBroker) -> TopicFactory:
    """``await kafka_topic(partitions=3)`` creates a uniquely named, metadata-visible topic."""

    async def create(partitions: int = 1, name: str | None = None) -> str:
        return await kafka_broker.create_topic(name or unique_name("topic"), partitions)

    return create


@pytest.fixture
def group_id() -> str:
    """A consumer-group id no other test uses."""
    return unique_name("group")


@pytest.fixture
def bootstrap_servers(kafka_broker: KafkaBroker) -> str:
    return kafka_broker.bootstrap_servers


@pytest.fixture(scope="session")
def secure_kafka() -> Iterator[KafkaCluster]:
    """A secured Apache Kafka node for the session (started on first use): SASL_SSL with
    SCRAM-SHA-512 (and PLAIN) on ``secure_bootstrap_servers``, OAUTHBEARER with unsecured
    JWTs on ``oauth_bootstrap_servers``, and the ``StandardAuthorizer``.

    ``secure_kafka.client_options("alice")`` gives GroupConsumer keyword arguments;
    ``secure_kafka.security.passwords`` the SCRAM users' passwords (admin is a super
    user); ``aiogroup.testing.secure.grant``/``revoke`` change ACLs over
    ``secure_kafka.bootstrap_servers`` (the fixture's own plaintext admin listener);
    ``await secure_kafka.create_topic(name, partitions)``.  Needs Java 17+ and the
    Kafka jars (``make install``), whatever ``AIOGROUP_BROKER`` says.
    """
    cluster = KafkaCluster(secure=True)
    asyncio.run(cluster.start())  # on the main thread: see kafka_broker
    try:
        yield cluster
    finally:
        asyncio.run(cluster.stop())
