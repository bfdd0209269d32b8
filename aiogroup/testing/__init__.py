"""Test support shipped with aiogroup: a real broker, pytest fixtures, and an
ownership-history checker that judges a group from outside its members.

``KafkaBroker`` (async) and ``SyncKafkaBroker`` start a broker as described in
:mod:`aiogroup.testing.broker`; the pytest plugin (registered through the
``pytest11`` entry point) offers ``kafka_broker`` and ``kafka_topic`` to any
project that installs aiogroup.  ``python -m aiogroup.testing`` runs one by hand.

Names are imported lazily so that ``python -m aiogroup.testing.broker`` does not
import the module twice (runpy's RuntimeWarning).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiogroup.testing.broker import (
        BrokerStartError,
        KafkaBroker,
        SyncKafkaBroker,
        tansu_binary,
        unique_name,
    )
    from aiogroup.testing.caps import BrokerCaps
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
    "BrokerCaps",
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

_HISTORY = {"Event", "HistoryError", "HistoryRecorder", "HistoryReport", "MemberRecorder"}
_HISTORY |= {"check_history", "load_history"}


def _home(name: str) -> str:
    if name == "BrokerCaps":
        return "aiogroup.testing.caps"
    return "aiogroup.testing.history" if name in _HISTORY else "aiogroup.testing.broker"


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module(_home(name)), name)
    raise AttributeError(f"module 'aiogroup.testing' has no attribute {name!r}")
