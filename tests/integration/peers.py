"""Other Kafka clients as group members, run in threads, for mixed-client group tests.

Each peer consumes in its own thread and records what it owns and what it consumed,
so a test can check that the group as a whole owned every partition exactly once
and consumed every record.  They commit synchronously after every poll that
returned records, so that a member that leaves hands on exactly where it stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Key = tuple[int, int]  # (partition, offset)


@dataclass
class PeerMember:
    """A non-aiogroup group member running in a thread."""

    name: str
    owned: set[int] = field(default_factory=set)
    consumed: list[Key] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    assign_calls: int = 0
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

    def stop(self, timeout: float = 30.0) -> None:
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


def confluent_member(
    name: str,
    bootstrap: str,
    group: str,
    topic: str,
    strategy: str = "cooperative-sticky",
    session_timeout_ms: int = 6000,
) -> PeerMember:
    """A confluent-kafka (librdkafka) member with the given assignment strategy."""
    from confluent_kafka import Consumer, TopicPartition

    member = PeerMember(name)

    def body(m: PeerMember) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "partition.assignment.strategy": strategy,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": 1000,
            }
        )
        cooperative = strategy == "cooperative-sticky"

        def on_assign(c: Any, parts: list[TopicPartition]) -> None:
            with m._lock:
                new = {p.partition for p in parts}
                m.owned = (m.owned | new) if cooperative else new
                m.assign_calls += 1

        def on_revoke(c: Any, parts: list[TopicPartition]) -> None:
            with m._lock:
                m.owned -= {p.partition for p in parts}

        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
        try:
            while not m.stopping:
                batch = consumer.consume(num_messages=500, timeout=0.2)
                got = [(msg.partition(), msg.offset()) for msg in batch if not msg.error()]
                if got:
                    with m._lock:
                        m.consumed.extend(got)
                    consumer.commit(asynchronous=False)
        finally:
            consumer.close()

    member.start(body)
    return member


def kafka_python_member(
    name: str,
    bootstrap: str,
    group: str,
    topic: str,
    strategy: str = "cooperative-sticky",
    session_timeout_ms: int = 6000,
) -> PeerMember:
    """A kafka-python 3 member (threads behind its own loop) with the given strategy."""
    import kafka
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    assignors = {
        "cooperative-sticky": CooperativeStickyAssignor,
        "range": RangePartitionAssignor,
        "roundrobin": RoundRobinPartitionAssignor,
    }
    member = PeerMember(name)

    class Listener(kafka.ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            with member._lock:
                member.owned -= {tp.partition for tp in revoked}

        def on_partitions_assigned(self, assigned: Any) -> None:
            with member._lock:
                member.owned |= {tp.partition for tp in assigned}
                member.assign_calls += 1

    def body(m: PeerMember) -> None:
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            partition_assignment_strategy=(assignors[strategy],),
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=1000,
        )
        consumer.subscribe([topic], listener=Listener())
        try:
            while not m.stopping:
                records = consumer.poll(timeout_ms=200, max_records=500)
                got = [(r.partition, r.offset) for batch in records.values() for r in batch]
                if got:
                    with m._lock:
                        m.consumed.extend(got)
                    consumer.commit()
                with m._lock:
                    m.owned = {tp.partition for tp in consumer.assignment()}
        finally:
            consumer.close()

    member.start(body)
    return member
