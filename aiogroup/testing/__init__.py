"""Test support shipped with aiogroup: a real broker, pytest fixtures, and an
ownership-history checker that judges a group from outside its members.

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
from aiogroup.testing.history import (
    Event,
    HistoryError,
    HistoryRecorder,
    HistoryReport,
    MemberRecorder,
    check_history,
    load_history,
)

__all__ = [
    "BrokerStartError",
    "Event",
    "HistoryError",
    "HistoryRecorder",
    "HistoryReport",
    "KafkaBroker",
    "MemberRecorder",
    "SyncKafkaBroker",
    "check_history",
    "load_history",
    "tansu_binary",
    "unique_name",
]
