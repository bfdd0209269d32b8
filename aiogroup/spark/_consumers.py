"""The one place the Spark integration constructs consumers.

Both the group member (streaming-source process) and the executors' range readers
are aiogroup ``GroupConsumer`` objects; keeping construction here means options are
translated and checked the same way for both.
"""

from __future__ import annotations

from typing import Any

from aiokafka.client import AIOKafkaClient

from aiogroup.consumer import GroupConsumer
from aiogroup.listeners import AsyncConsumerRebalanceListener
from aiogroup.spark.options import SourceOptions

__all__ = ["new_client", "new_consumer", "subscribe"]


def new_consumer(options: SourceOptions, **kwargs: Any) -> GroupConsumer:
    """A not-yet-started GroupConsumer built from keyword options, with the TLS context
    of ``options`` made here: contexts do not pickle, so each process builds its own."""
    context = options.ssl_context()
    if context is not None:
        kwargs["ssl_context"] = context
    return GroupConsumer(**kwargs)


def new_client(options: SourceOptions) -> AIOKafkaClient:
    """A bare aiokafka client (the member's watermark probes), secured as the consumer."""
    kwargs = options.client_kwargs()
    context = options.ssl_context()
    if context is not None:
        kwargs["ssl_context"] = context
    return AIOKafkaClient(**kwargs)


def subscribe(
    consumer: GroupConsumer,
    topics: tuple[str, ...],
    pattern: str | None,
    listener: AsyncConsumerRebalanceListener,
) -> None:
    if pattern is not None:
        consumer.subscribe(pattern=pattern, listener=listener)
    else:
        consumer.subscribe(topics=list(topics), listener=listener)
