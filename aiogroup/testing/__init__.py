"""Test support shipped with aiogroup: a real broker and pytest fixtures.

``KafkaBroker`` (async) and ``SyncKafkaBroker`` start a broker as described in
:mod:`aiogroup.testing.broker`; the pytest plugin (registered through the
``pytest11`` entry point) offers ``kafka_broker`` and ``kafka_topic`` to any
project that installs aiogroup.
"""

from aiogroup.testing.broker import (
    BrokerStartError,
    KafkaBroker,
    SyncKafkaBroker,
    tansu_binary,
    unique_name,
)

__all__ = ["BrokerStartError", "KafkaBroker", "SyncKafkaBroker", "tansu_binary", "unique_name"]
