"""The share fetcher against a scripted leader: what each request carries, and what a
lost share session does to the records it acquired.

No sockets: a fake client answers ShareFetch and ShareAcknowledge from a script of
answers; the test reads the requests the fetcher built.  Awaited events, no sleeps.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from typing import Any

import pytest
from aiokafka.client import ConnectionGroup
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from aiogroup._fetch.share_acknowledgements import InvalidAcknowledgement
from aiogroup._fetch.share_fetcher import ShareFetcher, ShareFetcherConfig, ShareHooks
from aiogroup._protocol.schema import struct_to_dict
from aiogroup._protocol.share import SHARE_ACKNOWLEDGE, SHARE_FETCH, AcknowledgeType, AcquireMode
from aiogroup.structs import TopicPartition

TID = uuid.UUID(int=0x7)
TP = TopicPartition("t", 0)
WAIT = 5.0


def batch(base: int, count: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 20)
    for i in range(count):
        builder.append(i, 1000 + i, b"k", f"v{base + i}".encode(), [])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    return bytes(data)


def fetch_answer(
    *,
    error: int = 0,
    acquired: tuple[int, int, int] | None = None,
    ack_error: int = 0,
    lock_ms: int = 30_000,
) -> dict[str, Any]:
    first, last, count = acquired or (0, -1, 0)
    part = {
        "partition_index": 0,
        "error_code": 0,
        "error_message": None,
        "acknowledge_error_code": ack_error,
        "acknowledge_error_message": None,
        "current_leader": {"leader_id": 0, "leader_epoch": 0},
        "records": batch(first, last - first + 1) if acquired else None,
        "acquired_records": (
            [{"first_offset": first, "last_offset": last, "delivery_count": count}]
            if acquired
            else []
        ),
    }
    return {
        "throttle_time_ms": 0,
        "error_code": error,
        "error_message": None,
        "acquisition_lock_timeout_ms": lock_ms,
        "responses": [] if error else [{"topic_id": TID, "partitions": [part]}],
        "node_endpoints": [],
    }


class Cluster:
    def leader_for_partition(self, tp: TopicPartition) -> int:
        return 0


class Gated:
    """A scripted answer given only once the test opens ``gate`` (the fetcher reads
    ahead: its next ShareFetch leaves while the application still holds records)."""

    def __init__(self, answer: dict[str, Any]) -> None:
        self.answer = answer
        self.gate = asyncio.Event()


class ScriptedLeader:
    """Answers each request with the next scripted answer (then: an empty fetch)."""

    def __init__(
        self, answers: list[dict[str, Any] | Gated], *, fetch_max: int = 2, wire: bool = False
    ) -> None:
        self.versions = {78: (1, fetch_max), 79: (1, fetch_max)}
        self.cluster = Cluster()
        self.answers = answers
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.sent = asyncio.Event()
        self.idle = asyncio.Event()
        if wire:
            # aiokafka's connection table: the fetcher may write a request itself.
            self._conns = {(0, ConnectionGroup.DEFAULT): WireConn(self)}

    async def force_metadata_update(self) -> bool:
        return True

    async def send(self, node: int, request: Any, group: Any = None) -> Any:
        return await self.answer(*self.record(request))

    def record(self, request: Any) -> tuple[str, int, dict[str, Any]]:
        """Take ``request`` in (it is on the wire from here)."""
        fields = struct_to_dict(request.prepare(self.versions))
        name, version = request.API.name, request.api_version
        self.requests.append((name, fields))
        self.sent.set()
        return name, version, fields

    async def answer(self, name: str, version: int, fields: dict[str, Any]) -> Any:
        if name == "ShareAcknowledge":
            return SHARE_ACKNOWLEDGE.response(
                version,
                {
                    "throttle_time_ms": 0,
                    "error_code": 0,
                    "error_message": None,
                    "acquisition_lock_timeout_ms": 30_000,
                    "responses": [],
                    "node_endpoints": [],
                },
            )
        if self.answers:
            answer = self.answers.pop(0)
            if isinstance(answer, Gated):
                await answer.gate.wait()
                answer = answer.answer
            return SHARE_FETCH.response(version, answer)
        self.idle.set()
        await asyncio.sleep(fields["max_wait_ms"] / 1000)  # the broker's long poll
        return SHARE_FETCH.response(version, fetch_answer())


class WireConn:
    """aiokafka's connection as the fetcher's synchronous write sees it: ``send`` takes
    the request in at once and returns the awaitable answer."""

    def __init__(self, leader: ScriptedLeader) -> None:
        self.leader = leader
        self.closed = False

    def connected(self) -> bool:
        return not self.closed

    def send(self, request: Any) -> Any:
        return self.leader.answer(*self.leader.record(request))

    def close(self, reason: Any = None) -> None:
        self.closed = True


def make(
    client: ScriptedLeader,
    *,
    hooks: ShareHooks | None = None,
    polled: bool = True,
    **config: Any,
) -> ShareFetcher:
    """A fetcher of member "m" on ``client``; ``config`` overrides the test defaults.
    ``polled``: the application's first poll already made (fetching starts)."""
    options: dict[str, Any] = {
        "group_id": "g",
        "explicit": True,
        "max_poll_records": 10,
        "fetch_max_wait_ms": 50,
        "fetch_min_bytes": 1,
        "fetch_max_bytes": 1 << 20,
        "retry_backoff": 0.01,
        "auto_renew": False,
        "renew_margin": None,
    }
    fetcher = ShareFetcher(
        client,  # type: ignore[arg-type]
        ShareFetcherConfig(**(options | config)),
        hooks or ShareHooks(),
    )
    fetcher.set_member_id(lambda: "m")
    fetcher.set_membership_valid_until(1e12)
    if polled:
        fetcher.polled()
    return fetcher


