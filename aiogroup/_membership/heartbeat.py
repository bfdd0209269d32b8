"""Heartbeat, session and poll deadlines as plain arithmetic over an injected ``now``.

Shaped like the Java client's ``Heartbeat``: the caller reports what happened (sent,
answered, failed, polled) with the loop time and asks when the next thing is due;
nothing reads a clock, so the machine and its tests decide time.

Two session clocks, because they answer two questions:

* ``session_deadline()`` - until when the membership is *proven*: when the request
  whose answer proved it last was *sent* (``succeeded`` dates it from ``sent``; a
  sync from its sending, a join from its answer) plus ``session_timeout``.  The send
  time, because an answer proves only what the broker saw when it handled the request,
  which is no earlier than the sending: an answer read late (a slow broker, or a
  process stopped with the answer unread while the broker evicted it) must not
  reopen the gate.  The
  coordinator publishes it as the delivery gate (``SubscriptionState
  .membership_valid_until``): past it, a broker may have evicted the member and
  handed its partitions on, so no record is handed out until an answer decides.
* ``session_check_deadline()`` - when to suspect the coordinator, as Java's
  heartbeat thread does: a session without a proving answer marks the coordinator
  unknown and finds it again, keeping member id and generation.  Finding it restarts
  this clock (``coordinator_found``; Java's ``resetSessionTimeout`` on discovery), so
  the new coordinator gets a whole session to answer before the next lookup - but
  never the proof clock: only an answer moves the gate.

Which answers prove the session is the machine's call (``machine.HEARTBEAT_ANSWERS``).
"""

from __future__ import annotations

__all__ = ["HeartbeatTimers"]


class HeartbeatTimers:
    """Deadlines in float seconds on the caller's clock."""

    __slots__ = (
        "_check_from",
        "_last_ok",
        "_last_poll",
        "_last_sent",
        "_retry_at",
        "heartbeat_interval",
        "in_flight",
        "max_poll_interval",
        "retry_backoff",
        "session_timeout",
    )

    def __init__(
        self,
        *,
        session_timeout: float,
        heartbeat_interval: float,
        max_poll_interval: float,
        retry_backoff: float,
    ) -> None:
        if session_timeout <= 0 or heartbeat_interval <= 0 or max_poll_interval <= 0:
            raise ValueError("session, heartbeat and max-poll intervals must be > 0")
        if heartbeat_interval >= session_timeout:
            raise ValueError(
                f"heartbeat_interval ({heartbeat_interval}s) must be below "
                f"session_timeout ({session_timeout}s)"
            )
        if retry_backoff < 0:
            raise ValueError("retry_backoff must be >= 0")
        self.session_timeout = session_timeout
        self.heartbeat_interval = heartbeat_interval
        self.max_poll_interval = max_poll_interval
        self.retry_backoff = retry_backoff
        self._last_ok = 0.0
        self._check_from = 0.0
        self._last_sent = 0.0
        self._retry_at: float | None = None
        self._last_poll = 0.0
        self.in_flight = False

    # -- session -----------------------------------------------------------------------

    def reset_session(self, now: float, *, proven_at: float | None = None) -> None:
        """A join/sync just succeeded: the session is fresh, the next beat is an interval away.

        ``proven_at``: when the request that proved it was sent (default ``now``).
        """
        self._last_ok = now if proven_at is None else min(proven_at, now)
        self._check_from = now
        self._last_sent = now
        self._retry_at = None
        self.in_flight = False

    def sent(self, now: float) -> None:
        self._last_sent = now
        self._retry_at = None
        self.in_flight = True

    def succeeded(self, now: float) -> None:
        """An answer that proves the coordinator still knows us: the session restarts.

        The proof dates from the beat's sending (see the module docstring); the check
        clock, which only decides when to suspect the coordinator, from the answer.
        """
        self._last_ok = max(self._last_ok, self._last_sent)
        self._check_from = now
        self.in_flight = False

    @property
    def last_sent(self) -> float:
        """When the last beat was sent (or the session reset): what an answer proves."""
        return self._last_sent

    def failed(self, now: float) -> None:
        """No usable answer: retry after the backoff rather than a whole interval."""
        self.in_flight = False
        self._retry_at = now + self.retry_backoff

    def beat_early(self, at: float) -> None:
        """The next beat is due at ``at`` if that is sooner than the regular one."""
        self._retry_at = min(at, self.next_heartbeat_at())

    def answer_is_current(self, now: float) -> bool:
        """Whether an answer to the beat in flight, read at ``now``, still proves anything:
        its proof (the beat's send time plus the session) must not have passed."""
        return now < self._last_sent + self.session_timeout

    def answered(self) -> None:
        """An answer arrived that does not prove the session (stale, or an error)."""
        self.in_flight = False

    def next_heartbeat_at(self) -> float:
        if self._retry_at is not None:
            return self._retry_at
        return self._last_sent + self.heartbeat_interval

    def session_deadline(self) -> float:
        return self._last_ok + self.session_timeout

    def session_expired(self, now: float) -> bool:
        """No answer has proven the membership for a whole session (the gate is shut)."""
        return now >= self.session_deadline()

    def coordinator_found(self, now: float) -> None:
        """A coordinator was (re)discovered: give it a whole session to answer.

        The proof clock does not move - discovering a broker proves nothing about
        the membership.
        """
        self._check_from = max(self._check_from, now)

    def session_check_deadline(self) -> float:
        """When a coordinator that has not proven the session is to be suspected."""
        return max(self._last_ok, self._check_from) + self.session_timeout

    def session_check_due(self, now: float) -> bool:
        return now >= self.session_check_deadline()

    # -- application polls ----------------------------------------------------------------

    def polled(self, now: float) -> None:
        self._last_poll = max(self._last_poll, now)

    @property
    def last_poll(self) -> float:
        return self._last_poll
