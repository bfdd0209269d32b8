"""The order in which a Java ``HashMap<String, ...>`` visits its keys.

Kafka's sticky assignor walks its members in ``HashMap`` order at one step that
breaks ties: when more members own ``maxQuota`` partitions than may keep that many,
the first ones visited keep them.  Visiting members in that same order makes an
aiogroup leader produce the assignment a Java leader would, so a group whose
leadership moves between clients does not shuffle partitions for nothing (and
Kafka's own test expectations hold here unchanged).

The order follows from ``String.hashCode`` (over UTF-16 code units), HashMap's
spreading of the high bits into the low ones, and the table size, which starts at
16 and doubles whenever the map grows past three quarters full.  Keys that land in
the same bucket keep insertion order in Java; here they fall back to string order,
which is what a map filled in sorted order would give.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["hashmap_order", "string_hash"]

_MASK = 0xFFFFFFFF


def string_hash(text: str) -> int:
    """Java's ``String.hashCode`` as an unsigned 32-bit value."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK
    return h


def _table_size(count: int) -> int:
    size = 16
    while count > size * 3 // 4:
        size *= 2
    return size


def hashmap_order(keys: Iterable[str]) -> list[str]:
    """``keys`` in the order a Java HashMap holding exactly them iterates."""
    ordered = sorted(set(keys))
    mask = _table_size(len(ordered)) - 1

    def bucket(key: str) -> int:
        h = string_hash(key)
        return (h ^ (h >> 16)) & mask

    return sorted(ordered, key=bucket)  # stable: same bucket stays in string order
