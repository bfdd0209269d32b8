"""Every declared state-triggered edge occurs in the membership unit suite; no other does.

Runs ``tests/unit/membership`` in a child pytest with ``state_rule_recorder`` loaded,
which records each (source state, rule) the machine's ``_advance`` takes.  A declared
edge nobody exercises is an untested rule (or a wrong declaration); an edge taken but
not declared means the diagram (drawn from the declarations) lies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from aiogroup._membership.machine import STATE_RULES

ROOT = Path(__file__).resolve().parents[2]


def test_every_declared_state_rule_edge_occurs_and_no_other(tmp_path: Path) -> None:
    out = tmp_path / "rules.json"
    env = {
        **os.environ,
        "AIOGROUP_RULES_OUT": str(out),
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/unit/membership",
            "-q",
            "-x",
            "-p",
            "tests.unit.state_rule_recorder",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    seen = {tuple(edge) for edge in json.loads(out.read_text())}
    declared = {(source.value, rule.name) for rule in STATE_RULES for source in rule.sources}
    assert declared - seen == set(), "declared but never taken in the unit suite"
    assert seen - declared == set(), "taken but not declared in STATE_RULES"
