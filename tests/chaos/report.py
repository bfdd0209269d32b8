"""Write the measured chaos figures into docs/reliability.md.

``python -m tests.chaos.report chaos-results.jsonl`` reads the rows the chaos
scenarios appended (one per judged run, see ``AIOGROUP_CHAOS_RESULTS``) and
replaces the generated table of docs/reliability.md: per scenario and broker, the
seeds run, faults injected, records checked, and what the checker found.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"
BEGIN = "<!-- BEGIN GENERATED: chaos figures -->"
END = "<!-- END GENERATED: chaos figures -->"

COLUMNS = [
    ("faults", "faults injected"),
    ("records_checked", "records checked"),
    ("rebalances", "rebalances"),
    ("overlaps", "overlaps"),
    ("lost", "lost"),
    ("duplicates", "duplicates"),
    ("disallowed_duplicates", "disallowed dups"),
    ("zombie_deliveries", "zombie records"),
    ("zombie_commits", "zombie commits"),
    ("evictions", "broker evictions"),
]


def table(rows: list[dict[str, Any]]) -> str:
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        grouped[(row["scenario"], row["broker"])].append(row)
    heads = " | ".join(h for _, h in COLUMNS)
    out = [
        f"| scenario | broker | seeds | {heads} |\n",
        f"|---|---|---|{'---|' * len(COLUMNS)}\n",
    ]
    for (scenario, broker), runs in sorted(grouped.items()):
        seeds = ",".join(str(r["seed"]) for r in sorted(runs, key=lambda r: r["seed"]))
        cells = " | ".join(f"{sum(r[k] for r in runs):,}" for k, _ in COLUMNS)
        out.append(f"| {scenario} | {broker} | {seeds} | {cells} |\n")
    return "".join(out)


#: The slow-listener family's liveness figures (issue 24), a table of their own.
LIVENESS_BEGIN = "<!-- BEGIN GENERATED: liveness figures -->"
LIVENESS_END = "<!-- END GENERATED: liveness figures -->"


def liveness_table(rows: list[dict[str, Any]]) -> str:
    """Per slow-listener case and broker: the listener's length, the settle time (B's
    start to the last ownership change) and the broker's rebalances for the join."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if "settle_s" in row:
            grouped[(row["scenario"], row["broker"])].append(row)
    out = [
        "| case | broker | seeds | listener s | settle s (max) | broker rebalances (max) |\n",
        "|---|---|---|---|---|---|\n",
    ]
    for (scenario, broker), runs in sorted(grouped.items()):
        seeds = ",".join(str(r["seed"]) for r in sorted(runs, key=lambda r: r["seed"]))
        settle = max(r["settle_s"] for r in runs)
        rebalances = max(r["broker_rebalances_after_join"] for r in runs)
        out.append(
            f"| {scenario} | {broker} | {seeds} | {runs[0]['listener_s']:g} | {settle:.1f} "
            f"| {rebalances} |\n"
        )
    return "".join(out)


def _replace(text: str, begin: str, end: str, body: str) -> str:
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}{end}{tail}"


def render(text: str, rows: list[dict[str, Any]]) -> str:
    text = _replace(text, BEGIN, END, table(rows))
    if LIVENESS_BEGIN in text:
        text = _replace(text, LIVENESS_BEGIN, LIVENESS_END, liveness_table(rows))
    return text


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m tests.chaos.report RESULTS.jsonl [...]", file=sys.stderr)
        return 2
    rows = []
    for path in argv[1:]:
        for line in Path(path).read_text().splitlines():
            if line.strip():
                rows.append(json.loads(line))
    DOC.write_text(render(DOC.read_text(), rows))
    print(f"updated {DOC} from {len(rows)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
