"""GroupConsumer against AIOKafkaConsumer, compared programmatically with docs/usage.md.

Every public method, constructor option and default of aiokafka's consumer must exist
in aiogroup with the same parameters and defaults, unless the parity table in
docs/usage.md lists the difference with its reason; and every row of the table must
still be a real difference (a stale row fails too).
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer

from aiogroup import GroupConsumer

USAGE = Path(__file__).resolve().parents[2] / "docs" / "usage.md"
DUNDERS = ("__aiter__", "__anext__", "__aenter__", "__aexit__")


def parity_table() -> dict[tuple[str, str], str]:
    text = USAGE.read_text()
    section = text.split("## aiokafka parity", 1)[1].split("\n## ", 1)[0]
    rows: dict[tuple[str, str], str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] in ("kind", "---"):
            continue
        kind, name, _, _, why = cells
        assert why, f"row {name} gives no reason"
        rows[(kind, name.strip("`"))] = why
    return rows


def public(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_") or n in DUNDERS}


def params(func: Any) -> list[tuple[str, Any, Any]]:
    sig = inspect.signature(func)
    return [(p.name, p.kind, p.default) for p in sig.parameters.values()]


def differences() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    ours, theirs = public(GroupConsumer), public(AIOKafkaConsumer)
    found |= {("method", n) for n in ours - theirs}
    found |= {("missing method", n) for n in theirs - ours}
    for name in ours & theirs:
        a, b = getattr(AIOKafkaConsumer, name), getattr(GroupConsumer, name)
        if callable(a) != callable(b):
            found.add(("signature", name))
        elif callable(a) and params(a) != params(b):
            found.add(("signature", name))
    k_init = inspect.signature(AIOKafkaConsumer.__init__).parameters
    g_init = inspect.signature(GroupConsumer.__init__).parameters
    found |= {("option", n) for n in g_init if n not in k_init}
    found |= {("missing option", n) for n in k_init if n not in g_init}
    for name in set(k_init) & set(g_init):
        if k_init[name].default != g_init[name].default:
            found.add(("default", name))
    return found


def test_every_difference_is_in_the_parity_table_with_a_reason() -> None:
    listed = {key for key in parity_table() if key[0] != "behaviour"}
    found = differences()
    assert not {k for k in found if k[0].startswith("missing")}, "aiokafka API missing"
    assert found - listed == set(), "undocumented differences"
    assert listed - found == set(), "rows that are no longer differences"


def test_behaviour_rows_name_real_api() -> None:
    ours = public(GroupConsumer) | set(inspect.signature(GroupConsumer.__init__).parameters)
    for kind, name in parity_table():
        if kind != "behaviour":
            continue
        words = re.findall(r"[a-z_]+", name)
        assert any(w in ours or w.endswith("Error") for w in words) or "Error" in name, name
