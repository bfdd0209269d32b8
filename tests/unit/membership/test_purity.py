"""The membership core imports no I/O: asyncio, aiokafka, time and random are blocked."""

from __future__ import annotations

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
