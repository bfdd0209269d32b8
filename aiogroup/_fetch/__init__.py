"""The fetcher's parts, one concept per module; ``aiogroup.fetcher`` wires them together.

- ``decoding``: a fetched partition's record batches, CRC checks, transaction filtering.
- ``walker``: the one loop that hands a chunk's records to a sink (records or columns).
- ``budget``: the memory bound as arithmetic, and the order partitions are planned in.
- ``responses``: Fetch requests, parsed partition results and the code -> reaction table.
- ``resets``: positions found by ListOffsets for partitions that need one.
- ``delivery``: the buffer of chunks and the synchronous hand-over to the application.
- ``replica``: the leader or the preferred read replica to fetch from (KIP-392).

None of them imports ``aiogroup.fetcher`` or ``aiogroup.arrow``.
"""