async def records(fetcher: ShareFetcher, count: int) -> list[Any]:
    """``count`` records, or a failure naming how many came within ``WAIT``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    got: list[Any] = []
    while len(got) < count:
        got += fetcher.take_records(count - len(got))
        if len(got) < count:
            left = deadline - loop.time()
            assert left > 0, f"{len(got)} of {count} records within {WAIT} s"
            await fetcher.wait_for_records(left)
    return got


async def test_a_lost_session_drops_its_records_and_the_next_fetch_opens_a_new_one() -> None:
    read_ahead = Gated(fetch_answer())
    client = ScriptedLeader(
        [
            fetch_answer(acquired=(0, 2, 1)),
            read_ahead,  # left while the records were buffered: answered empty
            fetch_answer(error=122),  # SHARE_SESSION_NOT_FOUND
        ]
    )
    fetcher = make(client)
    try:
        fetcher.set_assignment({("t", 0): TID})
        r0, r1, r2 = await records(fetcher, 3)
        assert (r0.offset, r0.delivery_count, r0.value) == (0, 1, b"v0")
        # Three records buffered (under max_poll_records, their locks fresh): the
        # next fetch went out before the application took them.
        await asyncio.wait_for(read_ahead_sent(client, 2), WAIT)
        fetcher.tracker.acknowledge(r0.acquisition, AcknowledgeType.ACCEPT)
        fetcher.acknowledged()
        read_ahead.gate.set()
        await asyncio.wait_for(client.idle.wait(), WAIT)
        (first, ahead, ack_fetch, reopen) = [f for n, f in client.requests if n == "ShareFetch"][:4]
        assert first["share_session_epoch"] == 0
        assert first["share_acquire_mode"] == 1 and first["max_records"] == 10  # KIP-1206
        assert ahead["share_session_epoch"] == 1
        assert not any(
            p["acknowledgement_batches"] for t in ahead["topics"] for p in t["partitions"]
        )
        # The acknowledgement rode on the fetch after (epoch 2), which found the
        # session lost.
        assert ack_fetch["share_session_epoch"] == 2
        (topic,) = ack_fetch["topics"]
        assert topic["partitions"][0]["acknowledgement_batches"] == [
            {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1], "_tagged_fields": {}}
        ]
        # Reopened at epoch 0, naming the partition again, with no acknowledgement.
        assert reopen["share_session_epoch"] == 0
        assert reopen["topics"][0]["partitions"][0]["acknowledgement_batches"] == []
        # What the lost session acquired is gone: no longer acknowledgeable.
        for r in (r1, r2):
            with pytest.raises(InvalidAcknowledgement, match="its share session ended"):
                fetcher.tracker.acknowledge(r.acquisition, AcknowledgeType.RELEASE)
        assert fetcher.tracker.held() == 0
    finally:
        await fetcher.abort()


async def read_ahead_sent(client: ScriptedLeader, fetches: int) -> None:
    while sum(1 for n, _ in client.requests if n == "ShareFetch") < fetches:
        client.sent.clear()
        await client.sent.wait()


async def test_commit_sends_a_share_acknowledge_and_returns_the_results() -> None:
    client = ScriptedLeader([fetch_answer(acquired=(0, 1, 3))])
    fetcher = make(client)
    try:
        fetcher.set_assignment({("t", 0): TID})
        r0, r1 = await records(fetcher, 2)
        assert r0.delivery_count == 3
        fetcher.tracker.acknowledge(r0.acquisition, AcknowledgeType.REJECT)
        fetcher.tracker.acknowledge(r1.acquisition, AcknowledgeType.RELEASE)
        results = await asyncio.wait_for(fetcher.commit(), WAIT)
        assert sorted((r.ack_type.name, r.offsets, r.ok) for r in results) == [
            ("REJECT", (0,), True),
            ("RELEASE", (1,), True),
        ]
        acks = [f for n, f in client.requests if n == "ShareAcknowledge"]
        assert len(acks) == 1 and acks[0]["share_session_epoch"] >= 1
        batches = acks[0]["topics"][0]["partitions"][0]["acknowledgement_batches"]
        assert [(b["first_offset"], b["last_offset"], b["acknowledge_types"]) for b in batches] == [
            (0, 1, [3, 2])
        ]
    finally:
        await fetcher.abort()


async def test_close_ends_the_session_at_epoch_minus_1_releasing_what_was_handed_out() -> None:
    client = ScriptedLeader([fetch_answer(acquired=(0, 1, 1))])
    fetcher = make(client)
    try:
        fetcher.set_assignment({("t", 0): TID})
        await records(fetcher, 1)  # offset 1 stays buffered (never handed out)
        await fetcher.close(WAIT)
        name, last = client.requests[-1]
        assert (name, last["share_session_epoch"]) == ("ShareAcknowledge", -1)
        batches = last["topics"][0]["partitions"][0]["acknowledgement_batches"]
        assert [(b["first_offset"], b["last_offset"], b["acknowledge_types"]) for b in batches] == [
            (0, 0, [2])
        ]
    finally:
        await fetcher.abort()


async def test_the_closed_gate_hands_out_nothing() -> None:
    client = ScriptedLeader([fetch_answer(acquired=(0, 0, 1))])
    fetcher = make(client)
    try:
        fetcher.set_membership_valid_until(None)  # the membership is not proven
        fetcher.set_assignment({("t", 0): TID})
        await asyncio.wait_for(client.sent.wait(), WAIT)
        await fetcher.wait_for_records(0.5)  # the gate is closed: only time passes
        assert fetcher.take_records(10) == []
        fetcher.set_membership_valid_until(1e12)
        assert [r.offset for r in await records(fetcher, 1)] == [0]
    finally:
        await fetcher.abort()


async def test_a_leader_without_share_fetch_v2_is_read_without_strict_acquisition() -> None:
    client = ScriptedLeader([fetch_answer(acquired=(0, 0, 1))], fetch_max=1)
    fetcher = make(client)
    try:
        fetcher.set_assignment({("t", 0): TID})
        (r,) = await records(fetcher, 1)
        assert r.offset == 0
        name, first = client.requests[0]
        assert name == "ShareFetch" and "share_acquire_mode" not in first  # v1
        assert first["max_records"] == 10
    finally:
        await fetcher.abort()


def share_fetches(client: ScriptedLeader) -> int:
    return sum(1 for name, _ in client.requests if name == "ShareFetch")


async def test_no_fetch_reads_ahead_of_more_than_max_poll_records() -> None:
    """Strict acquisition: an answer of ``max_poll_records`` lets the next fetch leave
    at once; with two answers waiting, the third waits for a poll."""
    second = Gated(fetch_answer(acquired=(10, 19, 1)))
    third = Gated(fetch_answer())
    client = ScriptedLeader([fetch_answer(acquired=(0, 9, 1)), second, third])
    fetcher = make(client)
    try:
        fetcher.set_assignment({("t", 0): TID})
        await asyncio.wait_for(read_ahead_sent(client, 2), WAIT)  # no take needed
        second.gate.set()
        while fetcher._undecoded_n + len(fetcher._buffer) < 20:  # the second answer in
            await fetcher.wait_for_records(WAIT)
        for _ in range(20):  # the leader's task gets every chance to send
            await asyncio.sleep(0)
        assert share_fetches(client) == 2
        client.sent.clear()
        (first,) = fetcher.take_records(1)  # 19 left: still no room
        for _ in range(20):
            await asyncio.sleep(0)
        assert share_fetches(client) == 2
        rest = fetcher.take_records(9)  # 10 left: room to read ahead
        await asyncio.wait_for(client.sent.wait(), WAIT)
        assert share_fetches(client) == 3
        rest += fetcher.take_records(10)
        assert [r.offset for r in [first, *rest]] == list(range(20))
    finally:
        third.gate.set()
        await fetcher.abort()


async def test_records_half_through_their_lock_hold_the_read_ahead_back() -> None:
    client = ScriptedLeader([fetch_answer(acquired=(0, 2, 1))])
    fetcher = make(client)
    try:
        fetcher.set_assignment({("t", 0): TID})
        await fetcher.wait_for_records(WAIT)
        buffered = fetcher._buffer
        run = buffered.first().acquisition.run if buffered else fetcher._undecoded[0].runs[0]
        assert run is not None
        half = 30_000 / 2000  # the answer's lock: 30 s
        assert fetcher._read_ahead_room(run.deadline - half - 0.1)
        assert not fetcher._read_ahead_room(run.deadline - half + 0.1)
        assert [r.offset for r in fetcher.take_records(10)] == [0, 1, 2]
        assert fetcher._read_ahead_room(run.deadline)  # an empty buffer: always room
    finally:
        await fetcher.abort()


async def test_records_acquired_for_a_partition_that_left_meanwhile_are_released() -> None:
    answer = Gated(fetch_answer(acquired=(0, 1, 1)))
    client = ScriptedLeader([answer])
    fetcher = make(client)
    try:
        fetcher.set_assignment({("t", 0): TID})
        await asyncio.wait_for(read_ahead_sent(client, 1), WAIT)
        fetcher.set_assignment({})  # the partition leaves while the fetch is out
        client.sent.clear()
        answer.gate.set()
        await asyncio.wait_for(read_ahead_sent(client, 2), WAIT)
        _, after = client.requests[-1]
        batches = [
            (b["first_offset"], b["last_offset"], b["acknowledge_types"])
            for t in after["topics"]
            for p in t["partitions"]
            for b in p["acknowledgement_batches"]
        ]
        assert batches == [(0, 1, [2])]  # RELEASE, with the request that forgets it
        assert fetcher.take_records(10) == []
    finally:
        await fetcher.abort()


def make_batch_optimized(client: ScriptedLeader) -> ShareFetcher:
    return make(client, acquire_mode=AcquireMode.BATCH_OPTIMIZED)


async def test_batch_optimized_fetches_say_so_and_read_ahead_within_one_poll() -> None:
    """A batch-optimized fetch may bring more than ``max_poll_records`` (whole batches):
    no fetch leaves at that answer (counting its rounding up out was measured to cost
    four consumers on two partitions a quarter of their rate); the next waits until a
    poll brings the buffer down to one poll's worth."""
    # 15 records: a batch-optimized fetch may bring more than max_poll_records (10).
    client = ScriptedLeader([fetch_answer(acquired=(0, 14, 1))])
    fetcher = make_batch_optimized(client)
    try:
        fetcher.set_assignment({("t", 0): TID})
        await fetcher.wait_for_records(WAIT)
        (first,) = [f for n, f in client.requests if n == "ShareFetch"]
        assert first["share_acquire_mode"] == 0 and first["max_records"] == 10
        for _ in range(20):  # the leader's task gets every chance to send
            await asyncio.sleep(0)
        assert share_fetches(client) == 1
        # 15 buffered: no read-ahead until a poll takes the buffer down to 10.
        client.sent.clear()
        assert [r.offset for r in fetcher.take_records(5)] == list(range(5))
        await asyncio.wait_for(client.sent.wait(), WAIT)
        assert share_fetches(client) == 2
        assert [r.offset for r in fetcher.take_records(20)] == list(range(5, 15))
    finally:
        await fetcher.abort()


