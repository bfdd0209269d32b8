"""pytest fixtures: one broker per test session, unique topics and groups per test."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator

import pytest

from aiogroup.testing.broker import KafkaBroker, unique_name

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
