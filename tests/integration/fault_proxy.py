"""A TCP proxy between one consumer and the broker, for faults a real network has.

* ``pause()`` / ``resume()`` stop and restart forwarding in both directions with the
  connections left open - a stalled network: requests time out, sessions expire;
* ``cut()`` closes every connection at once (the listener stays) - a reset network;
* ``inject_heartbeat_error(code)`` rewrites the error code of the next Heartbeat
  responses on the wire, so the consumer's real code path sees e.g.
  UNKNOWN_MEMBER_ID exactly as if the broker had said it.

Only the consumer's *addressing* is redirected (``proxied_client_class``): every byte
still travels through real sockets to the real broker.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import struct
from collections.abc import Iterator
from typing import Any

from aiokafka.client import AIOKafkaClient

HEARTBEAT_API_KEY = 12
LEAVE_GROUP_API_KEY = 13


class FaultProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self.upstream = (upstream_host, upstream_port)
        self._server: asyncio.Server | None = None
        self._running = asyncio.Event()
        self._running.set()
        self._pumps: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._heartbeat_errors: list[int] = []
        self.injected = 0
        #: requests seen on the wire, by API key
        self.requests: collections.Counter[int] = collections.Counter()
        self._seen: collections.defaultdict[int, asyncio.Event] = collections.defaultdict(
            asyncio.Event
        )
        self.port = 0

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for pump in self._pumps:
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            await self._server.wait_closed()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def cut(self) -> None:
        """Close every connection now (the listener stays): the clients must reconnect."""
        for writer in self._writers:
            writer.close()
        self._writers.clear()

    def inject_heartbeat_error(self, code: int, times: int = 1) -> None:
        self._heartbeat_errors.extend([code] * times)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._writers.update((writer, up_writer))
        inflight: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        for pump in (
            self._pump(reader, up_writer, lambda frame: self._note_request(frame, inflight)),
            self._pump(up_reader, writer, lambda frame: self._rewrite_response(frame, inflight)),
        ):
            task = asyncio.get_running_loop().create_task(pump)
            self._pumps.add(task)
            task.add_done_callback(self._pumps.discard)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, edit: Any
    ) -> None:
        try:
            while True:
                header = await reader.readexactly(4)
                (size,) = struct.unpack(">i", header)
                payload = await reader.readexactly(size)
                await self._running.wait()
                writer.write(header + edit(payload))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _note_request(self, payload: bytes, inflight: dict[int, tuple[int, int]]) -> bytes:
        api_key, version, correlation = struct.unpack(">hhi", payload[:8])
        inflight[correlation] = (api_key, version)
        self.requests[api_key] += 1
        self._seen[api_key].set()
        return payload

    async def wait_for_request(self, api_key: int) -> None:
        """Until a request of this API has gone through (at any time since start)."""
        await self._seen[api_key].wait()

    def _rewrite_response(self, payload: bytes, inflight: dict[int, tuple[int, int]]) -> bytes:
        (correlation,) = struct.unpack(">i", payload[:4])
        api_key, version = inflight.pop(correlation, (-1, -1))
        if api_key != HEARTBEAT_API_KEY or not self._heartbeat_errors:
            return payload
        code = self._heartbeat_errors.pop(0)
        # response header (+1 tagged-fields byte from v4), throttle_time_ms from v1
        offset = 4 + (1 if version >= 4 else 0) + (4 if version >= 1 else 0)
        self.injected += 1
        return payload[:offset] + struct.pack(">h", code) + payload[offset + 2 :]


_ROUTES: dict[str, FaultProxy] = {}


class ProxiedClient(AIOKafkaClient):  # type: ignore[misc]
    """An aiokafka client whose connections go through the proxy registered for its client_id."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        proxy = _ROUTES.get(kwargs.get("client_id", ""))
        if proxy is None:
            return
        original = self.cluster.broker_metadata

        def broker_metadata(node_id: Any) -> Any:
            meta = original(node_id)
            if meta is None:
                return None
            return meta._replace(host="127.0.0.1", port=proxy.port)

        self.cluster.broker_metadata = broker_metadata


@contextlib.contextmanager
def route(client_id: str, proxy: FaultProxy) -> Iterator[None]:
    _ROUTES[client_id] = proxy
    try:
        yield
    finally:
        _ROUTES.pop(client_id, None)