async def test_held_fetching_sends_acknowledgements_alone_until_the_next_poll() -> None:
    client = ScriptedLeader([fetch_answer(acquired=(0, 1, 1))])
    fetcher = make(client)
    try:
        fetcher.set_assignment({("t", 0): TID})
        r0, r1 = await records(fetcher, 2)
        fetcher.hold_fetching()  # e.g. a ShareProcessor stopped: it RELEASEs what it held
        await asyncio.wait_for(read_ahead_sent(client, 2), WAIT)  # the read-ahead, answered
        fetched = share_fetches(client)
        client.sent.clear()
        for r in (r0, r1):
            fetcher.tracker.acknowledge(r.acquisition, AcknowledgeType.RELEASE)
        fetcher.acknowledged()
        await asyncio.wait_for(client.sent.wait(), WAIT)
        name, ack = client.requests[-1]
        assert name == "ShareAcknowledge"  # not a ShareFetch that could acquire them again
        batches = ack["topics"][0]["partitions"][0]["acknowledgement_batches"]
        assert [(b["first_offset"], b["last_offset"], b["acknowledge_types"]) for b in batches] == [
            (0, 1, [2])
        ]
        assert share_fetches(client) == fetched
        client.sent.clear()
        fetcher.polled()  # the application asks for records again
        await asyncio.wait_for(client.sent.wait(), WAIT)
        assert client.requests[-1][0] == "ShareFetch"
    finally:
        await fetcher.abort()


