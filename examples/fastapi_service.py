"""A FastAPI service that consumes a topic in the background.

    KAFKA_BOOTSTRAP=localhost:9092 TOPIC=orders GROUP_ID=order-api \\
        uvicorn fastapi_service:app --app-dir examples

* the consumer starts and stops with the app (FastAPI lifespan); ``start()`` returns
  once the member has its partitions, so the app is ready when it answers;
* ``GET /health`` is the readiness probe (503 until joined, or while the broker is
  unreachable), ``GET /live`` the liveness probe, ``GET /metrics`` Prometheus text;
* offsets are committed after the records are processed (at least once);
* SIGTERM (what Kubernetes sends): uvicorn runs the lifespan's shutdown, which stops
  taking batches, finishes and commits the one in hand, and leaves the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse

from aiogroup import GroupConsumer

try:  # the /metrics endpoint needs aiogroup[prometheus]
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

    from aiogroup.prometheus import register_prometheus
except ImportError:  # pragma: no cover
    CollectorRegistry = None

processed: list[tuple[str, int, int]] = []


async def process(value: bytes | None) -> None:
    """The service's work for one record."""
    await asyncio.sleep(0)


async def consume(consumer: GroupConsumer, stop: asyncio.Event) -> None:
    while not stop.is_set():
        batch = await consumer.getmany(timeout_ms=500)
        for records in batch.values():
            for record in records:
                await process(record.value)
                processed.append((record.topic, record.partition, record.offset))
        if batch:
            await consumer.commit({tp: records[-1].offset + 1 for tp, records in batch.items()})


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    consumer = GroupConsumer(
        os.environ.get("TOPIC", "orders"),
        bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP", "localhost:9092"),
        group_id=os.environ.get("GROUP_ID", "order-api"),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    app.state.consumer = consumer
    if CollectorRegistry is not None:
        app.state.registry = CollectorRegistry()
        register_prometheus(consumer, app.state.registry)
    stop = asyncio.Event()
    worker = asyncio.create_task(consume(consumer, stop))
    try:
        yield
    finally:
        stop.set()  # finish the batch in hand, commit it
        with contextlib.suppress(Exception):
            await asyncio.wait_for(worker, 30)
        await consumer.stop()  # leave the group: partitions move at once


app = FastAPI(lifespan=lifespan)


@app.get("/health")
async def health() -> JSONResponse:
    state = app.state.consumer.health()
    return JSONResponse(state.as_dict(), status_code=200 if state.ready else 503)


@app.get("/live")
async def live() -> JSONResponse:
    state = app.state.consumer.health()
    return JSONResponse(state.as_dict(), status_code=200 if state.live else 503)


@app.get("/metrics")
async def metrics() -> Response:
    if CollectorRegistry is None:
        return JSONResponse(app.state.consumer.metrics().as_dict())
    return Response(generate_latest(app.state.registry), media_type=CONTENT_TYPE_LATEST)


@app.get("/processed")
async def processed_count() -> dict[str, Any]:
    return {"count": len(processed)}
