"""Sphinx configuration for aiogroup's API reference (``make api-docs``; ``-W``: any
warning fails the build, so a docstring that does not render is caught)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

project = "aiogroup"
author = "aiogroup contributors"
extensions = ["sphinx.ext.autodoc"]
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "show-inheritance": True}
# aiokafka's classes (TopicPartition, ConsumerRecord, ...) are re-exported, not ours.
nitpicky = False
suppress_warnings = ["ref.python"]
html_theme = "alabaster"
exclude_patterns = ["_build"]
