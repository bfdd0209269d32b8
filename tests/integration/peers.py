"""Other Kafka clients as group members, run in threads, for mixed-client group tests.

Each peer consumes in its own thread and records what it owns and what it consumed,
so a test can check that the group as a whole owned every partition exactly once
and consumed every record.  They commit synchronously after every poll that
returned records, so that a member that leaves hands on exactly where it stopped.

Ownership is tracked from the rebalance callbacks only (never from the client's
assignment view, which kafka-python keeps until the next generation completes
under the eager protocol), so that at any instant a peer's ``owned`` is what it
may legitimately consume: a partition leaves it before the peer rejoins and enters
it only when a completed generation gives it.

A commit refused because the group is rebalancing is a Kafka-level fact, not a
failure: it is retried on the next loop turn (and once more before closing) and
counted in ``commit_retries``.  Any other exception ends the peer and is kept in
``errors`` for the test to report.

Given a :class:`~aiogroup.testing.history.HistoryRecorder`, a peer also writes its
ownership history under its name (which is also its client id, the name the
broker's DescribeGroups shows): its callbacks, every batch handed to it, every
accepted commit - and the confluent-kafka peer commits what it consumed of revoked
partitions in its revoke callback, as a careful application does (kafka-python 3
refuses a blocking commit from its callback thread; its poll loop has committed).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiogroup.testing.history import HistoryRecorder, MemberRecorder

Key = tuple[int, int]  # (partition, offset)


@dataclass
class PeerMember:
    """A non-aiogroup group member running in a thread."""

    name: str
    owned: set[int] = field(default_factory=set)
    consumed: list[Key] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    assign_calls: int = 0
    revoke_calls: int = 0
    lost_calls: int = 0
    commit_retries: int = 0
    #: Whether the peer led (ran the assignor for) some generation, where the client tells.
    led: bool = False
    #: Client log lines at warning level or worse (for failure messages).
    log: list[str] = field(default_factory=list)
    history: MemberRecorder | None = None
    #: partition -> next offset to commit (what has been consumed).
    positions: dict[int, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, body: Callable[[PeerMember], None]) -> None:
        def run() -> None:
            try:
                body(self)
            except BaseException as exc:  # reported to the test, never swallowed
                self.errors.append(exc)

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> None:
        """Leave cleanly (final commit, close with LeaveGroup); raise what the peer hit."""
        if self.history is not None and not self._stop.is_set():
            self.history.leaving()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"peer {self.name} did not stop within {timeout}s")
        if self.errors:
            raise self.errors[0]

    def snapshot(self) -> tuple[set[int], int]:
        with self._lock:
            return set(self.owned), len(self.consumed)

    def owned_now(self) -> set[int]:
        with self._lock:
            return set(self.owned)

    def consumed_now(self) -> set[Key]:
        with self._lock:
            return set(self.consumed)

    def _assigned(self, parts: set[int], *, replace: bool) -> None:
        with self._lock:
            self.owned = set(parts) if replace else self.owned | parts
            self.assign_calls += 1

    def _revoked(self, parts: set[int], *, lost: bool = False) -> None:
        with self._lock:
            self.owned -= parts
            if lost:
                self.lost_calls += 1
            else:
                self.revoke_calls += 1

    def _closed(self) -> None:
        with self._lock:
            self.owned = set()


def confluent_member(
    name: str,
    bootstrap: str,
    group: str,
    topic: str,
    strategy: str = "cooperative-sticky",
    session_timeout_ms: int = 6000,
    history: HistoryRecorder | None = None,
) -> PeerMember:
    """A confluent-kafka (librdkafka) member with the given assignment strategy."""
    import logging

    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    member = PeerMember(name, history=None if history is None else history.member(name))
    rec = member.history

    class Collect(logging.Handler):
        """Keeps warnings, and learns from librdkafka's group debug lines whether this
        member led: its JoinGroup response line reads "LeaderId <id> (me)"."""

        def emit(self, record: logging.LogRecord) -> None:
            line = self.format(record)
            if record.levelno >= logging.WARNING:
                member.log.append(line)
            elif "JOINGROUP" in line and "LeaderId" in line:
                member.log.append(line)
                if "(me)" in line:
                    member.led = True

    logger = logging.getLogger(f"peers.{name}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.addHandler(Collect())

    # Refusals that only mean "the group moved on; commit again later".
    retriable = {
        KafkaError.REBALANCE_IN_PROGRESS,
        KafkaError.ILLEGAL_GENERATION,
        # The broker removed the member before its commit landed (seen once on Tansu, in
        # the revoke callback's commit during member churn): Java's commitSync throws
        # CommitFailedException for it as for the two above; librdkafka rejoins itself.
        KafkaError.UNKNOWN_MEMBER_ID,
        KafkaError._NO_OFFSET,  # what was consumed was revoked before the commit
    }

    def body(m: PeerMember) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "partition.assignment.strategy": strategy,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": 1000,
                "debug": "cgrp",
            },
            logger=logger,
        )
        cooperative = strategy == "cooperative-sticky"

        def record_commit(done: Any, sent: float) -> None:
            if rec is not None and done:
                rec.committed(
                    [(tp.topic, tp.partition, tp.offset) for tp in done if tp.offset >= 0],
                    sent_at=sent,
                )

        # confluent-kafka (incrementally) assigns/unassigns after these return.
        def on_assign(c: Any, parts: list[TopicPartition]) -> None:
            if rec is not None:
                rec.assigned((p.topic, p.partition) for p in parts)
            m._assigned({p.partition for p in parts}, replace=not cooperative)

        def on_revoke(c: Any, parts: list[TopicPartition]) -> None:
            if rec is not None:
                rec.revoke_started((p.topic, p.partition) for p in parts)
                gone = [
                    TopicPartition(topic, p.partition, m.positions[p.partition])
                    for p in parts
                    if p.partition in m.positions
                ]
                try:
                    # Not from close()'s own revoke: the loop committed before it, and
                    # a blocking commit inside librdkafka's final rebalance callback is
                    # unsupported there (confluent-kafka-go #1062) - it aborted the
                    # process once (the chaos member-churn test, CI rehearsal 12).
                    if gone and not closing:
                        sent = time.monotonic()
                        record_commit(c.commit(offsets=gone, asynchronous=False), sent)
                except KafkaException as exc:
                    # _DESTROY: the revoke close() runs; the loop committed before it.
                    if exc.args[0].code() not in retriable | {KafkaError._DESTROY}:
                        raise
                    with m._lock:
                        m.commit_retries += 1
            m._revoked({p.partition for p in parts})
            for p in parts:
                m.positions.pop(p.partition, None)  # stale if the partition comes back
            if rec is not None:
                rec.revoke_ended((p.topic, p.partition) for p in parts)

        def on_lost(c: Any, parts: list[TopicPartition]) -> None:
            if rec is not None:
                rec.lost((p.topic, p.partition) for p in parts)
            m._revoked({p.partition for p in parts}, lost=True)
            for p in parts:
                m.positions.pop(p.partition, None)

        def commit() -> bool:
            try:
                sent = time.monotonic()
                record_commit(consumer.commit(asynchronous=False), sent)
            except KafkaException as exc:
                if exc.args[0].code() not in retriable:
                    raise
                with m._lock:
                    m.commit_retries += 1
                return bool(exc.args[0].code() == KafkaError._NO_OFFSET)
            return True

        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        closing = False
        pending = False
        try:
            while not m.stopping:
                batch = consumer.consume(num_messages=500, timeout=0.2)
                got: list[Key] = []
                for msg in batch:
                    err = msg.error()
                    part, offset = msg.partition(), msg.offset()
                    if err is None and part is not None and offset is not None:
                        got.append((part, offset))
                    elif err is not None and err.code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(err)
                if got:
                    record_delivered(m, topic, got)
                    pending = True
                if pending:
                    pending = not commit()
            if pending:
                commit()
        finally:
            closing = True
            consumer.close()
            m._closed()

    member.start(body)
    return member


def record_delivered(m: PeerMember, topic: str, got: list[Key]) -> None:
    """Note a poll's records: consumed, next positions, and the history if any."""
    with m._lock:
        m.consumed.extend(got)
    by_part: dict[int, list[int]] = {}
    for p, o in got:
        by_part.setdefault(p, []).append(o)
        m.positions[p] = o + 1
    if m.history is not None:
        for p, offsets in by_part.items():
            m.history.delivered(topic, p, offsets)


