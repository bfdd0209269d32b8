"""The state object's futures: every waiter resolves, nothing is left pending."""

from __future__ import annotations

import asyncio
import re

import pytest
from aiokafka.errors import ConsumerStoppedError, IllegalStateError

from aiogroup._state.subscription import FetchStatus, SubscriptionState, SubscriptionType
from aiogroup.structs import OffsetResetStrategy, TopicPartition

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)
TP2 = TopicPartition("t", 2)


async def test_wait_for_subscription_resolves_on_subscribe() -> None:
    state = SubscriptionState()
    waiter = asyncio.ensure_future(state.wait_for_subscription())
    await asyncio.sleep(0)
    assert not waiter.done()
    state.subscribe(["t"])
    sub = await waiter
    assert sub.type is SubscriptionType.AUTO_TOPICS
    assert sub.effective_topics == frozenset({"t"})


async def test_pattern_subscription_tracks_matches() -> None:
    state = SubscriptionState()
    state.subscribe_pattern(re.compile("t.*"))
    assert state.subscription.effective_topics == frozenset()
    assert state.set_matched_topics(["t1", "t2"]) is True
    assert state.set_matched_topics(["t2", "t1"]) is False
    assert state.subscription.effective_topics == frozenset({"t1", "t2"})


async def test_cooperative_reassignment_keeps_state_of_kept_partitions() -> None:
    state = SubscriptionState()
    first = state.set_assignment([TP0, TP1])
    assert first is not None
    first.state(TP0).seek(42)
    second = state.set_assignment([TP0, TP2])
    assert second is not None
    assert first.unassigned.done()
    assert not second.unassigned.done()
    assert second.state(TP0) is first.state(TP0)
    assert second.state(TP0).position == 42
    # The dropped partition is flagged so no record of it is handed out any more.
    assert first.state(TP1).revoking
    assert second.state(TP2).status is FetchStatus.AWAITING_COMMITTED
    assert state.commit_refresh_needed.is_set()


async def test_mark_revoking_bumps_epoch_and_stops_fetching() -> None:
    state = SubscriptionState()
    asg = state.set_assignment([TP0])
    assert asg is not None
    st = asg.state(TP0)
    st.seek(0)
    assert asg.fetchable() == [TP0]
    epoch = st.epoch
    state.mark_revoking([TP0])
    assert st.revoking and st.epoch == epoch + 1
    assert asg.fetchable() == []


async def test_position_waiter_resolves_on_seek_and_fails_on_unassign() -> None:
    state = SubscriptionState()
    asg = state.set_assignment([TP0, TP1])
    assert asg is not None
    w0 = asyncio.ensure_future(asg.state(TP0).wait_position())
    w1 = asyncio.ensure_future(asg.state(TP1).wait_position())
    await asyncio.sleep(0)
    asg.state(TP0).seek(7)
    assert await w0 == 7
    state.set_assignment([TP0])
    with pytest.raises(IllegalStateError, match="unassigned"):
        await w1


async def test_change_waiter_resolves_on_every_seek_and_reset() -> None:
    state = SubscriptionState()
    asg = state.set_assignment([TP0, TP1])
    assert asg is not None
    st = asg.state(TP0)
    for change in (
        lambda: st.await_reset(OffsetResetStrategy.EARLIEST),
        lambda: st.seek(3),
        st.await_committed,
    ):
        waiter = asyncio.ensure_future(st.wait_changed())
        await asyncio.sleep(0)
        assert not waiter.done()
        st.consumed_to(5)  # delivery is not a change the fetcher must act on
        await asyncio.sleep(0)
        assert not waiter.done()
        change()
        await waiter
    other = asyncio.ensure_future(asg.state(TP1).wait_changed())
    await asyncio.sleep(0)
    state.set_assignment([TP0])
    with pytest.raises(IllegalStateError, match="unassigned"):
        await other


async def test_a_change_between_planning_and_waiting_is_not_missed() -> None:
    """The fetcher plans a watcher with the change count it saw; the watcher task runs a
    loop iteration later.  A change in between (the committed-offset lookup answering
    "none") used to be missed: the reset waited for some other wake-up (found in CI)."""
    state = SubscriptionState()
    asg = state.set_assignment([TP0])
    assert asg is not None
    st = asg.state(TP0)
    seen = st.changes
    watcher = asyncio.ensure_future(st.wait_changed(seen))  # not started yet
    st.await_reset()  # happens before the watcher's first step
    await asyncio.wait_for(watcher, 1)
    # With no change since ``seen``, it waits as before.
    later = asyncio.ensure_future(st.wait_changed(st.changes))
    await asyncio.sleep(0)
    assert not later.done()
    st.seek(0)
    await asyncio.wait_for(later, 1)


async def test_resume_wakes_waiter() -> None:
    state = SubscriptionState()
    asg = state.set_assignment([TP0])
    assert asg is not None
    st = asg.state(TP0)
    st.pause()
    waiter = asyncio.ensure_future(st.wait_resumed())
    await asyncio.sleep(0)
    assert not waiter.done()
    st.resume()
    await waiter
    assert not st.paused


async def test_close_fails_every_waiter() -> None:
    state = SubscriptionState()
    sub_waiter = asyncio.ensure_future(state.wait_for_subscription())
    asg_waiter = asyncio.ensure_future(state.wait_for_assignment())
    await asyncio.sleep(0)
    state.close()
    with pytest.raises(ConsumerStoppedError):
        await sub_waiter
    with pytest.raises(ConsumerStoppedError):
        await asg_waiter
    with pytest.raises(ConsumerStoppedError):
        state.subscribe(["t"])


