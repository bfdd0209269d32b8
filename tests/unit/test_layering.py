"""The wings' import rules, as tests: the layout in docs/architecture.md stays true.

``tests/unit/membership/test_purity.py`` guards the core (no I/O in the machines);
this guards the wings around it.  Each rule names a direction the architecture forbids:
the state board depends on no wing, the plumbing on no group concept, the fetch wing
never on the coordination wing, and the top level holds the public surface only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import aiogroup

ROOT = Path(aiogroup.__file__).parent

#: The modules at the top of the package: the public surface (docs/architecture.md).
PUBLIC_MODULES = {
    "__init__.py",
    "__main__.py",
    "cli.py",
    "config.py",
    "consumer.py",
    "errors.py",
    "group_metadata.py",
    "listeners.py",
    "metrics.py",
    "otel.py",
    "prometheus.py",
    "structs.py",
    "transactions.py",
}
PUBLIC_PACKAGES = {"assignors", "processing", "share", "spark", "testing"}
WINGS = {
    "_coordination",
    "_fetch",
    "_membership",
    "_protocol",
    "_state",
    "_support",
    "_transactions",
}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def _modules(wing: str) -> list[Path]:
    return sorted((ROOT / wing).rglob("*.py"))


def _wing_imports(wing: str) -> dict[str, set[str]]:
    return {
        str(path.relative_to(ROOT)): {m for m in _imports(path) if m.startswith("aiogroup.")}
        for path in _modules(wing)
    }


def test_the_top_level_holds_the_public_surface_and_the_wings() -> None:
    modules = {p.name for p in ROOT.glob("*.py")}
    packages = {p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert modules == PUBLIC_MODULES
    assert packages == PUBLIC_PACKAGES | WINGS


#: Named exceptions to the rules below, each a module that is pure data and no group
#: concept.  The transactional committer retries on the member's one retry policy
#: (KIP-580 backoff): moving ``backoff.py`` to ``_support`` would make the pure machines
#: import the plumbing wing, which their own rule forbids, so this one edge is allowed.
ALLOWED_EDGES: dict[str, frozenset[str]] = {
    "_transactions": frozenset({"aiogroup._membership.backoff"}),
}


@pytest.mark.parametrize(
    ("wing", "forbidden"),
    [
        # The board both routines meet on depends on neither routine nor the machines.
        ("_state", ("aiogroup._coordination", "aiogroup._fetch", "aiogroup._membership")),
        # Plumbing decides nothing about groups.
        (
            "_support",
            (
                "aiogroup._coordination",
                "aiogroup._fetch",
                "aiogroup._membership",
                "aiogroup._state",
                "aiogroup.consumer",
            ),
        ),
        # The fetcher reads the board, never the coordinator.
        ("_fetch", ("aiogroup._coordination", "aiogroup._membership")),
        # Wire structs know nothing of who sends them.
        ("_protocol", ("aiogroup._coordination", "aiogroup._fetch", "aiogroup._state")),
        # Transactional commits borrow aiokafka's producer, never the consumer's insides.
        (
            "_transactions",
            (
                "aiogroup._coordination",
                "aiogroup._fetch",
                "aiogroup._membership",
                "aiogroup._state",
            ),
        ),
        # The machines are pure: no wing with I/O (test_purity checks the rest).
        (
            "_membership",
            ("aiogroup._coordination", "aiogroup._fetch", "aiogroup._state", "aiogroup._support"),
        ),
    ],
)
def test_a_wing_imports_nothing_it_must_not(wing: str, forbidden: tuple[str, ...]) -> None:
    allowed = ALLOWED_EDGES.get(wing, frozenset())
    bad = {
        module: sorted(m for m in imported if m.startswith(forbidden) and m not in allowed)
        for module, imported in _wing_imports(wing).items()
    }
    assert not {k: v for k, v in bad.items() if v}


def test_an_allowed_edge_is_used_and_pure() -> None:
    """Each allowed exception is really imported (else it is stale) and is a module the
    machines' purity test loads (so it carries no I/O)."""
    for wing, modules in ALLOWED_EDGES.items():
        imported = set().union(*_wing_imports(wing).values())
        assert modules <= imported, (wing, modules - imported)
        for module in modules:
            assert module.startswith("aiogroup._membership."), module


def test_no_wing_imports_the_facade() -> None:
    """The facade wires the wings; a wing that imported it would loop back."""
    for wing in WINGS:
        for module, imported in _wing_imports(wing).items():
            assert "aiogroup.consumer" not in imported, module


def test_a_rule_catches_a_forbidden_import(tmp_path: Path) -> None:
    """The checker itself: a module importing the coordination wing is found."""
    module = tmp_path / "bad.py"
    module.write_text("from aiogroup._coordination.routine import CoordinationRoutine\n")
    assert "aiogroup._coordination.routine" in _imports(module)
