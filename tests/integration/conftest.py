"""Fixtures shared by the integration tests that speak the group API by hand."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from aiokafka import AIOKafkaClient


@pytest_asyncio.fixture(loop_scope="function")
async def client(bootstrap_servers: str) -> AsyncIterator[AIOKafkaClient]:
    """A bare aiokafka connection to the test broker, on the test's own loop."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=20000)
    await client.bootstrap()
    try:
        yield client
    finally:
        await client.close()
