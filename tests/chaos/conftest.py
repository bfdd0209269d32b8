"""The chaos suite: group faults judged by the ownership-history checker.

``make chaos`` runs every scenario over several seeds (``AIOGROUP_CHAOS_SEEDS``,
e.g. ``1,2,3``, and ``AIOGROUP_CHAOS=full``); ``make test`` runs the bounded subset:
one seed, and only the scenarios not marked ``chaos_long``.  A long scenario left
out of ``make test`` is deselected (it is reported as such), never skipped.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# The shared group pieces live next to the integration tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "integration"))


def seeds() -> list[int]:
    raw = os.environ.get("AIOGROUP_CHAOS_SEEDS", "1")
    try:
        return [int(s) for s in raw.split(",") if s.strip()]
    except ValueError:
        raise pytest.UsageError(f"AIOGROUP_CHAOS_SEEDS must be integers, got {raw!r}") from None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "chaos_long: a chaos scenario only `make chaos` runs")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "seed" in metafunc.fixturenames:
        metafunc.parametrize("seed", seeds(), ids=lambda s: f"seed{s}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("AIOGROUP_CHAOS", "").lower() == "full":
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("chaos_long") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
