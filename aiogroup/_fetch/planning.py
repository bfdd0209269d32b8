"""What to fetch next: the order partitions are planned in and the memory bound.

Both are pure: no clock, no I/O, so the arithmetic is unit tested on its own.

The memory bound.  Let B = ``max_buffered_bytes`` (0 disables the bound) and P =
``max_partition_fetch_bytes``.  ``buffered`` counts what every chunk not yet fully
delivered holds: its record-set bytes and the Python objects its record batches live
in (``chunk_bytes``: a batch object refers to the record set rather than copying it,
but costs as much as a 1-record batch's bytes, so counting bytes alone let small
batches hold twice the bound).  A response exists up to three times while it is
handled (the frame the connection read, the record set the parser copied out of it,
the chunk the buffer keeps), so a request spends the budget three times over: with
room R = (B - buffered - reserved) / 3, a Fetch for n partitions asks for
``max_bytes = min(fetch_max_bytes, n * P, R)`` and reserves three times that until
its response is split into chunks, whose sizes then replace the reservation.
(With ``aiogroup._support.frame_reader`` on the connection two is the most - the
socket's chunks and the frame joined from them, then the frame and its record sets;
three stays reserved, since a connection's first response is read before the fetcher
can put that reader on it.)  No
request goes out while R < min(P, B / 3), so each is worth a round
trip; an empty buffer always has R = B / 3.  Where chunks hold more than their bytes
again (batches of one small record), requests reserve more copies (``learn``) from
then on.  ``FIRST_COPIES`` is what the first
request would need to cover a record set of the smallest batches; the fetcher does not
use it (a first request that small overshot its bound on the embedded broker, which
answers a small max_bytes with more).  The response-level limit carries the
bound because brokers honour it (the embedded test broker ignores P but not
``max_bytes``) and every partition of a leader can share one request.

One copy outlives the handling: the connection's reader (aiokafka's) keeps the last
frame it read in a local variable until the next frame's header arrives, so the
last Fetch response of each connection stays alive after its records were split
into chunks (measured with tracemalloc in a stalled consumer: 1.4 MiB of frame
beside 61.5 MiB of chunks).  ``frames`` counts it - the record bytes of each
broker's last response - until that broker's next request, whose reservation
takes it over: the old frame is let go when the new response starts to arrive, so
the two never coexist, and the request to that broker may use the frame's room
(otherwise a frame could keep out the very request that frees it).  ``decoded``
counts the records of partly read batches, decoded once and kept until handed out
(a C batch cannot be read twice): objects of a few hundred bytes each beside the
raw bytes (0.4-1.2 MiB measured at rest).  ``decoded`` grows while a request is in
flight - the application's read cuts a batch of a chunk already buffered - and the
fetcher sends a broker's next request before the application reads the answer just
buffered; so every request also leaves room for ``margin``, what reads may still
decode of the buffered chunks (per partition one batch, the widest buffered, at
``decoded``'s rate, less what is decoded already; set by the fetcher before it
plans).  So the Kafka bytes held, transient
copies and decoded leftovers included, stay within ``buffered + reserved + frames +
decoded <= B``;
Kafka oversteps ``max_bytes`` only to make progress (KIP-74 returns a first batch
larger than the limit whole), so the bound is ``B + one record batch``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = [
    "BATCH_OBJECT_BYTES",
    "CHUNK_OBJECT_BYTES",
    "COPIES_WHILE_HANDLED",
    "FIRST_COPIES",
    "SMALLEST_BATCH_BYTES",
    "MemoryBudget",
    "chunk_bytes",
    "planning_order",
]

#: How many copies of a Fetch response can be alive at once while it is handled:
#: what an in-flight Fetch reserves, in units of its max_bytes.
COPIES_WHILE_HANDLED = 3

#: What one record batch of a buffered chunk costs besides its bytes, measured with
#: tracemalloc on CPython 3.11 whatever the batch's size (1 record of 100 B: 170 B
#: of bytes; 150 records: 16 KiB): aiokafka's batch object, which refers to the
#: record set instead of copying it, and its list slot (208 B), and the batch's
#: place in the record set, kept for the CRC check once its chunk is first read
#: (a tuple of two ints in a list: 92 B).
BATCH_OBJECT_BYTES = 304

#: The chunk object itself (17 slots), its deque slot and its batch list's header.
CHUNK_OBJECT_BYTES = 256


#: The smallest record batch: a v2 header (61 B) and one record with neither key,
#: value nor headers (7 B).
SMALLEST_BATCH_BYTES = 68

#: What a request reserves before any response has shown what chunks hold: the
#: frame plus the chunk of a record set made of the smallest batches (7 copies).
FIRST_COPIES = 1 + -(-(SMALLEST_BATCH_BYTES + BATCH_OBJECT_BYTES) // SMALLEST_BATCH_BYTES)


def chunk_bytes(record_bytes: int, batches: int) -> int:
    """What a chunk of ``batches`` record batches in ``record_bytes`` holds while buffered."""
    return record_bytes + batches * BATCH_OBJECT_BYTES + CHUNK_OBJECT_BYTES


T = TypeVar("T")


class MemoryBudget:
    """The bytes the fetcher holds or has asked for, against ``max_buffered_bytes``."""

    __slots__ = (
        "_frames",
        "buffered",
        "copies",
        "decoded",
        "fetch_max_bytes",
        "frames",
        "limit",
        "margin",
        "partition_bytes",
        "peak",
        "reserved",
    )

    def __init__(
        self,
        limit: int,
        partition_bytes: int,
        fetch_max_bytes: int,
        *,
        copies: int = COPIES_WHILE_HANDLED,
    ) -> None:
        #: B; 0 means unbounded.
        self.limit = limit
        #: P, the per-partition limit sent with every partition.
        self.partition_bytes = partition_bytes
        self.fetch_max_bytes = fetch_max_bytes
        #: Raw bytes of buffered chunks not yet fully delivered.
        self.buffered = 0
        #: Bytes reserved by in-flight Fetch requests.
        self.reserved = 0
        #: Bytes of each broker's last Fetch response still held by its connection.
        self.frames = 0
        self._frames: dict[int, int] = {}
        #: Estimated bytes of decoded records of partly read batches.
        self.decoded = 0
        #: What reads may still decode of the buffered chunks beyond ``decoded``:
        #: left free by every request (not held, so not in ``held`` or ``peak``).
        self.margin = 0
        #: Highest ``buffered + reserved`` seen (for tests and benchmarks).
        self.peak = 0
        #: What a request reserves, in units of its max_bytes (``learn``).
        self.copies = copies

    @property
    def bounded(self) -> bool:
        return self.limit > 0

    @property
    def smallest_request(self) -> int:
        """No request is sent for less: min(P, B / 3)."""
        return min(self.partition_bytes, self.limit // self.copies)

    def room(self) -> int | None:
        """R = (B - buffered - reserved - frames - decoded - margin) / 3; None: unbounded."""
        if not self.bounded:
            return None
        held = self.buffered + self.reserved + self.frames + self.decoded + self.margin
        return (self.limit - held) // self.copies

    @property
    def held(self) -> int:
        """Everything counted against the bound: buffered, reserved, frames, decoded."""
        return self.buffered + self.reserved + self.frames + self.decoded

    def can_request(self) -> bool:
        """Whether some request may go out (the broker whose frame is largest, at best)."""
        if not self.bounded:
            return True
        own = max(self._frames.values(), default=0)
        free = self.limit - self.buffered - self.reserved - self.frames - self.decoded + own
        return (free - self.margin) // self.copies >= self.smallest_request

    def request_sizes(
        self, partition_counts: Sequence[int], nodes: Sequence[int] | None = None
    ) -> list[int]:
        """``max_bytes`` of each request (one per leader, n partitions each), in order.

        ``nodes``: each request's broker, whose last frame its reservation takes
        over.  The list is shorter than ``partition_counts`` when the room runs out:
        the remaining leaders get their turn when buffered data is released.
        """
        if not self.bounded:
            return [min(self.fetch_max_bytes, n * self.partition_bytes) for n in partition_counts]
        free = self.limit - self.buffered - self.reserved - self.frames - self.decoded
        free -= self.margin
        sizes = []
        for k, n in enumerate(partition_counts):
            own = self._frames.get(nodes[k], 0) if nodes is not None else 0
            room = (free + own) // self.copies
            if room < self.smallest_request:
                break
            max_bytes = min(self.fetch_max_bytes, n * self.partition_bytes, room)
            free -= max(max_bytes * self.copies, own) - own
            sizes.append(max_bytes)
        return sizes

    def reserve(self, max_bytes: int, node: int | None = None) -> int:
        """Reserve for a request of ``max_bytes`` to ``node``; returns what to release after.

        The node's last frame is let go while the request is in flight (when the new
        response starts to arrive), so the reservation takes it over.
        """
        if not self.bounded:
            return 0
        own = self._frames.pop(node, 0) if node is not None else 0
        self.frames -= own
        reserved = max(max_bytes * self.copies, own)
        self.reserved += reserved
        self.note_peak()
        return reserved

    def unreserve(self, reserved: int) -> None:
        self.reserved -= reserved

    def frame_held(self, node: int, size: int) -> None:
        """Broker ``node``'s connection now holds a response of ``size`` record bytes."""
        self.frames += size - self._frames.get(node, 0)
        self._frames[node] = size
        self.note_peak()

    def clear_frames(self) -> None:
        self._frames.clear()
        self.frames = 0

    def learn(self, record_bytes: int, held: int) -> None:
        """A response's ``record_bytes`` became chunks holding ``held`` (``chunk_bytes``).

        While a response is handled its frame and the chunks made of it coexist, so
        the next request reserves 1 + held / record_bytes copies of its max_bytes
        (rounded up), at least ``COPIES_WHILE_HANDLED`` and at most ``FIRST_COPIES``:
        batches of one small record hold about three times their bytes.  Bounded,
        because the more copies a request reserves, the emptier the buffer must be
        before one goes out.
        """
        if record_bytes > 0:
            need = 1 + -(-held // record_bytes)
            self.copies = min(FIRST_COPIES, max(COPIES_WHILE_HANDLED, need))

    def buffer(self, size: int) -> None:
        self.buffered += size

    def release(self, size: int) -> None:
        self.buffered -= size

    def note_peak(self) -> None:
        total = self.buffered + self.reserved + self.frames + self.decoded
        if total > self.peak:
            self.peak = total


def planning_order(items: Sequence[T], turn: int, has_buffered: Callable[[T], bool]) -> list[T]:
    """``items`` rotated by ``turn``, those with nothing buffered first (stable).

    The budget goes where the application will look next; rotating means a response
    cut at ``max_bytes`` does not starve the partitions at the end of the request.
    """
    if not items:
        return []
    start = turn % len(items)
    rotated = list(items[start:]) + list(items[:start])
    rotated.sort(key=has_buffered)
    return rotated
