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


def render(text: str, rows: list[dict[str, Any]]) -> str:
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table(rows)}{END}{tail}"


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
