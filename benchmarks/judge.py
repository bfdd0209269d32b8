"""Benchmark runs judged from outside the members, by the ownership-history checker.

A benchmark member process reports its callbacks and batches on stdout
(``benchmarks.member``); :func:`member_history` turns those reports into history
events under the member's client id, and a :class:`GroupObserver` adds the broker's
view (DescribeGroups), so :func:`judge` can say how long two members held one
partition at once and how often the broker dropped a member - whatever the
members themselves believed.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiogroup.testing.history import Event, HistoryReport, check_history
from benchmarks.group import Member


def member_history(member: Member, client_id: str, topic: str, *, slow_revoke: bool) -> list[Event]:
    """History events of one benchmark member.  A member without a revoke delay
    reports no end of its revoke callback; it returns right after its commit, so
    its hold ends where the callback began."""
    out: list[Event] = []
    for e in member.events:
        kind, t = e["ev"], float(e["t"])
        parts = tuple((topic, int(p)) for p in e.get("p", ()) or ())
        if kind == "assigned" and parts:
            out.append(Event(t, client_id, "assigned", partitions=parts))
        elif kind == "revoked" and parts:
            out.append(Event(t, client_id, "revoke_started", partitions=parts))
            if not slow_revoke:
                out.append(Event(t, client_id, "revoke_ended", partitions=parts))
        elif kind == "revoke_done" and parts:
            out.append(Event(t, client_id, "revoke_ended", partitions=parts))
        elif kind == "lost" and parts:
            out.append(Event(t, client_id, "lost", partitions=parts))
        elif kind == "batch":
            spans = tuple((topic, int(p), int(a), int(b)) for p, (a, b) in e["r"].items())
            out.append(Event(t, client_id, "delivered", spans=spans))
    return out


def judge(*histories: Iterable[Event]) -> HistoryReport:
    return check_history([e for h in histories for e in h])
