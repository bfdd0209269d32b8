"""Registry of benchmarked clients: name -> module, imported only when used.

Lazy imports keep a missing or unfinished client from breaking the others: its
configurations are reported as "not available" with the reason.
"""

from __future__ import annotations

import importlib

from benchmarks.adapters.base import Adapter, NotAvailable, Variant

#: client name -> module defining ``ADAPTER`` (an Adapter subclass) and ``VARIANTS``.
CLIENTS: dict[str, str] = {
    "aiogroup": "benchmarks.adapters.aiogroup_consumer",
    "aiokafka": "benchmarks.adapters.aiokafka_consumer",
    "kafka-python": "benchmarks.adapters.kafka_python_consumer",
    "confluent": "benchmarks.adapters.confluent_consumer",
    "confluent-aio": "benchmarks.adapters.confluent_aio_consumer",
}


def variants(client: str) -> dict[str, Variant]:
    module = importlib.import_module(CLIENTS[client])
    table: dict[str, Variant] = module.VARIANTS
    return table


def make(client: str, variant: str, bootstrap_servers: str) -> Adapter:
    """Build an adapter; raises NotAvailable with the reason if the client cannot run."""
    if client not in CLIENTS:
        raise ValueError(f"unknown client {client!r}; known: {', '.join(CLIENTS)}")
    module = importlib.import_module(CLIENTS[client])
    table: dict[str, Variant] = module.VARIANTS
    if variant not in table:
        raise ValueError(f"{client} has no variant {variant!r}; known: {', '.join(table)}")
    check = getattr(module, "check_available", None)
    if check is not None:
        check()
    adapter: Adapter = module.ADAPTER(bootstrap_servers, table[variant])
    return adapter


__all__ = ["CLIENTS", "Adapter", "NotAvailable", "Variant", "make", "variants"]
