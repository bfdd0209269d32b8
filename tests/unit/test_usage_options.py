"""docs/usage.md's options table lists every option with its real default (issue 31)."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from aiogroup.config import ConsumerConfig

USAGE = Path(__file__).resolve().parents[2] / "docs" / "usage.md"


def options_table() -> dict[str, str]:
    text = USAGE.read_text()
    section = text[text.index("## Configuration") : text.index("The details, in prose:")]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"`[a-z_]+`", cells[0]):
            rows[cells[0].strip("`")] = cells[1].strip("`")
    return rows


def test_every_option_is_in_the_table_with_its_default() -> None:
    rows = options_table()
    fields = {f.name: f for f in dataclasses.fields(ConsumerConfig) if f.name != "client_options"}
    assert set(rows) == set(fields), set(rows) ^ set(fields)
    defaults = ConsumerConfig()
    for name in fields:
        assert ast.literal_eval(rows[name]) == getattr(defaults, name), name
