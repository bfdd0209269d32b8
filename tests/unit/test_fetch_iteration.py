"""Records held for ``async for``: each goes out only while delivery would still hand it out.

Pure state: a drain's result is held, positions are put back, and every ``take`` checks
the partition again.  What goes out and where positions end up is the contract.
"""

from __future__ import annotations

import asyncio
import inspect
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from aiogroup._fetch.iteration import HeldRecords, held_steps_type, iterate_native, iterate_python
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


# -- the steps between full checks (iterate) --------------------------------------------
# Every case runs on both implementations: the native ``HeldSteps`` and the async
# generator that is the fallback without it.

Iterate = Callable[
    [HeldRecords, SubscriptionState, Callable[[], float], Callable[[], Awaitable[Any]]],
    AsyncIterator[ConsumerRecord],
]


def _native_iterate(
    held: HeldRecords,
    sub: SubscriptionState,
    clock: Callable[[], float],
    step: Callable[[], Awaitable[Any]],
) -> AsyncIterator[ConsumerRecord]:
    steps_type = held_steps_type()
    if steps_type is None:
        if shutil.which("cargo") is None:
            pytest.skip("the native module is not built (make install needs cargo)")
        pytest.fail("aiogroup_native has no HeldSteps: rebuild it (make native)")
    return iterate_native(steps_type, held, sub, clock, step)


@pytest.fixture(params=["native", "python"])
def iterate(request: pytest.FixtureRequest) -> Iterate:
    return _native_iterate if request.param == "native" else iterate_python


class _Steps:
    """``iterate``'s full step over ``held``: counts how often the full check ran."""

    def __init__(self, held: HeldRecords, sub: SubscriptionState) -> None:
        self.held, self.sub, self.calls = held, sub, 0

    async def __call__(self) -> ConsumerRecord | None:
        self.calls += 1
        assignment = self.sub.assignment
        return None if assignment is None else self.held.take(assignment)


def _subscribed(positions: dict[TopicPartition, int]) -> SubscriptionState:
    sub = SubscriptionState()
    sub.assign_from_user(positions)
    assert sub.assignment is not None
    for tp, position in positions.items():
        sub.assignment.state(tp).seek(position)
    return sub


def _hold(
    sub: SubscriptionState, drained: dict[TopicPartition, tuple[list[int], int]]
) -> HeldRecords:
    assignment = sub.assignment
    assert assignment is not None
    before: dict[TopicPartition, int | None] = {}
    for tp, (_, end) in drained.items():
        before[tp] = assignment.state(tp).position
        assignment.state(tp).consumed_to(end)
    held = HeldRecords(sub.delivery_changes)
    held.hold(assignment, {tp: _records(tp, offs) for tp, (offs, _) in drained.items()}, before)
    return held


async def test_iterate_checks_in_full_only_at_the_ends_of_a_run_when_nothing_changes(
    iterate: Iterate,
) -> None:
    sub = _subscribed({A: 0, B: 0})
    held = _hold(sub, {A: ([0, 1, 2, 3, 4], 6), B: ([0, 1, 2], 3)})
    steps = _Steps(held, sub)
    got: list[tuple[int, int, int | None]] = []
    assert sub.assignment is not None
    a = sub.assignment.state(A)
    async for r in iterate(held, sub, lambda: 0.0, steps):
        got.append((r.partition, r.offset, a.position))
    assert [(p, o) for p, o, _ in got] == [
        (0, 0),
        (0, 1),
        (0, 2),
        (0, 3),
        (0, 4),
        (1, 0),
        (1, 1),
        (1, 2),
    ]
    # The position moves past each record as it goes out, to the drain's end after the last.
    assert [pos for p, _, pos in got if p == 0] == [1, 2, 3, 4, 6]
    # Full steps: the first record and the final one that finds nothing; each run's
    # last record is checked in full by ``take`` (which checks the next run too)
    # without one.
    assert steps.calls == 2