async def test_unsubscribe_of_group_subscription_only_marks_revoking() -> None:
    state = SubscriptionState()
    state.subscribe(["t"])
    asg = state.set_assignment([TP0])
    assert asg is not None
    state.unsubscribe()
    assert state.subscription.type is SubscriptionType.NONE
    # The coordinator still has to run the revoke listener before clearing.
    assert state.assignment is asg
    assert asg.state(TP0).revoking


async def test_unsubscribe_of_manual_assignment_clears_at_once() -> None:
    state = SubscriptionState()
    state.assign_from_user([TP0])
    state.unsubscribe()
    assert state.assignment is None


async def test_pending_error_is_raised_once() -> None:
    state = SubscriptionState()
    state.report_error(RuntimeError("listener failed"))
    state.report_error(ValueError("second is dropped while first pending"))
    with pytest.raises(RuntimeError, match="listener failed"):
        state.raise_pending_error()
    state.raise_pending_error()  # nothing pending now


async def test_a_fatal_error_is_raised_by_every_poll_after_it() -> None:
    """A member out of its group for good (fenced, refused) must not look like a quiet
    topic: the first poll gets what was pending, every later one the fatal error."""
    state = SubscriptionState()
    state.report_error(RuntimeError("listener failed"))
    state.report_error(PermissionError("refused for good"), fatal=True)
    with pytest.raises(RuntimeError, match="listener failed"):
        state.raise_pending_error()
    depths = []
    for _ in range(3):
        with pytest.raises(PermissionError, match="refused for good") as caught:
            state.raise_pending_error()
        depths.append(len(caught.traceback))
    assert depths[0] == depths[-1]  # the traceback does not grow from one raise to the next
    assert isinstance(state.pending_error, PermissionError)


async def test_seek_rejects_negative_offsets() -> None:
    state = SubscriptionState(OffsetResetStrategy.EARLIEST)
    asg = state.set_assignment([TP0])
    assert asg is not None
    with pytest.raises(ValueError, match="offset must be >= 0"):
        asg.state(TP0).seek(-1)
    assert asg.state(TP0).reset_strategy is OffsetResetStrategy.EARLIEST


async def test_start_offsets_from_on_partitions_assigned_are_checked_then_applied() -> None:
    tp = TopicPartition("t", 0)
    sub = SubscriptionState()
    sub.assign_from_user([tp])
    sub.apply_start_offsets(None)  # nothing returned: nothing to do
    with pytest.raises(TypeError, match="must return None or"):
        sub.apply_start_offsets([5])
    with pytest.raises(IllegalStateError, match="which is not assigned"):
        sub.apply_start_offsets({TopicPartition("t", 1): 5})
    with pytest.raises(TypeError, match="must be an int"):
        sub.apply_start_offsets({tp: True})
    sub.apply_start_offsets({tp: 7})
    assert sub.assignment is not None and sub.assignment.state(tp).position == 7


# -- position() across rebalances: SubscriptionState.wait_position follows the partition --


def group_state(*partitions: TopicPartition) -> SubscriptionState:
    state = SubscriptionState()
    state.subscribe(["t"])
    state.set_assignment(partitions)
    return state


async def test_wait_position_of_a_partition_revoked_cooperatively_names_it() -> None:
    state = group_state(TP0, TP1)
    waiter = asyncio.ensure_future(state.wait_position(TP1))
    await asyncio.sleep(0)
    state.set_assignment([TP0])  # cooperative: TP1 revoked, TP0 kept
    with pytest.raises(IllegalStateError, match=r"partition .*partition=1.* was revoked"):
        await waiter


async def test_wait_position_follows_a_partition_given_back_after_an_eager_revoke() -> None:
    state = group_state(TP0, TP1)
    w0 = asyncio.ensure_future(state.wait_position(TP0))
    w1 = asyncio.ensure_future(state.wait_position(TP1))
    await asyncio.sleep(0)
    state.set_assignment(None)  # eager: everything revoked, the rebalance decides
    await asyncio.sleep(0)
    assert not w0.done() and not w1.done()
    new = state.set_assignment([TP0])  # TP0 back to this member, TP1 elsewhere
    assert new is not None
    with pytest.raises(IllegalStateError, match=r"partition=1.* was revoked"):
        await w1
    await asyncio.sleep(0)
    assert not w0.done()
    new.state(TP0).seek(11)  # the new state's committed offset is found
    assert await w0 == 11


async def test_wait_position_ends_when_the_group_subscription_is_dropped() -> None:
    state = group_state(TP0)
    waiter = asyncio.ensure_future(state.wait_position(TP0))
    await asyncio.sleep(0)
    state.set_assignment(None)
    await asyncio.sleep(0)
    assert not waiter.done()
    state.unsubscribe()  # no assignment will come: the wait must not go on
    with pytest.raises(IllegalStateError, match="was revoked"):
        await waiter


async def test_wait_position_ends_on_close_while_a_rebalance_decides() -> None:
    state = group_state(TP0)
    waiter = asyncio.ensure_future(state.wait_position(TP0))
    await asyncio.sleep(0)
    state.set_assignment(None)
    await asyncio.sleep(0)
    state.close()
    with pytest.raises(ConsumerStoppedError):
        await waiter
    assert state._assignment_waiters == [] and state._any_subscription_waiters == []


async def test_wait_position_of_an_unassigned_partition_fails_at_once() -> None:
    state = group_state(TP0)
    with pytest.raises(IllegalStateError, match="not assigned"):
        await state.wait_position(TP1)


async def test_wait_position_bounded_by_a_timeout_leaves_no_waiter_behind() -> None:
    state = group_state(TP0)
    waiter = asyncio.ensure_future(state.wait_position(TP0))
    await asyncio.sleep(0)
    state.set_assignment(None)  # eager: waiting for the assignment that decides
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(waiter, 0.05)
    assert state._assignment_waiters == [] and state._any_subscription_waiters == []
