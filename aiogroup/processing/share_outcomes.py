"""A share processor's decisions as data: which acknowledgement ends each record, and
what the broker's answers mean for the counts.

Why a module of its own: on a share group the processor commits nothing; every record
ends with one acknowledgement (ACCEPT, RELEASE, REJECT), and a lock may be lost
while its handler still runs.  Which type follows which outcome, and when a record
counts as *accepted* (only when the broker confirmed the ACCEPT - a refused or failed
acknowledgement means the broker gave the record to someone else), is decided here,
without I/O or a clock, and unit-tested; :mod:`~aiogroup.processing.share_processor`
performs it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from aiogroup._fetch.share_acknowledgements import AckResult
from aiogroup._protocol.share_types import AcknowledgeType
from aiogroup.processing.dead_letter import DeadLetter

__all__ = [
    "ON_FAILURE_CHOICES",
    "Outcome",
    "ShareTally",
    "acknowledgement_for",
    "check_on_failure",
]

#: How a record's time in the processor ended.
#: ``finished``: the handler returned; ``dead_lettered``: failed every attempt and was
#: produced to the dead-letter topic; ``failed``: failed every attempt (and, with a
#: DeadLetter choice, its produce failed too); ``cancelled``: stopped before it finished
#: (stop()'s drain ran out) or never started (waiting when the processor stopped).
Outcome = Literal["finished", "dead_lettered", "failed", "cancelled"]
OUTCOMES: tuple[str, ...] = get_args(Outcome)

#: The string choices of ``on_failure`` (besides ``DeadLetter(topic=...)``).
ON_FAILURE_CHOICES = ("stop", "release", "reject")


def check_on_failure(on_failure: object) -> None:
    """Refuse an ``on_failure`` that is none of the choices, naming them."""
    if isinstance(on_failure, DeadLetter):
        return
    if on_failure not in ON_FAILURE_CHOICES:
        raise ValueError(
            'on_failure must be "stop", "release", "reject" or DeadLetter(topic=...), '
            f"got {on_failure!r}"
        )


def acknowledgement_for(outcome: Outcome, on_failure: str | DeadLetter) -> AcknowledgeType:
    """The acknowledgement that ends a record with ``outcome``.

    * finished, dead-lettered: ACCEPT (its work is done; a dead letter holds it now);
    * cancelled: RELEASE - unfinished work goes back to be delivered again, at once,
      rather than after the lock;
    * failed: REJECT with ``on_failure="reject"`` (archived, never delivered again),
      else RELEASE (``"stop"``, ``"release"``, a dead-letter produce that failed): the
      broker delivers it again with its count raised, and archives it at
      ``share.delivery.count.limit`` - that limit is what bounds a poison record.
    """
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {OUTCOMES}, got {outcome!r}")
    if outcome in ("finished", "dead_lettered"):
        return AcknowledgeType.ACCEPT
    if outcome == "failed" and on_failure == "reject":
        return AcknowledgeType.REJECT
    return AcknowledgeType.RELEASE


@dataclass
class ShareTally:
    """What became of the acknowledgements the processor asked for.

    ``lock_lost`` counts records whose final acknowledgement did not hold: refused
    before sending (the consumer no longer held the record - its session ended, or it
    was delivered again) or answered with an error (INVALID_RECORD_STATE: the lock ran
    out and the broker gave the record on), or never answered.  Those are not
    accepted, rejected or released by us, whatever their handler did.
    """

    accepted: int = 0
    released: int = 0
    rejected: int = 0
    renewed: int = 0
    renew_failed: int = 0
    lock_lost: int = 0

    def refused(self, count: int = 1) -> None:
        """An acknowledgement the consumer refused: the record is no longer ours."""
        self.lock_lost += count

    def answered(self, results: Iterable[AckResult]) -> None:
        """Count the consumer's acknowledgement results (GAPs never reach here)."""
        for r in results:
            n = len(r.offsets)
            kind = r.ack_type
            if kind is AcknowledgeType.RENEW:
                if r.ok:
                    self.renewed += n
                else:
                    self.renew_failed += n
            elif not r.ok:
                self.lock_lost += n
            elif kind is AcknowledgeType.ACCEPT:
                self.accepted += n
            elif kind is AcknowledgeType.RELEASE:
                self.released += n
            elif kind is AcknowledgeType.REJECT:
                self.rejected += n

    def as_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "released": self.released,
            "rejected": self.rejected,
            "renewed": self.renewed,
            "renew_failed": self.renew_failed,
            "lock_lost": self.lock_lost,
        }