async def test_iterate_a_pause_between_two_steps_stops_the_partition_at_once(
    iterate: Iterate,
) -> None:
    sub = _subscribed({A: 0})
    held = _hold(sub, {A: ([0, 1, 2, 3, 4], 5)})
    steps = _Steps(held, sub)
    assert sub.assignment is not None
    a = sub.assignment.state(A)
    got = []
    async for r in iterate(held, sub, lambda: 0.0, steps):
        got.append(r.offset)
        if r.offset == 1:
            a.pause()
    assert got == [0, 1]
    assert a.position == 2 and a.paused  # sought back to the first record not handed out


async def test_iterate_a_revocation_between_two_steps_stops_the_partition_at_once(
    iterate: Iterate,
) -> None:
    sub = _subscribed({A: 0})
    held = _hold(sub, {A: ([0, 1, 2, 3, 4], 5)})
    got = []
    async for r in iterate(held, sub, lambda: 0.0, _Steps(held, sub)):
        got.append(r.offset)
        if r.offset == 1:
            sub.mark_revoking([A])
    assert got == [0, 1]


async def test_iterate_a_seek_between_two_steps_ends_the_held_run(iterate: Iterate) -> None:
    sub = _subscribed({A: 0})
    held = _hold(sub, {A: ([0, 1, 2, 3, 4], 5)})
    assert sub.assignment is not None
    a = sub.assignment.state(A)
    got = []
    async for r in iterate(held, sub, lambda: 0.0, _Steps(held, sub)):
        got.append(r.offset)
        if r.offset == 1:
            a.seek(100)
    assert got == [0, 1] and a.position == 100


async def test_iterate_an_error_reported_between_two_steps_goes_to_the_full_step(
    iterate: Iterate,
) -> None:
    sub = _subscribed({A: 0})
    held = _hold(sub, {A: ([0, 1, 2, 3, 4], 5)})
    steps = _Steps(held, sub)
    it = iterate(held, sub, lambda: 0.0, steps)
    assert (await anext(it)).offset == 0
    assert (await anext(it)).offset == 1
    calls = steps.calls
    sub.report_error(RuntimeError("listener failed"))
    assert (await anext(it)).offset == 2
    assert steps.calls == calls + 1  # the full step, which raises errors in the consumer


async def test_iterate_hands_out_nothing_past_the_membership_gate_without_the_full_step(
    iterate: Iterate,
) -> None:
    sub = _subscribed({A: 0})
    held = _hold(sub, {A: ([0, 1, 2, 3, 4], 5)})
    now = [10.0]
    sub.set_membership_valid_until(20.0)
    gated: list[int] = []

    async def step() -> ConsumerRecord | None:
        gated.append(1)
        assignment = sub.assignment
        if assignment is None or not sub.membership_current(now[0]):
            return None
        return held.take(assignment)

    got = []
    async for r in iterate(held, sub, lambda: now[0], step):
        got.append(r.offset)
        if r.offset == 1:
            now[0] = 25.0  # the process froze past the deadline between two steps
    assert got == [0, 1]
    assert len(gated) == 2  # the first step, then the gated one


async def test_iterate_expire_makes_the_next_step_the_full_one(iterate: Iterate) -> None:
    sub = _subscribed({A: 0})
    held = _hold(sub, {A: ([0, 1, 2, 3, 4], 5)})
    steps = _Steps(held, sub)
    it = iterate(held, sub, lambda: 0.0, steps)
    await anext(it)
    await anext(it)
    assert steps.calls == 1
    held.expire()
    await anext(it)
    assert steps.calls == 2


async def test_handed_out_counts_each_record_once_across_runs_and_give_backs(
    iterate: Iterate,
) -> None:
    sub = _subscribed({A: 0, B: 0})
    held = _hold(sub, {A: ([0, 1, 2], 3), B: ([0, 1, 2], 3)})
    steps = _Steps(held, sub)
    it = iterate(held, sub, lambda: 0.0, steps)
    for _ in range(4):
        await anext(it)  # A's three and B's first
    assert held.handed_out() == (4, 4 * len(b"v"))
    assert held.handed_out() == (0, 0)
    await anext(it)
    held.release(sub.assignment)  # B's last is given back, not counted
    assert held.handed_out() == (1, 1)


