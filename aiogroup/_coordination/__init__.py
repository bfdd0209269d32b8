"""Pieces both coordination shells share (classic ``coordinator.py`` and KIP-848
``consumer_group_routine.py``): supervision of child tasks, the commit/offset-fetch
client with its pure outcome rules, the committed-offset refresh, and the pure
subscription/metadata diff.  Pure modules here import no I/O (tests/unit/membership/
test_purity.py)."""
