"""The fetch wing: reading ahead of the application, one concept per module.

- ``fetcher``: the routine and the wiring - the only module that awaits Fetch and
  ListOffsets responses and calls the parts below.
- ``arrow``: the columnar hand-over (a ``pyarrow.RecordBatch`` per call), a sink of the walker.
- ``native``: the optional Rust decoder (``native/``), used by ``decoding`` and ``arrow``.
- ``offset_lookups``: earliest, latest, by-timestamp offsets and the true log end,
  shared by the fetcher, the facade, the CLI and the Spark source.

- ``decoding``: a fetched partition's record batches, CRC checks, transaction filtering.
- ``walker``: the one loop that hands a chunk's records to a sink (records or columns).
- ``budget``: the memory bound as arithmetic, and the order partitions are planned in.
- ``responses``: Fetch requests, parsed partition results and the code -> reaction table.
- ``resets``: positions found by ListOffsets for partitions that need one.
- ``delivery``: the buffer of chunks and the synchronous hand-over to the application.
- ``iteration``: records built ahead for ``async for``, handed out one at a time after
  delivery's checks, positions moving per record.
- ``replica``: the leader or the preferred read replica to fetch from (KIP-392).

None of the parts imports ``fetcher`` (the wiring), none imports ``arrow`` but the
walker's sink protocol, and nothing here imports ``aiogroup._coordination``: the fetch
wing reads the state object (``aiogroup._state``), never the coordinator.
"""