async def test_every_write_that_can_stop_a_hand_out_bumps_the_delivery_changes() -> None:
    sub = _subscribed({A: 0, B: 0})
    assert sub.assignment is not None
    a = sub.assignment.state(A)
    writes = {
        "pause": a.pause,
        "resume": a.resume,
        "seek": lambda: a.seek(3),
        "await_reset": a.await_reset,
        "await_committed": a.await_committed,
        "set_assigning": lambda: a.set_assigning(True),
        "mark_revoking": lambda: sub.mark_revoking([B]),
        "report_error": lambda: sub.report_error(RuntimeError("x")),
        "set_assignment": lambda: sub.set_assignment([A]),
        "close": sub.close,
        "set_membership_valid_until": lambda: sub.set_membership_valid_until(99.0),
    }
    for name, write in writes.items():
        before = sub.delivery_changes.value
        write()
        assert sub.delivery_changes.value > before, name


async def test_iterate_a_deadline_set_between_two_steps_is_heeded_at_once(iterate: Iterate) -> None:
    sub = _subscribed({A: 0})
    held = _hold(sub, {A: ([0, 1, 2, 3, 4], 5)})
    now = [10.0]
    steps = _Steps(held, sub)

    async def step() -> ConsumerRecord | None:
        if not sub.membership_current(now[0]):
            return None
        return await steps()

    got = []
    async for r in iterate(held, sub, lambda: now[0], step):
        got.append(r.offset)
        if r.offset == 1:
            sub.set_membership_valid_until(5.0)  # no deadline when the run was loaded
    assert got == [0, 1]


async def test_iterate_positions_follow_offsets_with_gaps(iterate: Iterate) -> None:
    sub = _subscribed({A: 0})
    held = _hold(sub, {A: ([0, 2, 5, 6, 9], 12)})
    assert sub.assignment is not None
    a = sub.assignment.state(A)
    got = []
    async for r in iterate(held, sub, lambda: 0.0, _Steps(held, sub)):
        got.append((r.offset, a.position))
    assert got == [(0, 1), (2, 3), (5, 6), (6, 7), (9, 12)]


async def test_iterate_a_step_cancelled_while_it_waits_hands_out_nothing(
    iterate: Iterate,
) -> None:
    sub = _subscribed({A: 0})
    held = _hold(sub, {A: ([0, 1, 2], 3)})
    steps = _Steps(held, sub)
    release = asyncio.Event()
    waiting = asyncio.Event()

    async def step() -> ConsumerRecord | None:
        if steps.calls == 0:
            waiting.set()
            await release.wait()  # a refill waiting for data
        return await steps()

    it = iterate(held, sub, lambda: 0.0, step)
    task = asyncio.ensure_future(anext(it))
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    if inspect.isasyncgen(it):  # an async generator that raised is finished: a new one
        it = iterate(held, sub, lambda: 0.0, step)
    # Nothing was handed out or skipped by the cancelled step.
    assert [(await anext(it)).offset for _ in range(3)] == [0, 1, 2]
    with pytest.raises(StopAsyncIteration):
        await anext(it)


async def test_native_an_anext_not_awaited_hands_its_record_out_at_the_next() -> None:
    sub = _subscribed({A: 0})
    held = _hold(sub, {A: ([0, 1, 2, 3], 4)})
    it = _native_iterate(held, sub, lambda: 0.0, _Steps(held, sub))
    assert (await anext(it)).offset == 0
    it.__anext__()  # dropped without an await
    assert (await anext(it)).offset == 1  # not lost, not skipped
    assert (await anext(it)).offset == 2


async def test_iterate_an_anext_not_awaited_moves_no_position(iterate: Iterate) -> None:
    """Until its result is awaited, ``__anext__()`` hands out nothing: the position
    stays before the record, so a commit made meanwhile (auto-commit, a revoke
    listener) cannot cover a record the application never had."""
    sub = _subscribed({A: 0})
    held = _hold(sub, {A: ([0, 1, 2, 3], 4)})
    assert sub.assignment is not None
    a = sub.assignment.state(A)
    it = iterate(held, sub, lambda: 0.0, _Steps(held, sub))
    assert (await anext(it)).offset == 0
    pending = it.__anext__()
    assert a.position == 1  # nothing moved for the record not yet awaited
    assert (await pending).offset == 1
    assert a.position == 2