async def test_kept_locks_are_renewed_before_they_end_though_fetches_wait_longer() -> None:
    """A RENEW waits for the ShareFetch in flight to its leader, so while locks are kept
    a fetch may not wait past the next renewal: here a 5 s fetch wait and a 1.2 s lock
    (the ShareProcessor's case: its consumer made without auto_renew)."""
    client = ScriptedLeader([fetch_answer(acquired=(0, 0, 1), lock_ms=1200)])
    fetcher = make(client, fetch_max_wait_ms=5000)
    loop = asyncio.get_running_loop()
    try:
        fetcher.keep_locks(True)  # as a ShareProcessor does before it reads
        fetcher.set_assignment({("t", 0): TID})
        (r,) = await records(fetcher, 1)
        run = r.acquisition.run
        assert run is not None
        while not any(name == "ShareAcknowledge" for name, _ in client.requests):
            client.sent.clear()
            await asyncio.wait_for(client.sent.wait(), WAIT)
        assert loop.time() < run.deadline  # the RENEW left while the lock held
        at = next(i for i, (name, _) in enumerate(client.requests) if name == "ShareAcknowledge")
        ack = client.requests[at][1]
        assert ack["is_renew_ack"] is True
        batches = ack["topics"][0]["partitions"][0]["acknowledgement_batches"]
        assert [(b["first_offset"], b["acknowledge_types"]) for b in batches] == [
            (0, [int(AcknowledgeType.RENEW)])
        ]
        waits = [f["max_wait_ms"] for n, f in client.requests[1:at] if n == "ShareFetch"]
        assert waits and max(waits) < 1200, waits
        fetcher.keep_locks(False)
        with pytest.raises(RuntimeError, match="without keep_locks"):
            fetcher.keep_locks(False)
    finally:
        await fetcher.abort()


async def test_without_kept_locks_a_fetch_waits_its_full_max_wait() -> None:
    client = ScriptedLeader([fetch_answer(acquired=(0, 0, 1), lock_ms=1200)])
    fetcher = make(client, fetch_max_wait_ms=5000)
    try:
        fetcher.set_assignment({("t", 0): TID})
        await records(fetcher, 1)
        await asyncio.wait_for(read_ahead_sent(client, 2), WAIT)
        assert client.requests[1][1]["max_wait_ms"] == 5000
    finally:
        await fetcher.abort()


