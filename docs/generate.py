"""Regenerate the parts of the docs that are derived from code (``make docs``).

Today that is the membership state diagrams in docs/architecture.md - the classic
machine's, the consumer-protocol (KIP-848) machine's and the share-group (KIP-932)
machine's - each drawn from the machine's own tables so the docs cannot drift from
the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

from aiogroup._membership import consumer_group, share_group
from aiogroup._membership.machine import mermaid_diagram

ARCHITECTURE = Path(__file__).with_name("architecture.md")
BEGIN = "<!-- BEGIN GENERATED: membership diagram -->"
END = "<!-- END GENERATED: membership diagram -->"
CONSUMER_BEGIN = "<!-- BEGIN GENERATED: consumer-protocol diagram -->"
CONSUMER_END = "<!-- END GENERATED: consumer-protocol diagram -->"
SHARE_BEGIN = "<!-- BEGIN GENERATED: share-group diagram -->"
SHARE_END = "<!-- END GENERATED: share-group diagram -->"


def _replace(text: str, begin: str, end: str, diagram: str) -> str:
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n```mermaid\n{diagram.rstrip()}\n```\n{end}{tail}"


def render(text: str) -> str:
    text = _replace(text, BEGIN, END, mermaid_diagram())
    if CONSUMER_BEGIN in text:
        text = _replace(text, CONSUMER_BEGIN, CONSUMER_END, consumer_group.mermaid_diagram())
    if SHARE_BEGIN in text:
        text = _replace(text, SHARE_BEGIN, SHARE_END, share_group.mermaid_diagram())
    return text


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
