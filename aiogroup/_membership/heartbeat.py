"""Heartbeat, session and poll deadlines as plain arithmetic over an injected ``now``.

Shaped like the Java client's ``Heartbeat``: the caller reports what happened (sent,
answered, failed, polled) with the loop time and asks when the next thing is due;
nothing reads a clock, so the machine and its tests decide time.

Why a client-side session check: a member whose heartbeats cannot get through must
assume it was evicted once ``session_timeout`` passed without an answer proving its
membership (some brokers even readmit an evicted member under its old id, hiding the
loss).  Which answers prove it is the machine's call (``machine.HEARTBEAT_ANSWERS``).
"""

from __future__ import annotations

__all__ = ["HeartbeatTimers"]


class HeartbeatTimers:
    """Deadlines in float seconds on the caller's clock."""

    __slots__ = (
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
        self._last_sent = 0.0
        self._retry_at: float | None = None
        self._last_poll = 0.0
        self.in_flight = False

    # -- session -----------------------------------------------------------------------

    def reset_session(self, now: float) -> None:
        """A join/sync just succeeded: the session is fresh, the next beat is an interval away."""
        self._last_ok = now
        self._last_sent = now
        self._retry_at = None
        self.in_flight = False

    def sent(self, now: float) -> None:
        self._last_sent = now
        self._retry_at = None
        self.in_flight = True

    def succeeded(self, now: float) -> None:
        """An answer that proves the coordinator still knows us: the session restarts."""
        self._last_ok = now
        self.in_flight = False

    def failed(self, now: float) -> None:
        """No usable answer: retry after the backoff rather than a whole interval."""
        self.in_flight = False
        self._retry_at = now + self.retry_backoff

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
        return now >= self.session_deadline()

    # -- application polls ----------------------------------------------------------------

    def polled(self, now: float) -> None:
        self._last_poll = max(self._last_poll, now)

    @property
    def last_poll(self) -> float:
        return self._last_poll
