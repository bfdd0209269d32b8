"""One share session (KIP-932) with one partition leader: its epoch and its partitions.

Why a module of its own: a share consumer reads each leader through a *share session*,
and what each ShareFetch / ShareAcknowledge must say - the session epoch, the
partitions to add, the partitions to forget - follows from the session's history
alone.  That is arithmetic over plain data; the fetch loop asks it what to send and
tells it what came back, so every session error path is a unit test.

Facts (KIP-932, Apache Kafka's ShareSessionHandler / ShareRequestMetadata):

* Epoch 0 opens a session and lists every partition to read; afterwards each request
  carries the next epoch (1, 2, ... wrapping from 2^31-1 to 1) and names only the
  partitions it adds (or acknowledges in), with the partitions to drop as
  ``forgotten``.  Epoch -1 closes the session (the last ShareAcknowledge of a close).
* The epoch moves on only with an answer: requests to one leader go one at a time.
* An epoch-0 request replaces any session the member had with that broker, and a
  broker ends a session whose connection dropped (Kafka >= 4.1): either way the
  records acquired in the old session are released by the broker.  So an
  acknowledgement never rides on an epoch-0 request - its records are gone.
* SHARE_SESSION_NOT_FOUND / INVALID_SHARE_SESSION_EPOCH: the broker lost (or never
  had) our session: reopen at epoch 0, the acquired records of the session are
  forgotten.  SHARE_SESSION_LIMIT_REACHED: the broker holds too many sessions: the
  same, after a backoff.  A request without an answer is treated as a lost session
  (the connection it used is gone, so the broker ended the session).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from aiogroup._protocol.share_types import AckBatch

__all__ = [
    "CLOSE_EPOCH",
    "OPEN_EPOCH",
    "SessionReaction",
    "SessionRequest",
    "ShareSession",
    "session_reaction",
]

OPEN_EPOCH = 0
CLOSE_EPOCH = -1
_MAX_EPOCH = 2**31 - 1

IdPartition = tuple[uuid.UUID, int]

#: Top-level share-session error codes (Errors.java).
SHARE_SESSION_NOT_FOUND = 122
INVALID_SHARE_SESSION_EPOCH = 123
SHARE_SESSION_LIMIT_REACHED = 133


class SessionReaction(enum.Enum):
    OK = "ok"
    #: The session is gone: reopen at epoch 0; its acquired records are forgotten.
    REOPEN = "reopen"
    #: As REOPEN, after a backoff (the broker is out of session slots).
    REOPEN_LATER = "reopen after a backoff"


def session_reaction(error_code: int) -> SessionReaction:
    """What a top-level error code does to the session.

    Only the share-session codes have a documented reaction; any other top-level error
    (the whole request refused) leaves the broker's session state unknown, so the
    session is reopened too - the conservative choice: the broker releases the old
    session's records on an epoch-0 request.
    """
    if error_code == 0:
        return SessionReaction.OK
    if error_code == SHARE_SESSION_LIMIT_REACHED:
        return SessionReaction.REOPEN_LATER
    return SessionReaction.REOPEN


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """What the next request to this leader says (the shell builds the wire request)."""

    epoch: int
    #: Partitions to name, each with the acknowledgements it carries (maybe none).
    topics: Mapping[uuid.UUID, Mapping[int, Sequence[AckBatch]]]
    forgotten: Mapping[uuid.UUID, tuple[int, ...]]
    #: The partitions the session holds once this request is answered.
    after: frozenset[IdPartition]


@dataclass(slots=True)
class ShareSession:
    """The session with one leader.  ``generation`` counts the sessions opened, so an
    acquisition can name the session it belongs to."""

    node_id: int
    epoch: int = OPEN_EPOCH
    #: The partitions the broker holds in the session (as of the last answer).
    partitions: frozenset[IdPartition] = frozenset()
    generation: int = 0
    in_flight: SessionRequest | None = None
    closed: bool = False

    @property
    def is_open(self) -> bool:
        """A session exists on the broker (an answer at epoch >= 1 is expected next)."""
        return self.epoch != OPEN_EPOCH and not self.closed

    def fetch_request(
        self,
        wanted: Iterable[IdPartition],
        acks: Mapping[IdPartition, Sequence[AckBatch]] | None = None,
    ) -> SessionRequest:
        """The next ShareFetch: read ``wanted`` (all of it, epoch 0; else what is new),
        carrying ``acks`` (refused at epoch 0: those records are gone)."""
        self._check_ready()
        acks = acks or {}
        if self.epoch == OPEN_EPOCH and acks:
            raise ValueError("an acknowledgement cannot ride on an epoch-0 ShareFetch")
        want = frozenset(wanted)
        if self.epoch == OPEN_EPOCH:
            named = set(want)
            forgotten: frozenset[IdPartition] = frozenset()
        else:
            named = set(want - self.partitions)
            forgotten = self.partitions - want
        named |= set(acks)
        request = SessionRequest(
            self.epoch,
            _by_topic(named, acks),
            _forgotten(forgotten),
            want,
        )
        self.in_flight = request
        return request

    def acknowledge_request(
        self, acks: Mapping[IdPartition, Sequence[AckBatch]], *, close: bool = False
    ) -> SessionRequest:
        """The next ShareAcknowledge (``close``: with epoch -1, ending the session)."""
        self._check_ready()
        if self.epoch == OPEN_EPOCH:
            raise ValueError("no share session is open with this leader to acknowledge in")
        request = SessionRequest(
            CLOSE_EPOCH if close else self.epoch,
            _by_topic(set(acks), acks),
            {},
            self.partitions,
        )
        self.in_flight = request
        return request

    def answered(self, error_code: int) -> SessionReaction:
        """The in-flight request got an answer with this top-level code."""
        request = self._take()
        reaction = session_reaction(error_code)
        if reaction is not SessionReaction.OK:
            self._reset()
        elif request.epoch == CLOSE_EPOCH:
            self.closed = True
            self.partitions = frozenset()
        else:
            self.partitions = request.after
            self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1
        return reaction

    def failed(self) -> SessionReaction:
        """The in-flight request got no answer: the broker ended the session (or will)."""
        request = self._take()
        if request.epoch == CLOSE_EPOCH:
            self.closed = True
            self.partitions = frozenset()
        else:
            self._reset()
        return SessionReaction.REOPEN

    def reset(self) -> None:
        """Forget the session (the member was fenced, or left): the next request opens one."""
        if self.in_flight is not None:
            raise ValueError("cannot reset a share session while a request is in flight")
        self._reset()
        self.closed = False

    def _reset(self) -> None:
        self.epoch = OPEN_EPOCH
        self.partitions = frozenset()
        self.generation += 1

    def _take(self) -> SessionRequest:
        request = self.in_flight
        if request is None:
            raise ValueError("no request to this leader is in flight")
        self.in_flight = None
        return request

    def _check_ready(self) -> None:
        if self.in_flight is not None:
            raise ValueError(
                f"a request to node {self.node_id} is in flight: one at a time per share session"
            )
        if self.closed:
            raise ValueError(f"the share session with node {self.node_id} is closed")


def _by_topic(
    named: Iterable[IdPartition], acks: Mapping[IdPartition, Sequence[AckBatch]]
) -> dict[uuid.UUID, dict[int, tuple[AckBatch, ...]]]:
    out: dict[uuid.UUID, dict[int, tuple[AckBatch, ...]]] = {}
    for tid, p in sorted(named, key=lambda tp: (tp[0].bytes, tp[1])):
        out.setdefault(tid, {})[p] = tuple(acks.get((tid, p), ()))
    return out


def _forgotten(parts: Iterable[IdPartition]) -> dict[uuid.UUID, tuple[int, ...]]:
    out: dict[uuid.UUID, list[int]] = {}
    for tid, p in parts:
        out.setdefault(tid, []).append(p)
    return {tid: tuple(sorted(ps)) for tid, ps in sorted(out.items(), key=lambda kv: kv[0].bytes)}
