"""Test modules outside a package must have unique basenames.

pytest imports a test file that is not in a package (no ``__init__.py``) under its
basename alone; two such files of one name make the collection of the second fail
("import file mismatch") - it happened once in the fresh-clone CI, with every test
passing in the developers' runs of single directories.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_rootless_test_modules_share_a_basename() -> None:
    by_name: dict[str, list[Path]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        if ".venv" in path.parts or (path.parent / "__init__.py").exists():
            continue
        by_name[path.name].append(path.relative_to(TESTS))
    clashes = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