async def test_nothing_is_acquired_before_the_first_poll() -> None:
    """A started consumer nobody polls yet must not hold records: their locks would run
    out in its buffer and their delivery counts rise for nothing (another member, polled
    all along, would get them only after the lock, with count 2)."""
    client = ScriptedLeader([fetch_answer(acquired=(0, 0, 1))])
    fetcher = make(client, polled=False)
    try:
        fetcher.set_assignment({("t", 0): TID})
        for _ in range(20):  # the leader's task gets every chance to send
            await asyncio.sleep(0)
        assert client.requests == []
        fetcher.polled()
        await asyncio.wait_for(client.sent.wait(), WAIT)
        assert [r.offset for r in await records(fetcher, 1)] == [0]
    finally:
        await fetcher.abort()


@pytest.mark.parametrize("auto_renew", [True, False])
async def test_a_commit_returns_renewals_only_where_the_application_made_them(
    auto_renew: bool,
) -> None:
    """A RENEW answered while a commit() waits is the commit's business only when the
    application asked for it: with auto_renew the consumer renews by itself (the result
    still reaches the hooks)."""
    from aiogroup._fetch.share_acknowledgements import AckResult
    from aiogroup._fetch.share_fetcher import _Flush

    seen: list[AckResult] = []
    fetcher = make(ScriptedLeader([]), hooks=ShareHooks(results=seen.extend), auto_renew=auto_renew)
    try:
        flush = _Flush({0})
        fetcher._flushes.append(flush)
        renewed = AckResult("t", 0, AcknowledgeType.RENEW, (0,), 0)
        accepted = AckResult("t", 0, AcknowledgeType.ACCEPT, (0,), 0)
        fetcher._report([renewed, accepted], 0.0, 0)
        assert flush.results == ([accepted] if auto_renew else [renewed, accepted])
        assert seen == [renewed, accepted]
    finally:
        await fetcher.abort()


async def test_the_next_fetch_leaves_at_the_answer_before_its_results_and_records() -> None:
    """Issue 28: at a ShareFetch's answer the next one goes on the wire first; then the
    answer's acknowledgement results are reported, then its records registered and
    decoded (the acquired hook).  The next fetch carries only what the application
    acknowledged before the answer: this answer's records ride on a later one."""
    events: list[tuple[str, Any]] = []
    second = Gated(fetch_answer(acquired=(3, 4, 1)))
    third = Gated(fetch_answer())
    client = ScriptedLeader([fetch_answer(acquired=(0, 2, 1)), second, third])
    real_send = client.send

    async def send(node: int, request: Any, group: Any = None) -> Any:
        events.append(("sent", request.API.name))
        return await real_send(node, request, group)

    client.send = send  # type: ignore[method-assign]
    hooks = ShareHooks(
        acquired=lambda rs, sent, lock: events.append(("acquired", [r.offset for r in rs])),
        results=lambda rs: events.append(("results", [(r.ack_type.name, r.offsets) for r in rs])),
    )
    fetcher = make(client, hooks=hooks)
    try:
        fetcher.set_assignment({("t", 0): TID})
        r0, *_ = await records(fetcher, 3)
        await asyncio.wait_for(read_ahead_sent(client, 2), WAIT)
        fetcher.tracker.acknowledge(r0.acquisition, AcknowledgeType.ACCEPT)
        fetcher.acknowledged()
        second.gate.set()  # the second answer carries no acknowledgement: none rode on it
        await asyncio.wait_for(read_ahead_sent(client, 3), WAIT)
        third.gate.set()
        await asyncio.wait_for(client.idle.wait(), WAIT)
        fetches = [f for n, f in client.requests if n == "ShareFetch"]
        assert ack_batches(fetches[1]) == []
        assert ack_batches(fetches[2]) == [(0, 0, [1])]
        # The third answer settles the ACCEPT: the fourth fetch left before its result.
        at = events.index(("results", [("ACCEPT", (0,))]))
        assert events[at - 1] == ("sent", "ShareFetch")
        assert sum(1 for e in events[:at] if e == ("sent", "ShareFetch")) == 4
        # The second answer's records: acquired (decoded) after the third fetch left.
        got = events.index(("acquired", [3, 4]))
        assert sum(1 for e in events[:got] if e == ("sent", "ShareFetch")) == 3
    finally:
        third.gate.set()
        await fetcher.abort()


def ack_batches(request: dict[str, Any]) -> list[tuple[int, int, list[int]]]:
    return [
        (b["first_offset"], b["last_offset"], b["acknowledge_types"])
        for t in request["topics"]
        for p in t["partitions"]
        for b in p["acknowledgement_batches"]
    ]


@pytest.mark.parametrize("why", ["held", "closing", "renewing", "flush"])
async def test_no_fetch_leaves_at_an_answer_when_the_loop_has_other_work(why: str) -> None:
    """The rules of the leader's loop hold for a fetch sent at an answer: nothing leaves
    there while fetching is held, the consumer closes, locks are kept (the loop decides
    RENEWs first), or a commit waits for this leader (a full buffer: the batch-optimized
    and strict read-ahead tests above)."""
    from aiogroup._fetch.share_fetcher import _Flush

    client = ScriptedLeader([])
    fetcher = make(client)
    try:
        fetcher.set_assignment({("t", 0): TID})
        deadline = asyncio.get_running_loop().time() + 30
        assert fetcher._fetch_at_answer(0, 10, deadline)  # one poll's worth: room
        if why == "held":
            fetcher.hold_fetching()
        elif why == "closing":
            fetcher._closing = True
        elif why == "renewing":
            fetcher.keep_locks(True)
        elif why == "flush":
            fetcher._flushes.append(_Flush({0}))
        assert not fetcher._fetch_at_answer(0, 10, deadline)
    finally:
        fetcher._closing = False
        await fetcher.abort()


