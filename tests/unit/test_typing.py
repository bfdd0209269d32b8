"""mypy sees GroupConsumer's options: a user's misspelt or mistyped option is a type error."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

mypy_api = pytest.importorskip("mypy.api")

SNIPPET = textwrap.dedent(
    """
    from aiogroup import GroupConsumer

    GroupConsumer("t", group_id="g", session_timeout_ms=10_000)
    GroupConsumer("t", group_id="g", sesion_timeout_ms=10_000)
    GroupConsumer("t", group_id="g", session_timeout_ms="10000")
    GroupConsumer("t", group_id="g", enable_auto_commit="false")
    """
)


def test_mypy_flags_bad_options_in_user_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # This checkout's aiogroup, not whichever copy is installed.
    monkeypatch.setenv("MYPYPATH", str(Path(__file__).resolve().parents[2]))
    source = tmp_path / "user_code.py"
    source.write_text(SNIPPET)
    out, _, status = mypy_api.run(
        ["--strict", "--no-incremental", "--follow-imports=silent", str(source)]
    )
    assert status == 1, out
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert [int(line.split(":")[1]) for line in errors] == [5, 6, 7], out
    assert '"sesion_timeout_ms"' in errors[0]
    assert 'expected "int"' in errors[1] and 'expected "bool"' in errors[2]
