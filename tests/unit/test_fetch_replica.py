"""The choice between a partition's leader and its preferred read replica (KIP-392)."""

from __future__ import annotations

from aiokafka.protocol.fetch import FetchRequest_v11, FetchResponse_v11

from aiogroup._fetch.replica import NO_REPLICA, ReadReplicas, ReplicaView
from aiogroup._fetch.responses import build_fetch_request, parse_fetch_response
from aiogroup.structs import TopicPartition

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
