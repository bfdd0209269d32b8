"""pytest plugin: record which state-triggered rules fire from which state.

Loaded by ``test_state_rules.py`` into a pytest run of the membership unit suite; the
(source state, rule name) pairs seen are written as JSON to ``$AIOGROUP_RULES_OUT``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from aiogroup._membership import machine

_SEEN: set[tuple[str, str]] = set()
_real = machine.Membership._advance_once


def _recording(self: machine.Membership, out: list[Any]) -> machine.StateRule | None:
    source = self.state
    rule = _real(self, out)
    if rule is not None:
        _SEEN.add((source.value, rule.name))
    return rule


def pytest_configure(config: Any) -> None:
    machine.Membership._advance_once = _recording  # type: ignore[method-assign]


def pytest_unconfigure(config: Any) -> None:
    machine.Membership._advance_once = _real  # type: ignore[method-assign]
    path = os.environ.get("AIOGROUP_RULES_OUT")
    if path:
        with open(path, "w") as f:
            json.dump(sorted(_SEEN), f)
