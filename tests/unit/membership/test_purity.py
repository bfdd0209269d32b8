"""The pure cores import no I/O: no asyncio, clock, randomness or sockets.

The membership machines and the assignors decide from plain data, so every decision is
replayable in a unit test; an import of asyncio or time would let one creep in.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import aiogroup

PACKAGE_DIR = Path(aiogroup.__file__).parent

SCRIPT = textwrap.dedent(
    """
    import importlib.abc, sys, types

    BANNED = {"asyncio", "aiokafka", "time", "random", "socket", "logging.handlers"}

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name in BANNED or name.split(".")[0] in BANNED - {"logging.handlers"}:
                raise ImportError(f"pure module imported {name}")
            return None

    for name in list(sys.modules):
        if name.split(".")[0] in BANNED:
            del sys.modules[name]
    sys.meta_path.insert(0, Block())
    # Stand in for the package so its __init__ (which may wire up I/O) does not run.
    pkg = types.ModuleType("aiogroup")
    pkg.__path__ = [sys.argv[1]]
    sys.modules["aiogroup"] = pkg
    import aiogroup._membership.machine as machine
    print(machine.mermaid_diagram().splitlines()[0])
    """
)


def test_membership_package_imports_no_io_modules() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(PACKAGE_DIR)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "stateDiagram-v2"


def test_the_blocker_does_block() -> None:
    script = SCRIPT.replace(
        "import aiogroup._membership.machine as machine", "import asyncio; machine = None"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(PACKAGE_DIR)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode != 0 and "pure module imported asyncio" in proc.stderr


#: The assignors decide the group's assignment from plain data, so they are held to the
#: same rule: no clock, no randomness, no I/O.  They may use aiokafka's *encoding* types
#: (aiokafka.protocol, aiokafka.structs, aiokafka.errors), so aiokafka's own __init__,
#: which loads its consumer and producer, is stood in for, and its I/O modules are
#: blocked by name.  ``adapter`` is left out on purpose: it wraps aiokafka's assignors,
#: whose base class imports aiokafka's cluster metadata (a lock, wall-clock timestamps).
ASSIGNOR_MODULES = (
    "abc",
    "cooperative",
    "java_order",
    "range",
    "roundrobin",
    "sticky",
    "uniform",
)

ASSIGNOR_SCRIPT = textwrap.dedent(
    """
    import importlib.abc, importlib.util, sys, types

    BANNED = {"asyncio", "time", "random", "socket", "selectors", "ssl", "threading",
              "logging.handlers"}
    AIOKAFKA_IO = ("aiokafka.conn", "aiokafka.client", "aiokafka.cluster", "aiokafka.consumer",
                   "aiokafka.producer", "aiokafka.coordinator")

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name in BANNED or name.split(".")[0] in BANNED - {"logging.handlers"}:
                raise ImportError(f"pure module imported {name}")
            if name.startswith(AIOKAFKA_IO):
                raise ImportError(f"pure module imported {name}")
            return None

    aiokafka_path = importlib.util.find_spec("aiokafka").submodule_search_locations
    for name in list(sys.modules):
        if name.split(".")[0] in BANNED | {"aiokafka", "aiogroup"}:
            del sys.modules[name]
    sys.meta_path.insert(0, Block())
    # Stand in for the packages so their __init__ (which wires up I/O) does not run.
    for pkg_name, path in (
        ("aiogroup", [sys.argv[1]]),
        ("aiogroup.assignors", [sys.argv[1] + "/assignors"]),
        ("aiokafka", list(aiokafka_path)),
    ):
        pkg = types.ModuleType(pkg_name)
        pkg.__path__ = path
        sys.modules[pkg_name] = pkg
    module = importlib.import_module("aiogroup.assignors." + sys.argv[2])
    print(module.__name__)
    """
)


def _run_assignor_script(script: str, module: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, str(PACKAGE_DIR), module],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_assignors_import_no_io_modules() -> None:
    failures = {}
    for module in ASSIGNOR_MODULES:
        proc = _run_assignor_script(ASSIGNOR_SCRIPT, module)
        if proc.returncode != 0 or proc.stdout.strip() != f"aiogroup.assignors.{module}":
            failures[module] = proc.stderr.strip().splitlines()[-1:]
    assert not failures


def test_every_assignor_module_is_checked() -> None:
    on_disk = {p.stem for p in (PACKAGE_DIR / "assignors").glob("*.py")} - {"__init__"}
    assert on_disk - set(ASSIGNOR_MODULES) == {"adapter"}


def test_the_assignor_blocker_does_block() -> None:
    for banned in ("time", "aiokafka.conn"):
        script = ASSIGNOR_SCRIPT.replace(
            'module = importlib.import_module("aiogroup.assignors." + sys.argv[2])',
            f"import {banned}; module = None",
        )
        proc = _run_assignor_script(script, "range")
        assert proc.returncode != 0 and f"pure module imported {banned}" in proc.stderr


def test_the_machines_import_only_pure_aiogroup_modules() -> None:
    # Everything the machines import runs under the blocker above; this names it, so a
    # new dependency of the machine is a decision a reviewer sees.
    script = SCRIPT.replace(
        "print(machine.mermaid_diagram().splitlines()[0])",
        "import aiogroup._membership.consumer_group\n"
        "print(sorted(m for m in sys.modules if m.startswith('aiogroup.')))",
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(PACKAGE_DIR)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    loaded = set(ast.literal_eval(proc.stdout))
    assert loaded == {
        "aiogroup._membership",
        "aiogroup._membership.actions",
        "aiogroup._membership.backoff",
        "aiogroup._membership.codes",
        "aiogroup._membership.commit_outcomes",
        "aiogroup._membership.consumer_group",
        "aiogroup._membership.events",
        "aiogroup._membership.heartbeat",
        "aiogroup._membership.heartbeat_member",
        "aiogroup._membership.machine",
        "aiogroup._membership.table",
        "aiogroup._protocol",
        "aiogroup._protocol.results",
    }


#: The shells' pure halves (issue 18): what an answer means, what changed.  They decide
#: from plain data as the machines and assignors do, so they are held to the assignors'
#: ban (aiokafka's encoding types allowed, its I/O modules not).
PURE_SHELL_MODULES = (
    "aiogroup._coordination.commit_outcome",
    "aiogroup._coordination.commit_request",
    "aiogroup._coordination.offset_request",
    "aiogroup._coordination.tracking",
)


def test_pure_shell_modules_import_no_io_modules() -> None:
    script = ASSIGNOR_SCRIPT.replace(
        'importlib.import_module("aiogroup.assignors." + sys.argv[2])',
        "importlib.import_module(sys.argv[2])",
    )
    assert script != ASSIGNOR_SCRIPT
    failures = {}
    for module in PURE_SHELL_MODULES:
        proc = _run_assignor_script(script, module)
        if proc.returncode != 0 or proc.stdout.strip() != module:
            failures[module] = proc.stderr.strip().splitlines()[-1:]
    assert not failures


def test_the_shell_blocker_does_block() -> None:
    script = ASSIGNOR_SCRIPT.replace(
        'module = importlib.import_module("aiogroup.assignors." + sys.argv[2])',
        "import aiogroup._coordination.commit_client; module = None",
    )
    proc = _run_assignor_script(script, "")
    assert proc.returncode != 0 and "pure module imported" in proc.stderr
