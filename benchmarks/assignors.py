"""``python -m benchmarks.assignors [--quick] [--no-write]``: assignment time by group size.

The leader runs the assignor between JoinGroup and SyncGroup, with the whole group
waiting, so its time is rebalance time.  Shapes follow Apache Kafka's own
performance cases (AbstractStickyAssignorTest.testLargeAssignmentAndGroupWith*):
topics of 2,000 partitions, up to 500 of them (a million partitions) over up to
2,000 consumers, all subscribed to every topic; "unequal" makes the last consumer
subscribe to the first topic only, which takes the general algorithm instead of the
equal-subscription one.  "second generation" is the rebalance after that: every
consumer but the first rejoins owning what it was given (eager sticky members carry
it in user_data, cooperative ones in owned_partitions).

kafka-python's sticky assignor runs side by side where it finishes in reasonable
time (its cost grows much faster with size; larger rows say "not run").  Only the
``assign`` call is timed; building the subscriptions is not.  Results go to
docs/benchmarks/assignors.md (and .json), which ``benchmarks/report.py`` includes
in docs/benchmarks.md; this command also refreshes that section in place.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aiogroup._protocol.classic_embedded import ConsumerAssignment, ConsumerSubscription
from aiogroup.assignors import (
    ConsumerPartitionAssignor,
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
)

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SECTION_TITLE = "## 7. Partition assignment time by group size"

# (partitions, consumers); partitions come in topics of 2,000 (fewer for small sizes).
SIZES = [
    (1_000, 100),
    (10_000, 100),
    (10_000, 2_000),
    (100_000, 500),
    (100_000, 2_000),
    (1_000_000, 2_000),
]
QUICK_SIZES = [(1_000, 100), (10_000, 100), (100_000, 2_000)]
KAFKA_PYTHON_MAX = 10_000 * 100  # partitions x consumers beyond which it is not run


class Cluster:
    def __init__(self, sizes: Mapping[str, int]) -> None:
        self._sizes = dict(sizes)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self._sizes.get(topic)
        return None if n is None else set(range(n))

    def topics(self) -> set[str]:
        return set(self._sizes)


def shape(partitions: int, consumers: int) -> tuple[Cluster, list[str], list[str]]:
    per_topic = min(2_000, partitions)
    topics = [f"t{i:04d}" for i in range(partitions // per_topic)]
    members = [f"c{i:05d}" for i in range(consumers)]
    return Cluster({t: per_topic for t in topics}), topics, members


def fresh(topics: list[str], members: list[str], unequal: bool) -> dict[str, MemberSubscription]:
    out = {}
    for i, m in enumerate(members):
        subscribed = topics[:1] if unequal and i == len(members) - 1 else topics
        out[m] = MemberSubscription(m, None, ConsumerSubscription(topics=tuple(subscribed)))
    return out


def second_generation(
    assignor_cls: type[StickyAssignor],
    first: Mapping[str, ConsumerAssignment],
    before: Mapping[str, MemberSubscription],
) -> dict[str, MemberSubscription]:
    out = {}
    for i, (m, sub) in enumerate(before.items()):
        if i == 0:
            out[m] = sub
            continue
        helper = assignor_cls()
        helper.on_assignment(first[m], 1)
        owned = first[m].partitions if assignor_cls is CooperativeStickyAssignor else ()
        out[m] = MemberSubscription(
            m,
            None,
            ConsumerSubscription(
                topics=sub.subscription.topics,
                user_data=helper.subscription_user_data(frozenset(sub.subscription.topics)),
                owned_partitions=owned,
                generation_id=1,
            ),
        )
    return out


def timed(fn: Callable[[], Any], repeat: int) -> tuple[list[float], Any]:
    times = []
    result = None
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return times, result


def kafka_python_sticky(cluster: Cluster, members: Mapping[str, MemberSubscription]) -> Any:
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.protocol.consumer import JoinGroupResponse

    assignor = StickyPartitionAssignor()
    join = [
        JoinGroupResponse.JoinGroupResponseMember(
            member_id=m,
            group_instance_id=None,
            metadata=assignor.metadata(set(s.subscription.topics)),
        )
        for m, s in members.items()
    ]
    return lambda: assignor.assign(cluster, join)


def run_size(partitions: int, consumers: int) -> dict[str, Any]:
    cluster, topics, names = shape(partitions, consumers)
    repeat = 1 if partitions * consumers > 100_000 * 500 else 3
    row: dict[str, Any] = {"partitions": partitions, "consumers": consumers, "repeat": repeat}
    equal = fresh(topics, names, unequal=False)
    cases: dict[str, Callable[[], Any]] = {}

    def assign(a: ConsumerPartitionAssignor, m: Mapping[str, MemberSubscription]) -> Any:
        return lambda: a.assign(cluster, m)

    cases["range"] = assign(RangeAssignor(), equal)
    cases["roundrobin"] = assign(RoundRobinAssignor(), equal)
    cases["sticky fresh"] = assign(StickyAssignor(), equal)
    for name, cls in (
        ("sticky", StickyAssignor),
        ("cooperative-sticky", CooperativeStickyAssignor),
    ):
        first = cls().assign(cluster, equal)
        cases[f"{name} second generation"] = assign(cls(), second_generation(cls, first, equal))
    unequal = fresh(topics, names, unequal=True)
    cases["sticky fresh, unequal"] = assign(StickyAssignor(), unequal)
    first = StickyAssignor().assign(cluster, unequal)
    cases["sticky second generation, unequal"] = assign(
        StickyAssignor(), second_generation(StickyAssignor, first, unequal)
    )
    if partitions * consumers <= KAFKA_PYTHON_MAX:
        cases["kafka-python sticky fresh"] = kafka_python_sticky(cluster, equal)
    for name, fn in cases.items():
        times, _ = timed(fn, repeat)
        row[name] = {"median_s": statistics.median(times), "min_s": min(times), "runs": times}
        print(f"{partitions:>9,} x {consumers:>5,}  {name:<36} {row[name]['median_s']:8.3f} s")
    return row


COLUMNS = [
    "sticky fresh",
    "sticky second generation",
    "cooperative-sticky second generation",
    "sticky fresh, unequal",
    "sticky second generation, unequal",
    "range",
    "roundrobin",
    "kafka-python sticky fresh",
]


def markdown(results: dict[str, Any]) -> str:
    lines = [
        SECTION_TITLE,
        "",
        f"Seconds for one `assign` call on the leader, median of {{repeat}} runs "
        f"(one run for the largest sizes); run {results['when']} on commit "
        f"{results['commit']} with `python -m benchmarks.assignors`.  Topics of 2,000 "
        "partitions (Apache Kafka's performance-test shape), every consumer subscribed "
        "to all; *unequal*: the last consumer subscribes to one topic only (the general "
        "algorithm); *second generation*: every consumer but one rejoins owning what it "
        "was given.  Before this work, a fresh sticky assignment of 100,000 partitions "
        "over 2,000 consumers took 31.6 s here (22 s on a quieter run); Java's own test "
        "allows a million partitions 30 s.",
        "",
        "| partitions x consumers | " + " | ".join(COLUMNS) + " |",
        "|---" * (len(COLUMNS) + 1) + "|",
    ]
    for row in results["rows"]:
        cells = []
        for col in COLUMNS:
            cell = row.get(col)
            cells.append("not run" if cell is None else f"{cell['median_s']:.3f}")
        lines.append(
            f"| {row['partitions']:,} x {row['consumers']:,} | " + " | ".join(cells) + " |"
        )
    lines += [
        "",
        "kafka-python's sticky assignor is run only up to 10,000 partitions x 100 "
        "consumers; beyond that it takes minutes.  The machine is shared (two cores, "
        "other work running), so single runs of the largest sizes are noisy.",
        "",
    ]
    return "\n".join(lines).replace("{repeat}", "3")


def splice(doc: Path, section: str) -> None:
    """Replace this section in docs/benchmarks.md, or add it before the method notes."""
    text = doc.read_text()
    start = text.find(SECTION_TITLE)
    if start >= 0:
        end = text.find("\n## ", start + len(SECTION_TITLE))
        end = len(text) if end < 0 else end + 1
        text = text[:start] + section + text[end:]
    else:
        anchor = text.find("## How it was measured")
        anchor = len(text) if anchor < 0 else anchor
        text = text[:anchor] + section + "\n" + text[anchor:]
    doc.write_text(text)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.assignors", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="three sizes, up to 100k x 2,000")
    parser.add_argument("--no-write", action="store_true", help="print only; leave docs alone")
    args = parser.parse_args(argv)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit or "unknown",
        "python": platform.python_version(),
        "rows": [run_size(p, c) for p, c in (QUICK_SIZES if args.quick else SIZES)],
    }
    if args.no_write:
        return 0
    bench = DOCS / "benchmarks"
    bench.mkdir(parents=True, exist_ok=True)
    (bench / "assignors.json").write_text(json.dumps(results, indent=1) + "\n")
    section = markdown(results)
    (bench / "assignors.md").write_text(section)
    splice(DOCS / "benchmarks.md", section)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
