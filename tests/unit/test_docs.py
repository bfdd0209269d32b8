"""docs/architecture.md shows the membership diagram generated from the live table."""

from __future__ import annotations

import importlib.util
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_architecture_diagram_matches_the_transition_table() -> None:
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (DOCS / "architecture.md").read_text()
    assert module.render(text) == text, "docs/architecture.md is stale: run `make docs`"
    assert "stateDiagram-v2" in text
