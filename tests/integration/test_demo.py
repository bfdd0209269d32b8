"""``make demo`` ends with checks that hold: run it as a user would and read its verdict."""

from __future__ import annotations

import asyncio
import re
import sys

CHECKS = 11


async def test_demo_runs_and_every_check_holds() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiogroup.testing.demo",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    text = out.decode()
    verdicts = [
        line.split(maxsplit=1)
        for line in text.splitlines()
        if line.startswith("   ok") or "FAIL" in line
    ]
    assert proc.returncode == 0, text
    assert len(verdicts) == CHECKS and all(v[0] == "ok" for v in verdicts), text
    # A newcomer reads the verdict in one line, and the refused commits are explained.
    assert f"demo result: PASS - {CHECKS} of {CHECKS} checks hold" in text, text
    assert "expected, not a failure" in text, text
    # The slow listener does not cost alpha its partitions; the frozen charlie is told
    # lost (once, for what it held), never revoked, for the partitions taken from it.
    assert "alpha: on_partitions_lost" not in text, text
    assert len(re.findall(r"charlie: on_partitions_lost\(\{[\d, ]+\}\)", text)) == 1, text
