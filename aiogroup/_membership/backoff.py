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

__all__ = ["DEFAULT_BACKOFF_MAX", "RetryPolicy", "Retrying"]

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


@dataclass(slots=True)
class Retrying:
    """One request a machine repeats by its :class:`RetryPolicy`: in flight or not,
    consecutive failures, when the next try is due (None: nothing is due until a
    failure), or done for good (the policy's attempts spent, or nothing left to ask).

    The machine asks :meth:`due` on each tick and :meth:`deadline` for its next
    timer; the shell sends what the machine emits and feeds the answer back.  No
    clock is read here: ``now`` is the machine's.
    """

    policy: RetryPolicy
    in_flight: bool = False
    failures: int = 0
    due_at: float | None = 0.0
    done: bool = False

    def due(self, now: float) -> bool:
        return (
            not self.done and not self.in_flight and self.due_at is not None and now >= self.due_at
        )

    def deadline(self) -> list[float]:
        if self.done or self.in_flight or self.due_at is None:
            return []
        return [self.due_at]

    def sent(self) -> None:
        self.in_flight = True

    def succeeded(self) -> None:
        self.in_flight = False
        self.failures = 0

    def failed(self, now: float) -> None:
        self.in_flight = False
        self.failures += 1
        if self.policy.exhausted(self.failures):
            self.done = True
        else:
            self.due_at = now + self.policy.delay(self.failures)
