"""lifecycle: what start(), stop() and every other call may do in each consumer state."""

from __future__ import annotations

import pytest
from aiokafka.errors import ConsumerStoppedError, IllegalStateError

from aiogroup._support.lifecycle import (
    NEW,
    STARTED,
    STARTING,
    STOPPED,
    STOPPING,
    Closing,
    check_startable,
    check_usable,
    closing,
    state_without_group,
)

STATES = (NEW, STARTING, STARTED, STOPPING, STOPPED)


@pytest.mark.parametrize(
    ("state", "error", "message"),
    [
        (NEW, None, None),
        (STARTING, IllegalStateError, "start() called twice"),
        (STARTED, IllegalStateError, "start() called twice"),
        (STOPPING, ConsumerStoppedError, "while stop() is running"),
        (STOPPED, ConsumerStoppedError, None),
    ],
)
def test_start(state: str, error: type[Exception] | None, message: str | None) -> None:
    if error is None:
        check_startable(state)
        return
    with pytest.raises(error) as info:
        check_startable(state)
    if message is not None:
        assert message in str(info.value)


@pytest.mark.parametrize(
    ("state", "error", "message"),
    [
        (NEW, IllegalStateError, "not started: await consumer.start() first"),
        (STARTING, IllegalStateError, "is starting: await consumer.start() first"),
        (STARTED, None, None),
        (STOPPING, None, None),  # stop()'s revoke listener may still commit
        (STOPPED, ConsumerStoppedError, None),
    ],
)
def test_use(state: str, error: type[Exception] | None, message: str | None) -> None:
    if error is None:
        check_usable(state)
        return
    with pytest.raises(error) as info:
        check_usable(state)
    if message is not None:
        assert message in str(info.value)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (NEW, Closing.MARK_STOPPED),
        (STARTING, Closing.WAIT),
        (STARTED, Closing.SHUT_DOWN),
        (STOPPING, Closing.NOTHING),
        (STOPPED, Closing.NOTHING),
    ],
)
def test_stop(state: str, expected: Closing) -> None:
    assert closing(state) is expected


@pytest.mark.parametrize(
    ("state", "shown"),
    [
        (NEW, "NEW"),
        (STARTING, "STARTING"),
        (STARTED, "NO_GROUP"),
        (STOPPING, "STOPPING"),
        (STOPPED, "STOPPED"),
    ],
)
def test_the_member_state_shown_without_a_group(state: str, shown: str) -> None:
    assert state_without_group(state) == shown


def test_the_states_are_distinct_lower_case_words() -> None:
    """health() and metrics() show them as they are."""
    assert len(set(STATES)) == 5
    assert all(s.isalpha() and s.islower() for s in STATES)
