"""Pieces both coordination shells share (classic ``coordinator.py`` and KIP-848
``consumer_group_routine.py``): the routine itself (``routine.py``: inbox, lifecycle,
the commit surface), supervision per life and per generation, the commit/offset-fetch
client with its pure outcome rules, the pure check of what a ``commit()`` call asks
for (``commit_request.py``), the committed-offset refresh, the rebalance-callback
runner, and the pure subscription/metadata diff.  Pure modules here import no I/O
(tests/unit/membership/test_purity.py)."""
