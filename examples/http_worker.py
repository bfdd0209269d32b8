"""A worker whose handler calls an HTTP service per record, many at a time.

    # the service (any HTTP endpoint will do; this file carries a small one):
    python -m uvicorn http_worker:service --app-dir examples --port 8000
    # the worker:
    KAFKA_BOOTSTRAP=localhost:9092 TOPIC=orders GROUP_ID=order-http \\
        SERVICE_URL=http://127.0.0.1:8000 CONCURRENCY=100 python examples/http_worker.py

One record at a time, a handler that waits 5 ms on the network does 200 records a
second however many partitions the member owns.  ``Processor`` runs up to
``CONCURRENCY`` handlers at once while keeping the records of one key in offset
order, and commits per partition only the first record not yet finished - so a
crash repeats only the calls that had not completed (at least once: the service
should treat ``(topic, partition, offset)`` as an idempotency key).

A failed call (connection error, 5xx) is retried with backoff; a record that still
fails after every attempt stops the worker (``ProcessingError``), nothing committed
past it.  SIGTERM/SIGINT stop the processor: in-flight calls finish, their offsets
are committed, then the consumer leaves the group.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from collections import defaultdict
from typing import Any

import httpx

from aiogroup import ConsumerRecord, GroupConsumer, Processor, RetryPolicy

log = logging.getLogger("http_worker")


def make_handler(http: httpx.AsyncClient) -> Any:
    """The per-record work: POST the record, fail (and so retry) on anything but 2xx."""

    async def handle(record: ConsumerRecord) -> None:
        response = await http.post(
            "/records",
            json={
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "key": None if record.key is None else record.key.decode(),
                "value": None if record.value is None else record.value.decode(),
            },
        )
        response.raise_for_status()

    return handle


async def run(stop: asyncio.Event) -> None:
    concurrency = int(os.environ.get("CONCURRENCY", "100"))
    consumer = GroupConsumer(
        os.environ.get("TOPIC", "orders"),
        bootstrap_servers=os.environ.get("KAFKA_BOOTSTRAP", "localhost:9092"),
        group_id=os.environ.get("GROUP_ID", "order-http"),
        enable_auto_commit=False,  # the processor commits what is finished
        auto_offset_reset="earliest",
    )
    # One connection per handler that may be in flight; a timeout so no call hangs.
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(
        base_url=os.environ.get("SERVICE_URL", "http://127.0.0.1:8000"),
        limits=limits,
        timeout=10.0,
    ) as http:
        await consumer.start()
        processor = Processor(
            consumer,
            make_handler(http),
            concurrency=concurrency,
            ordering="key",
            retry=RetryPolicy(attempts=5, backoff_ms=50, max_backoff_ms=1000),
            on_failure="stop",
            record_timeout_ms=15_000,
            commit_interval_ms=int(os.environ.get("COMMIT_INTERVAL_MS", "1000")),
        )
        print("ready", flush=True)
        running = asyncio.ensure_future(processor.run())
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not running.done():
                await processor.stop()  # drains, commits
            await running  # re-raises a ProcessingError
        finally:
            stopping.cancel()
            print(f"metrics {json.dumps(processor.metrics(), default=str)}", flush=True)
            await consumer.stop()
            print("stopped", flush=True)


def main() -> None:
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "WARNING"))

    async def entry() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run(stop)

    asyncio.run(entry())


# -- the service the worker calls (a stand-in for yours) -------------------------------------


class RecordService:
    """A minimal ASGI app: ``POST /records`` stores a record (after ``SERVICE_DELAY_MS``,
    default 5, to stand for real work); ``GET /seen`` says what arrived and how often.
    ``SERVICE_FAIL_FIRST=n`` answers 503 to the first n calls, to show the retries."""

    def __init__(self) -> None:
        self.delay = float(os.environ.get("SERVICE_DELAY_MS", "5")) / 1000
        self.fail_first = int(os.environ.get("SERVICE_FAIL_FIRST", "0"))
        self.calls = 0
        #: (topic, partition, offset) -> times stored
        self.seen: dict[tuple[str, int, int], int] = defaultdict(int)
        #: key -> offsets in the order they arrived
        self.by_key: dict[str, list[int]] = defaultdict(list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        if scope["method"] == "POST" and scope["path"] == "/records":
            body = b""
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
            self.calls += 1
            if self.calls <= self.fail_first:
                await self._reply(send, 503, {"error": "warming up"})
                return
            await asyncio.sleep(self.delay)
            doc = json.loads(body)
            self.seen[(doc["topic"], doc["partition"], doc["offset"])] += 1
            self.by_key[str(doc["key"])].append(doc["offset"])
            await self._reply(send, 200, {"ok": True})
        elif scope["method"] == "GET" and scope["path"] == "/seen":
            await self._reply(
                send,
                200,
                {
                    "calls": self.calls,
                    "records": [[t, p, o, n] for (t, p, o), n in sorted(self.seen.items())],
                    "by_key": self.by_key,
                },
            )
        else:
            await self._reply(send, 404, {"error": "not found"})

    @staticmethod
    async def _reply(send: Any, status: int, doc: object) -> None:
        body = json.dumps(doc).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


service = RecordService()


if __name__ == "__main__":
    main()
