"""The consumer-protocol machine is held to the same import ban as the classic one."""

from __future__ import annotations

import subprocess
import sys

from tests.unit.membership.test_purity import PACKAGE_DIR, SCRIPT


def test_consumer_group_machine_imports_no_io_modules() -> None:
    script = SCRIPT.replace(
        "import aiogroup._membership.machine as machine",
        "import aiogroup._membership.consumer_group as machine",
    )
    assert script != SCRIPT
    proc = subprocess.run(
        [sys.executable, "-c", script, str(PACKAGE_DIR)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "stateDiagram-v2"