def make_prefetching(answers: list[dict[str, Any] | Gated]) -> tuple[ScriptedLeader, ShareFetcher]:
    """Implicit mode, batch-optimized (answers of more than ``max_poll_records``), on a
    client whose connection the fetcher can write on itself."""
    client = ScriptedLeader(answers, wire=True)
    fetcher = make(client, explicit=False, acquire_mode=AcquireMode.BATCH_OPTIMIZED)
    return client, fetcher


async def settle() -> None:
    for _ in range(20):  # the leader's task gets every chance to run
        await asyncio.sleep(0)


async def test_a_poll_that_finds_the_buffer_empty_writes_the_next_fetch_itself() -> None:
    """Issue 28: polls served from the buffer never yield to the leader's task, so the
    next ShareFetch left only after the poll that found nothing had waited and the task
    had been woken.  That poll writes it itself, before it waits, carrying what was
    acknowledged before it - here the whole acquired run, one acknowledgement batch."""
    second = Gated(fetch_answer(acquired=(15, 29, 1)))
    client, fetcher = make_prefetching([fetch_answer(acquired=(0, 14, 1)), second])
    try:
        fetcher.set_assignment({("t", 0): TID})
        await fetcher.wait_for_records(WAIT)
        await settle()
        assert share_fetches(client) == 1  # 15 buffered: no room
        assert [r.offset for r in fetcher.take_records(10)] == list(range(10))
        fetcher.tracker.accept_delivered()  # each poll accepts what the last handed out
        assert [r.offset for r in fetcher.take_records(10)] == list(range(10, 15))
        assert share_fetches(client) == 1  # no await yet: the leader's task has not run
        fetcher.tracker.accept_delivered()
        assert fetcher.take_records(10) == []  # the buffer is empty: the fetch leaves now
        assert share_fetches(client) == 2
        ahead = [f for n, f in client.requests if n == "ShareFetch"][1]
        assert ack_batches(ahead) == [(0, 14, [1])]
        second.gate.set()
        assert [r.offset for r in await records(fetcher, 15)] == list(range(15, 30))
        assert [n for n, _ in client.requests[:2]] == ["ShareFetch"] * 2
    finally:
        second.gate.set()
        await fetcher.abort()


@pytest.mark.parametrize("why", ["held", "flush", "no connection"])
async def test_a_poll_writes_no_fetch_when_the_loop_would_not_send_one(why: str) -> None:
    from aiogroup._fetch.share_fetcher import _Flush

    second = Gated(fetch_answer())
    client, fetcher = make_prefetching([fetch_answer(acquired=(0, 14, 1)), second])
    try:
        fetcher.set_assignment({("t", 0): TID})
        await fetcher.wait_for_records(WAIT)
        await settle()
        fetcher.take_records(10)
        assert len(fetcher.take_records(10)) == 5
        if why == "held":
            fetcher.hold_fetching()
        elif why == "flush":
            fetcher._flushes.append(_Flush({0}))
        else:
            client._conns[(0, ConnectionGroup.DEFAULT)].closed = True
        assert fetcher.take_records(10) == []
        assert share_fetches(client) == 1
    finally:
        second.gate.set()
        fetcher._flushes.clear()
        await fetcher.abort()


@pytest.mark.parametrize("mode", ["explicit", "implicit"])
async def test_a_getmany_cancelled_at_any_step_loses_no_record(mode: str) -> None:
    """A poll cancelled wherever it waits - before and after it writes the next fetch,
    while the leader's task awaits that fetch's answer - loses nothing: every record is
    handed out once, by a later poll; in explicit mode each stays held until the close
    releases it, in implicit mode each is accepted once (the close carries the last
    poll's)."""
    from aiogroup.share import ShareConsumer

    answers: list[dict[str, Any] | Gated] = [
        fetch_answer(acquired=(first, first + 14, 1)) for first in range(0, 60, 15)
    ]
    client = ScriptedLeader(answers, wire=True)
    explicit = mode == "explicit"
    fetcher = make(client, explicit=explicit, acquire_mode=AcquireMode.BATCH_OPTIMIZED)
    consumer = ShareConsumer("t", group_id="g", max_poll_records=10, acknowledgement_mode=mode)
    consumer._fetcher = fetcher
    consumer._started = True
    try:
        fetcher.set_assignment({("t", 0): TID})
        got: list[int] = []
        steps = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT
        while len(got) < 60:
            assert loop.time() < deadline, f"{len(got)} of 60 records within {WAIT} s"
            poll = asyncio.ensure_future(consumer.getmany(timeout_ms=int(WAIT * 1000)))
            for _ in range(steps % 7):
                await asyncio.sleep(0)
            steps += 1
            poll.cancel()
            try:
                batch = await poll
            except asyncio.CancelledError:
                continue
            got += [r.offset for rs in batch.values() for r in rs]
        assert got == list(range(60))
        if explicit:
            assert fetcher.tracker.held() == 60  # handed out, not acknowledged: all held
        await fetcher.close(WAIT)
        name, last = client.requests[-1]
        assert (name, last["share_session_epoch"]) == ("ShareAcknowledge", -1)
        if explicit:
            assert ack_batches(last) == [(0, 59, [2])]  # every one released at the close
        else:
            accepted = [
                offset
                for _, request in client.requests
                for first, end, types in ack_batches(request)
                for offset in range(first, end + 1)
                if types == [1]
            ]
            assert sorted(accepted) == list(range(60))
        assert fetcher.tracker.held() == 0
    finally:
        await fetcher.abort()


