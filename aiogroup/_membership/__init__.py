"""The group-membership core: pure, clock-free, I/O-free.

Everything the consumer-group protocol *decides* lives here and is driven by
:class:`~aiogroup._membership.machine.Membership`;
:mod:`aiogroup._coordination.classic_routine` only performs the actions it returns.
Nothing in this package may import asyncio, aiokafka, ``time`` or ``random``
(``tests/unit/membership/test_purity.py`` enforces it),
so every rebalance and fault path is testable with plain function calls.
"""
