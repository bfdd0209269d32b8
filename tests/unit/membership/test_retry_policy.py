"""The one retry policy (KIP-580's exponential backoff) and the lookups the
consumer-protocol machine retries by it, on virtual time: a retry is an event and a
deadline, never a sleep."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from aiogroup._membership import actions as acts
from aiogroup._membership import events as E
from aiogroup._membership.backoff import Retrying, RetryPolicy
from aiogroup._membership.consumer_group import SESSION_LOOKUP_ATTEMPTS, ConsumerMembership
from aiogroup._membership.machine import Membership

T = uuid.UUID(int=0xA)


def test_the_delay_doubles_from_the_initial_backoff_up_to_the_maximum() -> None:
    policy = RetryPolicy(0.1, 1.0)
    assert [policy.delay(n) for n in range(6)] == [0.0, 0.1, 0.2, 0.4, 0.8, 1.0]
    assert not policy.exhausted(1000)
    fixed = RetryPolicy(0.5, 0.5, multiplier=1.0, attempts=3)
    assert [fixed.delay(n) for n in (1, 2, 3)] == [0.5, 0.5, 0.5]
    assert [fixed.exhausted(n) for n in (1, 2, 3)] == [False, False, True]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"initial": 0.0, "maximum": 1.0}, "initial"),
        ({"initial": 2.0, "maximum": 1.0}, "initial"),
        ({"initial": 0.1, "maximum": 1.0, "multiplier": 0.5}, "multiplier"),
        ({"initial": 0.1, "maximum": 1.0, "attempts": 0}, "attempts"),
    ],
)
def test_a_policy_that_cannot_work_is_refused(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]


def _joined(**options: object) -> tuple[ConsumerMembership, list[acts.Action]]:
    """A member whose join was answered with a target of one unnamed topic id; every
    action of the way there."""
    m = ConsumerMembership("g", "m-1", retry_backoff=0.1, **options)  # type: ignore[arg-type]
    out = m.handle(E.Subscribed(frozenset({"a"})), 0.0)
    out += m.handle(E.CoordinatorFound(1), 0.0)
    out += m.handle(
        E.ConsumerGroupHeartbeatResponseReceived(
            0, member_epoch=1, heartbeat_interval_ms=3000, assignment={T: (0,)}
        ),
        0.0,
    )
    return m, out


def _of(kind: type[acts.Action], out: list[acts.Action]) -> list[acts.Action]:
    return [a for a in out if isinstance(a, kind)]


def test_topic_names_are_asked_for_again_by_the_policy_until_they_come() -> None:
    m, out = _joined()
    assert _of(acts.RequestMetadata, out) == [acts.RequestMetadata(frozenset({T}))]
    # In flight: nothing more is asked, whatever wakes the machine.
    assert not _of(acts.RequestMetadata, m.handle(E.TimerFired(), 0.05))
    # The lookup fails: the next try is due one backoff later, then two.
    m.handle(E.TopicNamesLookupFailed(OSError("refused")), 0.1)
    assert m.next_deadline() == pytest.approx(0.2)
    assert not _of(acts.RequestMetadata, m.handle(E.TimerFired(), 0.19))
    assert _of(acts.RequestMetadata, m.handle(E.TimerFired(), 0.2))
    # Answered, but the broker does not know the topic yet: asked again, later.
    m.handle(E.TopicNamesResolved({}), 0.3)
    assert m.names_lookup.due_at == pytest.approx(0.5)
    assert _of(acts.RequestMetadata, m.handle(E.TimerFired(), 0.5))
    out = m.handle(E.TopicNamesResolved({T: "a"}), 0.6)
    # Named: the assignment is reconciled and nobody asks again.
    assert _of(acts.InvokeOnPartitionsAssigned, out)
    assert m.names_lookup.failures == 0
    assert not _of(acts.RequestMetadata, m.handle(E.TimerFired(), 10.0))


def test_the_session_timeout_is_asked_for_a_few_times_then_the_gate_keeps_its_bound() -> None:
    m, out = _joined(learn_session_timeout=True)
    assert _of(acts.LookupSessionTimeout, out) == [acts.LookupSessionTimeout()]
    t = 0.0
    for attempt in range(1, SESSION_LOOKUP_ATTEMPTS):
        t += 0.01
        m.handle(E.SessionTimeoutLookupFailed(OSError("denied")), t)
        due = m.session_lookup.due_at
        assert due == pytest.approx(t + 0.1 * 2 ** (attempt - 1))
        assert not _of(acts.LookupSessionTimeout, m.handle(E.TimerFired(), due - 0.001))
        t = due
        assert _of(acts.LookupSessionTimeout, m.handle(E.TimerFired(), t))
    m.handle(E.SessionTimeoutLookupFailed(OSError("denied")), t + 0.01)
    assert m.session_lookup.done and m.session_timeout is None
    assert not _of(acts.LookupSessionTimeout, m.handle(E.TimerFired(), 100.0))


def test_a_learned_session_timeout_ends_the_lookup() -> None:
    m, out = _joined(learn_session_timeout=True)
    assert _of(acts.LookupSessionTimeout, out)
    m.handle(E.SessionTimeoutLearned(45000), 0.2)
    assert m.session_timeout == 45.0 and m.session_lookup.done
    assert not _of(acts.LookupSessionTimeout, m.handle(E.TimerFired(), 100.0))


def test_without_learn_session_timeout_nothing_is_asked() -> None:
    m, out = _joined()
    assert not _of(acts.LookupSessionTimeout, out)
    assert not _of(acts.LookupSessionTimeout, m.handle(E.TimerFired(), 100.0))


# -- asking again for committed offsets: both machines, on virtual time ------------------


def _classic() -> Membership:
    from tests.unit.membership.driver import make, to_stable, tps

    m = make()
    to_stable(m, tps(0, 1))
    return m


def _consumer() -> ConsumerMembership:
    return _joined()[0]


@pytest.mark.parametrize("machine", [_classic, _consumer], ids=["classic", "consumer"])
def test_a_failed_committed_lookup_is_asked_again_once_after_one_backoff(machine: Any) -> None:
    m = machine()
    backoff = 0.1  # both machines are built with retry_backoff 0.1
    failed = E.CommittedOffsetsUnavailable(TimeoutError("no answer"), retriable=True)
    assert not _of(acts.RefreshCommittedOffsets, m.handle(E.TimerFired(), 0.5))  # idle
    out = m.handle(failed, 1.0)
    assert not _of(acts.RefreshCommittedOffsets, out)  # not at once: after the backoff
    assert not _of(acts.RaiseToApplication, out)  # retriable: the application is not told
    assert m.next_deadline() is not None and m.next_deadline() <= 1.0 + backoff
    early = m.handle(E.TimerFired(), 1.0 + backoff / 2)
    assert not _of(acts.RefreshCommittedOffsets, early)
    due = m.handle(E.TimerFired(), 1.0 + backoff)
    assert _of(acts.RefreshCommittedOffsets, due) == [acts.RefreshCommittedOffsets()]
    # Asked: nothing more until the shell reports another failure.
    assert not _of(acts.RefreshCommittedOffsets, m.handle(E.TimerFired(), 5.0))
    m.handle(failed, 6.0)
    again = m.handle(E.TimerFired(), 6.0 + backoff)
    assert _of(acts.RefreshCommittedOffsets, again) == [acts.RefreshCommittedOffsets()]


@pytest.mark.parametrize("machine", [_classic, _consumer], ids=["classic", "consumer"])
def test_a_lookup_that_cannot_succeed_reaches_the_application_and_is_still_retried(
    machine: Any,
) -> None:
    m = machine()
    denied = E.CommittedOffsetsUnavailable(PermissionError("no READ on the group"), False)
    out = m.handle(denied, 1.0)
    raised = _of(acts.RaiseToApplication, out)
    assert len(raised) == 1 and isinstance(raised[0], acts.RaiseToApplication)
    assert isinstance(raised[0].exception, PermissionError)
    # An ACL can be granted meanwhile: the positions are asked for again.
    out = m.handle(E.TimerFired(), 1.1)  # retry_backoff 0.1
    assert _of(acts.RefreshCommittedOffsets, out) == [acts.RefreshCommittedOffsets()]


def test_retrying_is_idle_until_a_failure_when_built_without_a_due_time() -> None:
    r = Retrying(RetryPolicy(0.1, 0.1), due_at=None)
    assert not r.due(100.0) and r.deadline() == []
    r.failed(1.0)
    assert r.deadline() == [1.1] and not r.due(1.05) and r.due(1.1)
    r.sent()
    assert not r.due(2.0) and r.deadline() == []
    r.failed(3.0)
    assert r.failures == 2 and r.deadline() == [3.1]


def test_missing_subscribed_topics_are_looked_up_with_a_growing_backoff_until_they_show() -> None:
    m = _classic()  # retry_backoff 0.1
    late = frozenset({"late"})
    assert not _of(acts.LookupMissingTopics, m.handle(E.SubscribedTopicsMissing(late), 1.0))
    asked_at = []
    now = 1.0
    for _ in range(6):  # each answer: still missing
        deadline = m.next_deadline()
        assert deadline is not None
        now = deadline
        lookups = _of(acts.LookupMissingTopics, m.handle(E.TimerFired(), now))
        if not lookups:
            continue  # another of the machine's timers (the heartbeat)
        assert lookups == [acts.LookupMissingTopics(late)]
        asked_at.append(now)
        m.handle(E.SubscribedTopicsMissing(late), now)
    gaps = [round(b - a, 3) for a, b in zip([1.0, *asked_at], asked_at, strict=False)]
    assert gaps[:4] == [0.1, 0.2, 0.4, 0.8][: len(gaps[:4])] and len(gaps) >= 3
    assert all(g <= 1.0 for g in gaps)
    # The topic shows: nothing more is asked for.
    m.handle(E.SubscribedTopicsMissing(frozenset()), now)
    assert not _of(acts.LookupMissingTopics, m.handle(E.TimerFired(), now + 30))