def poll_all(fetcher: ShareFetcher) -> list[int]:
    """What the application's polls take from the buffer now, each poll accepting what
    the last handed out (implicit mode, as ``ShareConsumer._poll``)."""
    got: list[int] = []
    while True:
        fetcher.tracker.accept_delivered()
        taken = fetcher.take_records(10)
        if not taken:
            return got
        got += [r.offset for r in taken]


def share_fetch_requests(client: ScriptedLeader) -> list[dict[str, Any]]:
    return [f for n, f in client.requests if n == "ShareFetch"]


async def test_after_full_answers_the_next_fetch_leaves_at_the_answer() -> None:
    """Issue 28: an answer rounded past one poll's worth (batch-optimized: 15 for 10)
    held the next fetch back until the application's polls had gone through all of it,
    so the client's time per cycle added to the round trip.  After two full answers,
    with everything before handed out and acknowledged, the next fetch leaves at the
    answer - asking the broker not to wait - and carries the last answer's
    acknowledgements whole (one batch for the run: never split over two requests)."""
    third = Gated(fetch_answer(acquired=(30, 44, 1)))
    client, fetcher = make_prefetching(
        [fetch_answer(acquired=(0, 14, 1)), fetch_answer(acquired=(15, 29, 1)), third]
    )
    try:
        fetcher.set_assignment({("t", 0): TID})
        await fetcher.wait_for_records(WAIT)
        await settle()
        assert share_fetches(client) == 1  # one full answer: no read-ahead yet
        assert poll_all(fetcher) == list(range(15))  # the last poll writes fetch 2
        await fetcher.wait_for_records(WAIT)
        await settle()
        # Answer 2 was the second full one: fetch 3 left at it, before any poll.
        assert share_fetches(client) == 3
        first, second, ahead = share_fetch_requests(client)
        assert first["share_session_epoch"] == 0
        assert ack_batches(second) == [(0, 14, [1])]
        assert ahead["max_wait_ms"] == 0 and second["max_wait_ms"] == 50
        assert ack_batches(ahead) == []  # answer 2's records were not handed out yet
        assert poll_all(fetcher) == list(range(15, 30))
        third.gate.set()
        await fetcher.wait_for_records(WAIT)
        await settle()
        assert share_fetches(client) == 4
        fourth = share_fetch_requests(client)[3]
        assert fourth["max_wait_ms"] == 0
        assert ack_batches(fourth) == [(15, 29, [1])]  # answer 2's run, whole
        assert poll_all(fetcher) == list(range(30, 45))
    finally:
        third.gate.set()
        await fetcher.abort()


async def test_no_read_ahead_at_an_answer_while_a_record_waits_for_its_acknowledgement() -> None:
    """Records handed out and not acknowledged yet (implicit mode: the next poll
    accepts them) hold the fetch at an answer back: leaving then, it would carry only
    part of their run's acknowledgements - measured to double the broker's CPU."""
    third = Gated(fetch_answer(acquired=(30, 44, 1)))
    client, fetcher = make_prefetching(
        [fetch_answer(acquired=(0, 14, 1)), fetch_answer(acquired=(15, 29, 1)), third]
    )
    try:
        fetcher.set_assignment({("t", 0): TID})
        await fetcher.wait_for_records(WAIT)
        assert poll_all(fetcher) == list(range(15))
        await fetcher.wait_for_records(WAIT)
        await settle()
        assert share_fetches(client) == 3
        # The application takes answer 2's records; its next poll has not come yet.
        fetcher.tracker.accept_delivered()
        taken = fetcher.take_records(10) + fetcher.take_records(10)
        assert [r.offset for r in taken] == list(range(15, 30))
        assert fetcher.tracker.unacknowledged()
        third.gate.set()
        await fetcher.wait_for_records(WAIT)
        await settle()
        assert share_fetches(client) == 3  # held back: 15..29 handed out, not accepted
        # The next polls accept them and take answer 3; the one that finds the buffer
        # empty writes the fetch, both runs whole (one batch: contiguous, one type).
        assert poll_all(fetcher) == list(range(30, 45))
        assert share_fetches(client) == 4
        fourth = share_fetch_requests(client)[3]
        assert ack_batches(fourth) == [(15, 44, [1])]
        assert fourth["max_wait_ms"] == 50  # not a read-ahead
    finally:
        third.gate.set()
        await fetcher.abort()


async def test_a_short_answer_to_a_read_ahead_makes_the_next_one_wait_longer() -> None:
    """Consumers sharing partitions up to the broker's lock limit get short answers to
    their read-ahead: each doubles the full answers in a row the next one needs."""
    third = Gated(fetch_answer(acquired=(30, 32, 1)))  # 3 records: short
    client, fetcher = make_prefetching(
        [fetch_answer(acquired=(0, 14, 1)), fetch_answer(acquired=(15, 29, 1)), third]
    )
    try:
        fetcher.set_assignment({("t", 0): TID})
        await fetcher.wait_for_records(WAIT)
        assert poll_all(fetcher) == list(range(15))
        await fetcher.wait_for_records(WAIT)
        await settle()
        assert share_fetches(client) == 3  # the read-ahead
        assert poll_all(fetcher) == list(range(15, 30))
        third.gate.set()
        await fetcher.wait_for_records(WAIT)
        await settle()
        assert fetcher._full_needed[0] == 4
        assert fetcher._full_answers[0] == 0
    finally:
        third.gate.set()
        await fetcher.abort()


