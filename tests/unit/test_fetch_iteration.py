"""Records held for ``async for``: each goes out only while delivery would still hand it out.

Pure state: a drain's result is held, positions are put back, and every ``take`` checks
the partition again.  What goes out and where positions end up is the contract.
"""

from __future__ import annotations

from aiogroup._fetch.iteration import HeldRecords
from aiogroup._state.subscription import Assignment, PartitionState, SubscriptionState
from aiogroup.structs import ConsumerRecord, TopicPartition

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)


def _state(tp: TopicPartition, position: int) -> PartitionState:
    st = PartitionState(tp, SubscriptionState().default_reset)
    st.seek(position)
    return st


def _records(tp: TopicPartition, offsets: list[int]) -> list[ConsumerRecord]:
    return [
        ConsumerRecord(tp.topic, tp.partition, o, 0, 0, None, b"v", None, -1, 1, ())
        for o in offsets
    ]


def _held(
    states: dict[TopicPartition, PartitionState],
    drained: dict[TopicPartition, tuple[list[int], int]],
) -> tuple[HeldRecords, Assignment]:
    """Hold a drain of ``drained`` {tp: (offsets, position after the drain)}."""
    assignment = Assignment(states, 1)
    before = {tp: st.position for tp, st in states.items()}
    for tp, (_, end) in drained.items():
        states[tp].consumed_to(end)  # what the drain did
    held = HeldRecords()
    held.hold(assignment, {tp: _records(tp, offs) for tp, (offs, _) in drained.items()}, before)
    return held, assignment


def _offsets(held: HeldRecords, assignment: Assignment) -> list[tuple[int, int]]:
    out = []
    while (r := held.take(assignment)) is not None:
        out.append((r.partition, r.offset))
    return out


async def test_positions_follow_what_was_handed_out_not_the_drain() -> None:
    a, b = _state(A, 10), _state(B, 0)
    # A's drain skipped a control record at 13: the position after it is 14.
    held, assignment = _held({A: a, B: b}, {A: ([10, 11, 12], 14), B: ([0, 1], 2)})
    assert (a.position, b.position) == (10, 0)  # nothing handed out yet
    first = held.take(assignment)
    assert first is not None and (first.partition, first.offset) == (0, 10)
    assert a.position == 11
    assert _offsets(held, assignment) == [(0, 11), (0, 12), (1, 0), (1, 1)]
    assert (a.position, b.position) == (14, 2)
    assert not held


async def test_a_revoking_partition_gets_nothing_more_and_keeps_its_position() -> None:
    a, b = _state(A, 0), _state(B, 0)
    held, assignment = _held({A: a, B: b}, {A: ([0, 1, 2], 3), B: ([0], 1)})
    assert held.take(assignment) is not None
    a.revoking = True
    epoch = a.epoch
    assert _offsets(held, assignment) == [(1, 0)]
    # Its revoke commit commits 1; should it stay, it refetches from 1 (new epoch).
    assert a.position == 1 and a.epoch == epoch + 1


async def test_a_paused_partition_is_sought_back_to_its_first_record_not_handed_out() -> None:
    a = _state(A, 5)
    held, assignment = _held({A: a}, {A: ([5, 6, 7], 8)})
    assert held.take(assignment) is not None
    a.pause()
    epoch = a.epoch
    assert held.take(assignment) is None
    # The seek drops the read-ahead past 6 (new epoch) and keeps the position: 6 is fetched again.
    assert a.position == 6 and a.epoch == epoch + 1 and a.paused


async def test_a_seek_between_two_records_ends_the_held_run() -> None:
    a = _state(A, 0)
    held, assignment = _held({A: a}, {A: ([0, 1, 2], 3)})
    assert held.take(assignment) is not None
    a.seek(100)
    assert held.take(assignment) is None
    assert a.position == 100


async def test_a_new_assignment_ends_every_held_run() -> None:
    a = _state(A, 0)
    held, _old = _held({A: a}, {A: ([0, 1], 2)})
    fresh = _state(A, 0)
    assert held.take(Assignment({A: fresh}, 2)) is None
    assert fresh.position == 0 and a.position == 0


async def test_release_gives_back_what_was_not_handed_out() -> None:
    a, b = _state(A, 0), _state(B, 40)
    held, assignment = _held({A: a, B: b}, {A: ([0, 1], 2), B: ([40, 41], 42)})
    assert held.take(assignment) is not None
    a_epoch, b_epoch = a.epoch, b.epoch
    held.release(assignment)
    assert not held and held.take(assignment) is None
    assert (a.position, b.position) == (1, 40)
    assert (a.epoch, b.epoch) == (a_epoch + 1, b_epoch + 1)  # both refetch from there


async def test_a_partition_reset_meanwhile_is_left_alone() -> None:
    a = _state(A, 0)
    held, assignment = _held({A: a}, {A: ([0, 1], 2)})
    a.await_reset()
    held.release(assignment)
    assert a.position is None  # the reset stands: nothing sought over it
