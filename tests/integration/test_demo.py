"""``make demo`` ends with checks that hold: run it as a user would and read its verdict."""

from __future__ import annotations

import asyncio
import sys


async def test_demo_runs_and_every_check_holds() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiogroup.demo",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 240)
    text = out.decode()
    verdicts = [
        line.split(maxsplit=1)
        for line in text.splitlines()
        if line.startswith("   ok") or "FAIL" in line
    ]
    assert proc.returncode == 0, text
    assert len(verdicts) == 6 and all(v[0] == "ok" for v in verdicts), text
    assert "LOST" not in text, "a slow listener must not cost its member the partitions"
