"""Regenerate the parts of the docs that are derived from code (``make docs``).

Today that is the membership state diagram in docs/architecture.md, drawn from the
machine's own transition table so the docs cannot drift from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aiogroup._membership.machine import mermaid_diagram

ARCHITECTURE = Path(__file__).with_name("architecture.md")
BEGIN = "<!-- BEGIN GENERATED: membership diagram -->"
END = "<!-- END GENERATED: membership diagram -->"


def render(text: str) -> str:
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n```mermaid\n{mermaid_diagram().rstrip()}\n```\n{END}{tail}"


def main() -> int:
    old = ARCHITECTURE.read_text()
    new = render(old)
    if new != old:
        ARCHITECTURE.write_text(new)
        print(f"updated {ARCHITECTURE}")
    else:
        print(f"{ARCHITECTURE} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
