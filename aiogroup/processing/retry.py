"""The retry policy: how often a failing handler is tried again, and how long to wait.

Data, not behaviour: the processor asks :meth:`RetryPolicy.delay_after` after each
failed attempt and either sleeps that long or gives up (``None``), so the policy is
tested without an event loop.  Backoff doubles from ``backoff_ms`` up to
``max_backoff_ms`` (no jitter: a retried record holds its ordering lane, so the
delay only spaces out calls to a struggling dependency).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """``attempts`` calls at most per record (1 = no retry), exponential backoff between.

    A failed attempt is a handler exception or, with ``record_timeout_ms``, a handler
    that overran it.
    """

    attempts: int = 3
    backoff_ms: int = 100
    max_backoff_ms: int = 5_000

    def __post_init__(self) -> None:
        for name in ("attempts", "backoff_ms", "max_backoff_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"RetryPolicy.{name} must be an int, got {value!r}")
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}")
        if self.backoff_ms < 0:
            raise ValueError(f"RetryPolicy.backoff_ms must be >= 0, got {self.backoff_ms}")
        if self.max_backoff_ms < self.backoff_ms:
            raise ValueError(
                f"RetryPolicy.max_backoff_ms ({self.max_backoff_ms}) must be >= "
                f"backoff_ms ({self.backoff_ms})"
            )

    def delay_after(self, attempt: int) -> float | None:
        """Seconds to wait after failed attempt number ``attempt`` (1-based); None: give up."""
        if attempt < 1:
            raise ValueError(f"attempt numbers start at 1, got {attempt}")
        if attempt >= self.attempts:
            return None
        ms = min(self.max_backoff_ms, self.backoff_ms << min(attempt - 1, 62))
        return ms / 1000
