"""How long to wait before asking again: one retry policy, as data.

Why one: a member retries many things - a coordinator lookup, a metadata lookup
for topic ids, the group's session timeout, a missing topic - and each used to
pick its own shape (a fixed backoff, ``backoff * (attempt + 1)``, a doubling
capped by hand).  Kafka's clients use one rule (KIP-580): the delay starts at
``retry.backoff.ms`` and doubles on each consecutive failure up to
``retry.backoff.max.ms``.  The machines hold a policy and a failure count and
decide *when* the next try is due as a deadline of their own, so a retry is a
plain event on virtual time in their unit tests, never a sleep.

No jitter: a machine is a function of its inputs.  (KIP-580 adds +-20% to spread
many clients' retries; a shell that wants it can add it to the deadline it is
handed.)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_BACKOFF_MAX", "RetryPolicy"]

#: The longest wait between tries unless a caller says otherwise, in seconds: the
#: default of Java's ``retry.backoff.max.ms``.
DEFAULT_BACKOFF_MAX = 1.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential backoff from ``initial`` to ``maximum`` seconds; ``attempts`` tries
    in all (None: no limit)."""

    initial: float
    maximum: float
    multiplier: float = 2.0
    attempts: int | None = None

    def __post_init__(self) -> None:
        if self.initial <= 0 or self.maximum < self.initial:
            raise ValueError(
                f"a retry policy needs 0 < initial <= maximum, got {self.initial}, {self.maximum}"
            )
        if self.multiplier < 1:
            raise ValueError(f"the backoff multiplier must be >= 1, got {self.multiplier}")
        if self.attempts is not None and self.attempts < 1:
            raise ValueError(f"attempts must be >= 1 or None, got {self.attempts}")

    def delay(self, failures: int) -> float:
        """The wait after the ``failures``-th consecutive failure (1 = the first)."""
        if failures < 1:
            return 0.0
        return min(self.maximum, self.initial * self.multiplier ** (failures - 1))

    def exhausted(self, failures: int) -> bool:
        """No try is left after ``failures`` consecutive failures."""
        return self.attempts is not None and failures >= self.attempts

    @classmethod
    def from_backoff(cls, backoff: float, maximum: float = DEFAULT_BACKOFF_MAX) -> RetryPolicy:
        """The policy of a ``retry_backoff_ms`` setting: doubling from it up to ``maximum``
        (or to the backoff itself when that is longer)."""
        return cls(backoff, max(backoff, maximum))