def test_the_full_answers_a_read_ahead_needs() -> None:
    from aiogroup._fetch.share_fetcher import (
        _FULL_ANSWERS_MAX,
        _FULL_ANSWERS_TO_READ_AHEAD,
        _read_ahead_needed,
    )

    assert _read_ahead_needed(_FULL_ANSWERS_TO_READ_AHEAD, True) == _FULL_ANSWERS_TO_READ_AHEAD
    assert _read_ahead_needed(2, False) == 4
    assert _read_ahead_needed(4, True) == 3
    assert _read_ahead_needed(_FULL_ANSWERS_MAX, False) == _FULL_ANSWERS_MAX
    n = _FULL_ANSWERS_TO_READ_AHEAD
    for _ in range(10):
        n = _read_ahead_needed(n, False)
    assert n == _FULL_ANSWERS_MAX


async def test_an_answer_settles_its_acknowledgements_after_the_next_fetch_left() -> None:
    """Issue 28: settling an answer's acknowledgements builds a result per offset; where
    the next fetch leaves at that answer it is written first, then they are settled -
    and reported as before, ahead of the answer's records."""
    third = Gated(fetch_answer(acquired=(30, 44, 1)))
    client, fetcher = make_prefetching(
        [fetch_answer(acquired=(0, 14, 1)), fetch_answer(acquired=(15, 29, 1)), third]
    )
    settled: list[tuple[int, list[Any]]] = []
    answered = fetcher.tracker.answered

    def settling(token: int, errors: Any, **kw: Any) -> Any:
        results = answered(token, errors, **kw)
        settled.append((share_fetches(client), [(r.ack_type.name, r.offsets) for r in results]))
        return results

    fetcher.tracker.answered = settling  # type: ignore[method-assign]
    reported: list[Any] = []
    fetcher.hooks.results = lambda rs: reported.extend((r.ack_type.name, r.offsets) for r in rs)
    try:
        fetcher.set_assignment({("t", 0): TID})
        await fetcher.wait_for_records(WAIT)
        assert poll_all(fetcher) == list(range(15))  # writes fetch 2, carrying 0-14
        await fetcher.wait_for_records(WAIT)
        await settle()
        # Answer 2 settled fetch 2's ACCEPT of 0-14 after fetch 3 had left at it.
        assert settled == [(3, [("ACCEPT", tuple(range(15)))])]
        assert reported == [("ACCEPT", tuple(range(15)))]
        assert ack_batches(share_fetch_requests(client)[2]) == []
        assert poll_all(fetcher) == list(range(15, 30))
    finally:
        third.gate.set()
        await fetcher.abort()


def big_batch(base: int, count: int, size: int) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for i in range(count):
        builder.append(i, 1000 + i, b"k", bytes([i % 256]) * size, [])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base)
    return bytes(data)


async def test_a_fetch_asks_for_the_bytes_its_records_take_within_fetch_max_bytes() -> None:
    """Issue 28: the broker's work per ShareFetch grows with its MaxBytes, so a fetch
    asks for four times what ``max_poll_records`` records of the last answer's size
    take per partition - at least 1 MiB, at most ``fetch_max_bytes``; 1 MiB before any
    answer brought records."""
    small = fetch_answer(acquired=(0, 9, 1))
    big = fetch_answer(acquired=(10, 19, 1))
    records_of_big = big_batch(10, 10, 40_000)
    big["responses"][0]["partitions"][0]["records"] = records_of_big
    huge = fetch_answer(acquired=(20, 29, 1))
    huge["responses"][0]["partitions"][0]["records"] = big_batch(20, 10, 400_000)
    client = ScriptedLeader([small, big, huge])
    fetcher = make(client, fetch_max_bytes=8 << 20)
    try:
        fetcher.set_assignment({("t", 0): TID})
        for n in range(3):
            await records(fetcher, 10)
            await asyncio.wait_for(read_ahead_sent(client, n + 2), WAIT)
        asked = [f["max_bytes"] for f in share_fetch_requests(client)]
        expected_big = int(len(records_of_big) / 10 * 10 * 1 * 4)
        assert expected_big > 1 << 20
        assert asked == [1 << 20, 1 << 20, expected_big, 8 << 20]
    finally:
        await fetcher.abort()


async def test_a_fetch_never_asks_for_more_than_fetch_max_bytes() -> None:
    client = ScriptedLeader([fetch_answer(acquired=(0, 9, 1))])
    fetcher = make(client, fetch_max_bytes=1000)
    try:
        fetcher.set_assignment({("t", 0): TID})
        await records(fetcher, 10)
        await asyncio.wait_for(read_ahead_sent(client, 2), WAIT)
        assert [f["max_bytes"] for f in share_fetch_requests(client)] == [1000, 1000]
    finally:
        await fetcher.abort()
