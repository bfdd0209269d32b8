"""The consumer's lifecycle, and what each call may do in each of its states.

``GroupConsumer`` is new, starting (``start()`` is connecting), started, stopping
(``stop()`` or ``abort()`` is running) or stopped, and never goes back (a ``start()``
that fails goes back to new).  Which calls are allowed in which state is a
decision, so it is made here, as pure functions of the state, and the facade only
asks: ``start()`` twice is a programming error (``IllegalStateError``), a stopped
consumer is ``ConsumerStoppedError`` as in aiokafka, a call before ``start()`` says
so; ``stop()`` is idempotent, and stopping a consumer that never started has
nothing to close.  While stopping, the consumer is still usable: the revoke
listener that ``stop()`` runs may commit and read positions.

The states are plain strings because they are shown as they are (``health()``,
``metrics()``): ``MemberView.lifecycle`` carries them.
"""

from __future__ import annotations

import enum

from aiokafka.errors import ConsumerStoppedError, IllegalStateError

__all__ = [
    "NEW",
    "STARTED",
    "STARTING",
    "STOPPED",
    "STOPPING",
    "Closing",
    "check_startable",
    "check_usable",
    "closing",
    "state_without_group",
]

NEW = "new"
#: start() is connecting (bootstrap, fetcher, coordinator); not usable yet.
STARTING = "starting"
STARTED = "started"
#: stop() is running: listeners called from it may still commit and read positions.
STOPPING = "stopping"
STOPPED = "stopped"


def check_startable(state: str) -> None:
    """Raise unless ``start()`` may run now."""
    if state in (STARTED, STARTING):
        raise IllegalStateError("GroupConsumer.start() called twice")
    if state == STOPPING:
        raise ConsumerStoppedError("start() while stop() is running: a stopped consumer stays so")
    if state == STOPPED:
        raise ConsumerStoppedError()


def check_usable(state: str) -> None:
    """Raise unless the consumer's state may be used (started, or being stopped)."""
    if state == NEW:
        raise IllegalStateError("GroupConsumer is not started: await consumer.start() first")
    if state == STARTING:
        raise IllegalStateError("GroupConsumer is starting: await consumer.start() first")
    if state == STOPPED:
        raise ConsumerStoppedError()


class Closing(enum.Enum):
    """What ``stop()`` or ``abort()`` has to do."""

    #: Already stopped, or being stopped by another call: nothing, at once.  (Not a
    #: wait for the other stop(): the revoke listener that stop() awaits may call
    #: stop() itself, and would then wait for its own caller.)
    NOTHING = "nothing"
    #: start() is connecting: wait for that to end (it is bounded), then ask again.
    WAIT = "wait"
    #: Never started: no client, no group; the consumer just becomes stopped.
    MARK_STOPPED = "mark_stopped"
    #: Started: shut the group membership, the fetcher and the client down.
    SHUT_DOWN = "shut_down"


def closing(state: str) -> Closing:
    if state in (STOPPED, STOPPING):
        return Closing.NOTHING
    if state == STARTING:
        return Closing.WAIT
    if state == NEW:
        return Closing.MARK_STOPPED
    return Closing.SHUT_DOWN


def state_without_group(state: str) -> str:
    """The member state ``health()`` shows for a consumer with no coordinator.

    Started without a group_id it is ``NO_GROUP``; otherwise the lifecycle state
    itself (a group consumer has no coordinator before start() and after a failed
    one).
    """
    return "NO_GROUP" if state == STARTED else state.upper()
