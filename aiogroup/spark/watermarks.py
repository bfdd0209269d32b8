"""End offsets for deciding where a micro-batch ends (``offset_lookups.end_offsets``).

Kept as a name for the Spark source; the one implementation (ListOffsets confirmed by
the high watermark of a Fetch, for brokers whose ListOffsets answers the last batch's
base offset) lives in ``aiogroup._fetch.offset_lookups``.
"""

from __future__ import annotations

from aiogroup._fetch.offset_lookups import end_offsets

__all__ = ["end_offsets"]