def kafka_python_member(
    name: str,
    bootstrap: str,
    group: str,
    topic: str,
    strategy: str = "cooperative-sticky",
    session_timeout_ms: int = 6000,
    history: HistoryRecorder | None = None,
) -> PeerMember:
    """A kafka-python 3 member (threads behind its own loop) with the given strategy."""
    import kafka
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
    from kafka.errors import CommitFailedError, RebalanceInProgressError
    from kafka.structs import OffsetAndMetadata

    assignors = {
        "cooperative-sticky": CooperativeStickyAssignor,
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
    }
    cooperative = strategy == "cooperative-sticky"
    member = PeerMember(name, history=None if history is None else history.member(name))
    rec = member.history
    consumers: list[Any] = []

    def commit_positions(parts: set[int]) -> bool:
        """Commit what was consumed of ``parts``; True when the broker accepted it."""
        offsets = {p: member.positions[p] for p in parts if p in member.positions}
        if not offsets:
            return True
        sent = time.monotonic()
        try:
            consumers[0].commit(
                {
                    kafka.TopicPartition(topic, p): OffsetAndMetadata(o, "", -1)
                    for p, o in offsets.items()
                }
            )
        except (CommitFailedError, RebalanceInProgressError):
            with member._lock:
                member.commit_retries += 1
            return False
        if rec is not None:
            rec.committed([(topic, p, o) for p, o in offsets.items()], sent_at=sent)
        return True

    class Listener(kafka.ConsumerRebalanceListener):  # type: ignore[misc]
        # Eager: revoked = everything, assigned = the whole new assignment.
        # Cooperative: revoked = what moves away, assigned = only what is new.
        def on_partitions_revoked(self, revoked: Any) -> None:
            # No commit here: kafka-python 3 runs this on its IO thread, where a blocking
            # commit is refused; the poll loop committed after the last batch instead.
            if rec is not None:
                rec.revoke_started((tp.topic, tp.partition) for tp in revoked)
            member._revoked({tp.partition for tp in revoked})
            # A position is only ours while we own the partition: one kept past the
            # revoke would be committed (stale) if the partition came back later.
            for tp in revoked:
                member.positions.pop(tp.partition, None)
            if rec is not None:
                rec.revoke_ended((tp.topic, tp.partition) for tp in revoked)

        def on_partitions_assigned(self, assigned: Any) -> None:
            if rec is not None:
                rec.assigned((tp.topic, tp.partition) for tp in assigned)
            member._assigned({tp.partition for tp in assigned}, replace=not cooperative)

        def on_partitions_lost(self, lost: Any) -> None:
            if rec is not None:
                rec.lost((tp.topic, tp.partition) for tp in lost)
            member._revoked({tp.partition for tp in lost}, lost=True)
            for tp in lost:
                member.positions.pop(tp.partition, None)

    def body(m: PeerMember) -> None:
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id=name,
            partition_assignment_strategy=(assignors[strategy],),
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=1000,
        )
        consumers.append(consumer)

        def commit() -> bool:
            return commit_positions(m.owned_now())

        consumer.subscribe([topic], listener=Listener())
        pending = False
        try:
            while not m.stopping:
                records = consumer.poll(timeout_ms=200, max_records=500)
                got = [(r.partition, r.offset) for batch in records.values() for r in batch]
                if consumer._coordinator._is_leader:
                    m.led = True
                if got:
                    record_delivered(m, topic, got)
                    pending = True
                if pending:
                    pending = not commit()
            if pending:
                commit()
        finally:
            consumer.close()
            m._closed()

    member.start(body)
    return member
