"""The pause after a transaction ends, before the next one adds its first partition."""

from __future__ import annotations

import asyncio

from aiogroup._transactions import pacing


class Producer:
    """Any weakly referenceable object stands for a producer here."""


async def test_no_pause_before_the_first_transaction() -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    await pacing.wait_for_markers(Producer(), pause=5.0)
    assert loop.time() - start < 1.0  # did not wait the 5 s pause


async def test_the_rest_of_the_pause_is_waited_after_an_end() -> None:
    loop = asyncio.get_running_loop()
    producer = Producer()
    pacing.ended(producer)
    ended_at = loop.time()
    await pacing.wait_for_markers(producer, pause=0.05)
    assert loop.time() - ended_at >= 0.05


async def test_a_pause_already_over_is_not_waited_again() -> None:
    loop = asyncio.get_running_loop()
    producer = Producer()
    pacing.ended(producer)
    await asyncio.sleep(0.02)
    start = loop.time()
    await pacing.wait_for_markers(producer, pause=0.01)
    waited = loop.time() - start
    assert waited < 0.01


async def test_producers_are_paced_apart_and_a_test_double_is_not_paced() -> None:
    loop = asyncio.get_running_loop()
    a, b = Producer(), Producer()
    pacing.ended(a)
    start = loop.time()
    await pacing.wait_for_markers(b, pause=5.0)  # b never ended a transaction
    assert loop.time() - start < 1.0
    pacing.ended(42)  # not weakly referenceable: ignored, no error
    await pacing.wait_for_markers(42, pause=5.0)
    assert loop.time() - start < 1.0