async def test_iterate_a_revocation_between_anext_and_its_await_is_heeded(
    iterate: Iterate,
) -> None:
    """A rebalance that lands between ``__anext__()`` and the await (an
    ``asyncio.wait_for(anext(...))`` task not yet run) is judged at the await: no
    record of the revoked partition goes out, its position stays."""
    sub = _subscribed({A: 0, B: 0})
    held = _hold(sub, {A: ([0, 1, 2, 3], 4), B: ([0, 1], 2)})
    assert sub.assignment is not None
    a = sub.assignment.state(A)
    it = iterate(held, sub, lambda: 0.0, _Steps(held, sub))
    assert (await anext(it)).offset == 0
    pending = it.__anext__()
    sub.mark_revoking([A])
    rest = [await pending]
    rest += [r async for r in it]
    assert [(r.partition, r.offset) for r in rest] == [(1, 0), (1, 1)]
    assert a.position == 1


async def test_iterate_a_cancelled_await_after_a_change_hands_out_nothing(
    iterate: Iterate,
) -> None:
    """The full step an await falls back to (something changed since ``__anext__()``)
    runs in the awaiting task: cancelling that task reaches it where it waits."""
    sub = _subscribed({A: 0})
    held = _hold(sub, {A: ([0, 1, 2], 3)})
    steps = _Steps(held, sub)
    release, waiting = asyncio.Event(), asyncio.Event()
    cancelled = []

    async def step() -> ConsumerRecord | None:
        if steps.calls == 1:
            waiting.set()
            try:
                await release.wait()  # a refill waiting for data
            except asyncio.CancelledError:
                cancelled.append(True)
                raise
        return await steps()

    it = iterate(held, sub, lambda: 0.0, step)
    assert (await anext(it)).offset == 0
    pending = it.__anext__()
    sub.delivery_changes.bump()  # an error reported, a pause...: the full step decides

    async def await_it() -> ConsumerRecord:
        return await pending  # type: ignore[no-any-return]

    task = asyncio.ensure_future(await_it())
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == [True]  # the cancellation reached the waiting step
    release.set()
    if inspect.isasyncgen(it):  # an async generator that raised is finished: a new one
        it = iterate(held, sub, lambda: 0.0, step)
    assert [r.offset async for r in it] == [1, 2]


async def test_native_bad_arguments_are_refused_with_their_reason() -> None:
    steps_type = held_steps_type()
    if steps_type is None:
        pytest.skip("no HeldSteps in this build")
    sub = SubscriptionState()
    with pytest.raises(TypeError, match="exactly 4"):
        steps_type(sub.delivery_changes, sub)
    with pytest.raises(TypeError, match="callable"):
        steps_type(sub.delivery_changes, sub, 1.0, None)
    it = steps_type(sub.delivery_changes, sub, lambda: 0.0, lambda it: None)
    with pytest.raises(ValueError, match="0 <= i <= last"):
        it.load(0, [], 0, 0, None, None)
    with pytest.raises(RuntimeError, match="no step at hand"):
        await it


async def test_without_the_native_module_iterate_is_the_async_generator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aiogroup._fetch import iteration

    monkeypatch.setenv("AIOGROUP_NATIVE", "0")
    sub = _subscribed({A: 0})
    held = _hold(sub, {A: ([0], 1)})
    it = iteration.iterate(held, sub, lambda: 0.0, _Steps(held, sub))
    assert inspect.isasyncgen(it)


async def test_two_iterators_over_the_same_held_records_hand_each_out_once(
    iterate: Iterate,
) -> None:
    sub = _subscribed({A: 0})
    held = _hold(sub, {A: (list(range(10)), 10)})
    it1 = iterate(held, sub, lambda: 0.0, _Steps(held, sub))
    it2 = iterate(held, sub, lambda: 0.0, _Steps(held, sub))
    got = [(await anext(it2 if k % 3 == 0 else it1)).offset for k in range(10)]
    assert got == list(range(10))
    assert sub.assignment is not None and sub.assignment.state(A).position == 10
    assert held.handed_out() == (10, 10)
