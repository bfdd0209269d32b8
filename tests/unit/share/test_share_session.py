"""One share session with one leader: epochs, partitions named and forgotten, errors."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from aiogroup._fetch.share_session import (
    CLOSE_EPOCH,
    SessionReaction,
    ShareSession,
    session_reaction,
)
from aiogroup._protocol.share_types import AckBatch
from tests.unit.membership.test_purity import PACKAGE_DIR, SCRIPT

A = uuid.UUID(int=0xA)
B = uuid.UUID(int=0xB)
ACK = AckBatch(3, 4, (1,))


def test_epoch_0_opens_with_every_partition_then_counts_up() -> None:
    s = ShareSession(1)
    r = s.fetch_request({(A, 0), (A, 1), (B, 0)})
    assert r.epoch == 0
    assert r.topics == {A: {0: (), 1: ()}, B: {0: ()}}
    assert r.forgotten == {}
    assert s.answered(0) is SessionReaction.OK
    assert s.is_open and s.epoch == 1
    r = s.fetch_request({(A, 0), (A, 1), (B, 0)})
    assert (r.epoch, r.topics, r.forgotten) == (1, {}, {})
    s.answered(0)
    assert s.epoch == 2


def test_an_incremental_request_names_additions_acks_and_forgets_removals() -> None:
    s = ShareSession(1)
    s.fetch_request({(A, 0), (A, 1)})
    s.answered(0)
    r = s.fetch_request({(A, 1), (B, 2)}, {(A, 1): [ACK]})
    assert r.topics == {A: {1: (ACK,)}, B: {2: ()}}
    assert r.forgotten == {A: (0,)}
    s.answered(0)
    assert s.partitions == {(A, 1), (B, 2)}


def test_acks_never_ride_on_epoch_0() -> None:
    s = ShareSession(1)
    with pytest.raises(ValueError, match="epoch-0"):
        s.fetch_request({(A, 0)}, {(A, 0): [ACK]})
    with pytest.raises(ValueError, match="no share session is open"):
        s.acknowledge_request({(A, 0): [ACK]})


def test_one_request_at_a_time() -> None:
    s = ShareSession(7)
    s.fetch_request({(A, 0)})
    with pytest.raises(ValueError, match="in flight"):
        s.fetch_request({(A, 0)})
    with pytest.raises(ValueError, match="in flight"):
        s.reset()
    with pytest.raises(ValueError, match="no request"):
        ShareSession(1).answered(0)


@pytest.mark.parametrize(
    ("code", "reaction"),
    [
        (122, SessionReaction.REOPEN),  # SHARE_SESSION_NOT_FOUND
        (123, SessionReaction.REOPEN),  # INVALID_SHARE_SESSION_EPOCH
        (133, SessionReaction.REOPEN_LATER),  # SHARE_SESSION_LIMIT_REACHED
        (-1, SessionReaction.REOPEN),  # any other top-level refusal
        (0, SessionReaction.OK),
    ],
)
def test_session_errors_reopen_at_epoch_0_in_a_new_generation(
    code: int, reaction: SessionReaction
) -> None:
    assert session_reaction(code) is reaction
    s = ShareSession(1)
    s.fetch_request({(A, 0)})
    s.answered(0)
    s.fetch_request({(A, 0)})
    assert s.answered(code) is reaction
    if reaction is SessionReaction.OK:
        assert (s.epoch, s.generation) == (2, 0)
        return
    assert (s.epoch, s.generation, s.partitions) == (0, 1, frozenset())
    # The next request opens a session again, naming every partition.
    assert s.fetch_request({(A, 0)}).topics == {A: {0: ()}}


def test_no_answer_is_a_lost_session() -> None:
    s = ShareSession(1)
    s.fetch_request({(A, 0)})
    s.answered(0)
    s.acknowledge_request({(A, 0): [ACK]})
    assert s.failed() is SessionReaction.REOPEN
    assert (s.epoch, s.generation) == (0, 1)


def test_acknowledge_carries_the_epoch_and_close_uses_minus_1() -> None:
    s = ShareSession(1)
    s.fetch_request({(A, 0)})
    s.answered(0)
    r = s.acknowledge_request({(A, 0): [ACK]})
    assert (r.epoch, r.topics) == (1, {A: {0: (ACK,)}})
    s.answered(0)
    r = s.acknowledge_request({(A, 0): [ACK]}, close=True)
    assert r.epoch == CLOSE_EPOCH
    s.answered(0)
    assert s.closed and not s.is_open
    with pytest.raises(ValueError, match="closed"):
        s.fetch_request({(A, 0)})
    s.reset()
    assert not s.closed and s.epoch == 0


def test_a_close_without_an_answer_still_closes() -> None:
    s = ShareSession(1)
    s.fetch_request({(A, 0)})
    s.answered(0)
    s.acknowledge_request({}, close=True)
    s.failed()
    assert s.closed


def test_the_epoch_wraps_to_1() -> None:
    s = ShareSession(1, epoch=2**31 - 1, partitions=frozenset({(A, 0)}))
    s.fetch_request({(A, 0)})
    s.answered(0)
    assert s.epoch == 1


def test_the_session_module_imports_no_io_modules() -> None:
    script = SCRIPT.replace(
        "import aiogroup._membership.machine as machine\n"
        "print(machine.mermaid_diagram().splitlines()[0])",
        "import aiogroup._fetch.share_session, aiogroup._fetch.share_acknowledgements\n"
        "print('pure')",
    )
    assert script != SCRIPT
    proc = subprocess.run(
        [sys.executable, "-c", script, str(PACKAGE_DIR)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "pure"
