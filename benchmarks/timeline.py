"""A member's group requests as they crossed the wire: what was sent when, and the answer.

Why: a join that takes longer than a peer's is explained by its request timeline
(which JoinGroup/SyncGroup/Heartbeat went out when, and what the coordinator said),
not by guesses.  aiogroup and aiokafka both send every request through
``aiokafka.client.AIOKafkaClient.send``; :func:`install` wraps that one method in the
member process so both clients are traced the same way, with no change to either.
Only group coordination APIs are reported (fetches would drown them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

#: API key -> name, for the group coordination APIs worth a line in a timeline.
GROUP_APIS = {
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    68: "ConsumerGroupHeartbeat",
}

Emit = Callable[..., None]

#: The process's emitter once :func:`install` ran (librdkafka's log lines report through it).
_emit: Emit | None = None

#: librdkafka's ``debug=cgrp`` lines as it sends a heartbeat: classic, consumer protocol.
_RDKAFKA_HEARTBEATS = (
    ("Heartbeat for group", "Heartbeat"),
    ("ConsumerGroupHeartbeat of member", "ConsumerGroupHeartbeat"),
)


def librdkafka_options() -> dict[str, Any]:
    """confluent-kafka options that report its heartbeats as ``req`` events.

    librdkafka's requests cannot be wrapped from Python, but with ``debug=cgrp`` it
    logs a line as it sends each heartbeat; the logger turns that line into a
    ``Heartbeat`` event (sent = answered = the moment the line arrived; the answer's
    code is not in it).  Empty unless :func:`install` ran in this process.
    """
    emit = _emit
    if emit is None:
        return {}
    import logging

    class _Heartbeats(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            for marker, api in _RDKAFKA_HEARTBEATS:
                if marker in message:
                    now = time.monotonic()
                    emit_ = emit
                    assert emit_ is not None
                    emit_("req", api=api, sent=now, answered=now, error=None)

    logger = logging.getLogger("benchmarks.timeline.librdkafka")
    if not logger.handlers:
        logger.addHandler(_Heartbeats())
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    return {"debug": "cgrp", "logger": logger}


def api_name(request: Any) -> str | None:
    """The group API a request belongs to, or None for anything else (fetch, metadata)."""
    key = getattr(request, "API_KEY", None)
    if not isinstance(key, int):
        key = getattr(type(request), "API_KEY", None)
    return GROUP_APIS.get(key) if isinstance(key, int) else None


def error_code(response: Any) -> int | None:
    """The top-level error code of an answer (None where the answer has none)."""
    code = getattr(response, "error_code", None)
    if isinstance(code, int):
        return code
    try:
        obj = response.to_object()
    except Exception:
        return None
    code = obj.get("error_code") if isinstance(obj, dict) else None
    return code if isinstance(code, int) else None


def install(emit: Emit) -> None:
    """Report every group request of this process as ``req`` events through ``emit``.

    ``emit("req", api=..., sent=..., answered=..., error=...)``: ``sent`` when the
    client was asked to send (``time.monotonic()``), ``answered`` when the answer (or
    the failure, ``error`` then names it) came back.
    """
    global _emit
    _emit = emit
    from aiokafka.client import AIOKafkaClient

    original = AIOKafkaClient.send
    if getattr(original, "_timeline", False):
        return

    async def send(self: Any, node_id: int, request: Any, **kwargs: Any) -> Any:
        name = api_name(request)
        if name is None:
            return await original(self, node_id, request, **kwargs)
        sent = time.monotonic()
        try:
            response = await original(self, node_id, request, **kwargs)
        except BaseException as exc:
            emit("req", api=name, sent=sent, answered=time.monotonic(), error=type(exc).__name__)
            raise
        emit("req", api=name, sent=sent, answered=time.monotonic(), error=error_code(response))
        return response

    send._timeline = True  # type: ignore[attr-defined]
    AIOKafkaClient.send = send  # type: ignore[method-assign]


def window(
    events: list[dict[str, Any]], start: float, end: float, origin: float
) -> list[list[Any]]:
    """The ``req`` events overlapping [start, end] as ``[api, sent, answered, error]`` rows,
    times in seconds from ``origin`` (rounded to the millisecond)."""
    rows = []
    for e in events:
        if e.get("ev") != "req" or e["answered"] < start or e["sent"] > end:
            continue
        rows.append(
            [e["api"], round(e["sent"] - origin, 3), round(e["answered"] - origin, 3), e["error"]]
        )
    return rows
