"""``python -m aiogroup``: the group admin CLI (see aiogroup.cli)."""

from aiogroup.cli import main

raise SystemExit(main())
