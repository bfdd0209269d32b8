"""The choice between a partition's leader and its preferred read replica (KIP-392)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from aiokafka.errors import OffsetOutOfRangeError
from aiokafka.protocol.fetch import FetchRequest, FetchRequest_v11, FetchResponse_v11

from aiogroup._fetch.fetcher import Fetcher
from aiogroup._fetch.replica import NO_REPLICA, ReadReplicas, ReplicaView
from aiogroup._fetch.responses import build_fetch_request, parse_fetch_response
from aiogroup._state.subscription import SubscriptionState
from aiogroup.config import ConsumerConfig
from aiogroup.structs import TopicPartition
from tests.unit.test_fetcher_loop import FakeBroker, FakeLog

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)
LEADER, FOLLOWER = 1, 2
MAX_AGE = 300.0


def full_isr(tp: TopicPartition) -> ReplicaView:
    return ReplicaView(replicas=[1, 2, 3], isr=[1, 2, 3])


def known(node: int) -> bool:
    return True


def rr(enabled: bool = True, hold: float = 30.0) -> ReadReplicas:
    return ReadReplicas(enabled=enabled, max_age=MAX_AGE, hold=hold)


def test_leader_until_a_replica_is_named() -> None:
    r = rr()
    assert r.select(TP, LEADER, 0.0, full_isr, known) == (LEADER, False)


def test_follows_the_named_replica_until_it_expires() -> None:
    r = rr()
    r.update(TP, FOLLOWER, source=LEADER, now=0.0)
    assert r.select(TP, LEADER, 1.0, full_isr, known) == (FOLLOWER, False)
    assert r.select(TP, LEADER, MAX_AGE - 0.001, full_isr, known) == (FOLLOWER, False)
    # Expired after the metadata max age: the leader is asked again, no refresh needed.
    assert r.select(TP, LEADER, MAX_AGE, full_isr, known) == (LEADER, False)
    assert r.preferred(TP, MAX_AGE) is None
    # Expiry is not a failure: rack_id is still sent, so the leader can name it again.
    assert r.send_rack([TP], MAX_AGE)


def test_no_replica_and_self_change_nothing_or_clear() -> None:
    r = rr()
    r.update(TP, NO_REPLICA, source=LEADER, now=0.0)
    assert r.preferred(TP, 0.0) is None
    r.update(TP, FOLLOWER, source=LEADER, now=0.0)
    r.update(TP, NO_REPLICA, source=FOLLOWER, now=1.0)  # followers never name one
    assert r.preferred(TP, 1.0) == FOLLOWER
    r.update(TP, LEADER, source=LEADER, now=2.0)  # the leader prefers itself
    assert r.preferred(TP, 2.0) is None


def test_disabled_without_client_rack() -> None:
    r = rr(enabled=False)
    r.update(TP, FOLLOWER, source=LEADER, now=0.0)
    assert r.select(TP, LEADER, 0.0, full_isr, known) == (LEADER, False)
    assert not r.send_rack([TP], 0.0)


def test_replica_out_of_isr_goes_back_to_leader_and_refreshes() -> None:
    r = rr()
    r.update(TP, FOLLOWER, source=LEADER, now=0.0)

    def shrunk(tp: TopicPartition) -> ReplicaView:
        return ReplicaView(replicas=[1, 2, 3], isr=[1, 3])

    assert r.select(TP, LEADER, 1.0, shrunk, known) == (LEADER, True)
    assert r.preferred(TP, 1.0) is None
    assert not r.send_rack([TP], 1.0)  # held at the leader


def test_unknown_broker_or_partition_goes_back_to_leader() -> None:
    r = rr()
    r.update(TP, FOLLOWER, source=LEADER, now=0.0)
    assert r.select(TP, LEADER, 1.0, full_isr, lambda n: n != FOLLOWER) == (LEADER, True)
    r.update(TP, FOLLOWER, source=LEADER, now=2.0)
    assert r.select(TP, LEADER, 3.0, lambda tp: None, known) == (LEADER, True)


def test_replica_that_became_leader_is_just_the_leader() -> None:
    r = rr()
    r.update(TP, FOLLOWER, source=LEADER, now=0.0)
    assert r.select(TP, FOLLOWER, 1.0, full_isr, known) == (FOLLOWER, False)


def test_error_from_replica_holds_partition_at_leader_without_rack() -> None:
    r = rr(hold=10.0)
    r.update(TP, FOLLOWER, source=LEADER, now=0.0)
    assert r.failed(TP, 1.0) is True  # it came from a follower
    assert r.select(TP, LEADER, 1.0, full_isr, known) == (LEADER, False)
    # The leader would name the same replica again: rack_id is left out while held,
    # for the whole request to that node (rack_id is per request).
    assert not r.send_rack([OTHER, TP], 5.0)
    assert r.send_rack([OTHER], 5.0)
    assert r.send_rack([TP], 11.0)  # the hold ended


def test_error_without_preference_is_a_leader_error() -> None:
    r = rr()
    assert r.failed(TP, 0.0) is False  # e.g. out of range from the leader: a real reset
    assert r.send_rack([TP], 0.0)


def test_connection_failure_drops_only_that_nodes_preferences() -> None:
    r = rr()
    r.update(TP, FOLLOWER, source=LEADER, now=0.0)
    r.update(OTHER, 3, source=LEADER, now=0.0)
    r.node_failed(FOLLOWER, [TP, OTHER], 1.0)
    assert r.preferred(TP, 1.0) is None
    assert r.preferred(OTHER, 1.0) == 3


def test_hold_never_outlasts_metadata_max_age() -> None:
    r = ReadReplicas(enabled=True, max_age=5.0, hold=30.0)
    r.update(TP, FOLLOWER, source=LEADER, now=0.0)
    r.failed(TP, 0.0)
    assert not r.send_rack([TP], 4.0)
    assert r.send_rack([TP], 5.0)


def test_forget_unassigned() -> None:
    r = rr()
    r.update(TP, FOLLOWER, source=LEADER, now=0.0)
    r.update(OTHER, FOLLOWER, source=LEADER, now=0.0)
    r.failed(OTHER, 0.0)
    r.forget({OTHER})
    assert r.preferred(TP, 0.0) is None
    assert not r.send_rack([OTHER], 0.0)


def test_rack_id_on_the_wire_and_preferred_replica_parsed() -> None:
    req = build_fetch_request(
        [(TP, 5)],
        max_wait_ms=100,
        min_bytes=1,
        max_bytes=1000,
        partition_bytes=1000,
        read_committed=False,
        rack_id="rack-b",
    )
    struct = req.build(FetchRequest_v11)
    assert struct.rack_id == "rack-b"
    response = FetchResponse_v11(0, 0, 0, [("t", [(0, 0, 10, 10, 0, [], FOLLOWER, b"")])])
    (result,) = parse_fetch_response(response)
    assert result.preferred_read_replica == FOLLOWER
    assert result.tp == TP and result.highwater == 10


# -- the fetcher following a preferred replica, against a scripted leader and follower ----


class RackBroker(FakeBroker):
    """Node 0 leads TP and, to a Fetch with a rack, names node 1 (no records); node 1 is
    a follower whose log ends at ``follower_end`` (out of range beyond it, as Kafka)."""

    def __init__(self, logs: dict[TopicPartition, FakeLog]) -> None:
        super().__init__(logs)
        self.follower_end = logs[FTP].end
        self.sent: list[tuple[int, str]] = []  # (node, rack_id) of every Fetch
        self.list_offsets = 0
        partitions = {0: SimpleNamespace(replicas=[0, 1], isr=[0, 1])}
        self.cluster = SimpleNamespace(
            leader_for_partition=self.leaders.get,
            _partitions={"f": partitions},
            broker_metadata=lambda node: object() if node in (0, 1) else None,
        )

    async def send(self, node: int, request: Any) -> Any:
        if not isinstance(request, FetchRequest):
            self.list_offsets += 1
            return await super().send(node, request)
        self.sent.append((node, request._rack_id))
        ((topic, ((p, offset, _),)),) = request.topics
        log = self.logs[FTP]
        if node == 0 and request._rack_id:
            part = (p, 0, log.end, log.end, log.start, [], 1, b"")
        elif node == 1 and offset > self.follower_end:
            part = (p, OffsetOutOfRangeError.errno, -1, -1, -1, [], -1, b"")
        else:
            end = self.follower_end if node == 1 else log.end
            data = b"".join(b for base, b in log.batches if base >= offset and base < end)
            part = (p, 0, end, end, log.start, [], -1, data)
        return SimpleNamespace(API_VERSION=11, topics=[(topic, [part])])


FTP = TopicPartition("f", 0)


async def start_rack_fetcher(broker: RackBroker) -> tuple[Fetcher, SubscriptionState]:
    config = ConsumerConfig(
        fetch_max_wait_ms=10, retry_backoff_ms=10, client_rack="r1", auto_offset_reset="earliest"
    )
    sub = SubscriptionState(config.reset_strategy)
    fetcher = Fetcher(broker, sub, config)
    await fetcher.start()
    sub.assign_from_user([FTP])
    assert sub.assignment is not None
    sub.assignment.state(FTP).seek(0)
    return fetcher, sub


async def read_offsets(fetcher: Fetcher, want: int) -> list[int]:
    seen: list[int] = []
    while len(seen) < want:
        got = await fetcher.fetched_records((), 5.0)
        assert got, f"nothing after {seen}"
        seen += [r.offset for r in got[FTP]]
    return seen


async def test_fetcher_follows_the_named_replica() -> None:
    log = FakeLog(0)
    log.append(5)
    log.append(5)
    broker = RackBroker({FTP: log})
    fetcher, sub = await start_rack_fetcher(broker)
    try:
        assert await read_offsets(fetcher, 10) == list(range(10))
    finally:
        await fetcher.close()
        sub.close()
    assert broker.sent[0] == (0, "r1")  # the leader is asked, with the rack
    assert {node for node, _ in broker.sent[1:]} == {1}  # then only the follower


async def test_follower_behind_sends_partition_to_leader_without_reset() -> None:
    log = FakeLog(0)
    log.append(5)
    broker = RackBroker({FTP: log})
    fetcher, sub = await start_rack_fetcher(broker)
    try:
        assert await read_offsets(fetcher, 5) == list(range(5))
        # The leader's log grows; the follower is left behind at 3 (< position 5).
        log.append(5)
        broker.follower_end = 3
        assert await read_offsets(fetcher, 5) == list(range(5, 10))
    finally:
        await fetcher.close()
        sub.close()
    assert broker.list_offsets == 0, "a follower's out-of-range must not reset the position"
    after = broker.sent[broker.sent.index((1, "r1")) :]
    # Back to the leader, held there without rack_id so it cannot redirect again.
    assert (0, "") in after, broker.sent
    assert after[-1] == (0, "")
