"""Records out of the cyclic collector while the fetcher holds them, and never a leak.

``aiogroup._fetch.young_records.YoungRecords`` untracks the records the native module
builds while it holds a reference to each, and tracks them again before it lets go
of one that anything else still refers to.  What must hold: the records are the same
objects as the pure path's (type, fields, headers type); they are untracked only
while held; a cycle the application makes through a record - an attribute, a field
replaced by a container, the record put into its deserialized value - is collected
(``gc.collect`` and a weak reference) after two drains, at ``release`` (close), or
when the holder itself goes; records the application dropped are freed by their
reference count, without a collection.
"""

from __future__ import annotations

import gc
import json
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from aiogroup._fetch.walker import RecordSink, walk
from aiogroup._fetch.young_records import YoungRecords
from aiogroup.structs import ConsumerRecord
from tests.unit.test_native_records import TP, TS0, build, chunk_of, native

if not hasattr(native, "untrack"):
    pytest.fail("aiogroup_native predates untrack/retrack_shared: rebuild it (make native)")


def batch(base: int, n: int = 5, *, headers: bool = False, value: bytes = b"v" * 100) -> bytes:
    hs = [("trace", b"abc"), ("k", None)] if headers else []
    return build(base, [(i, TS0 + i, b"k%d" % i, value, hs) for i in range(n)])


def drain(
    young: YoungRecords | None, data: bytes, fetch_offset: int = 0, **kw: Any
) -> list[ConsumerRecord]:
    """One drain as the fetcher makes it: the turn, then the walk into a sink."""
    if young is not None:
        young.turn()
    sink = RecordSink(kw.get("kd"), kw.get("vd"), young)
    walk(chunk_of(data, fetch_offset), 1 << 30, sink)
    return sink.result.get(TP, [])


@pytest.fixture
def collector_paused() -> Iterator[None]:
    """No automatic collection in between: what is freed here is freed by refcount."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def test_held_records_are_untracked_and_equal_to_the_pure_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for headers in (False, True):
        data = batch(0, headers=headers)
        monkeypatch.setenv("AIOGROUP_NATIVE", "0")
        pure = drain(YoungRecords(), data)
        monkeypatch.setenv("AIOGROUP_NATIVE", "1")
        young = YoungRecords()
        fast = drain(young, data)
        assert fast == pure and len(fast) == 5
        for p, f in zip(pure, fast, strict=True):
            assert type(f) is type(p) is ConsumerRecord
            assert type(f.headers) is type(p.headers) is tuple
            assert vars(f) == vars(p)
            assert gc.is_tracked(p)  # the pure path's records are left alone
            assert not gc.is_tracked(f)
        assert young.held == 5


def test_without_the_native_functions_nothing_is_untracked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIOGROUP_NATIVE", "0")
    young = YoungRecords()
    recs = list(
        native.consumer_records(
            batch(0),
            0,
            len(batch(0)),
            ConsumerRecord,
            {"topic": TP.topic, "partition": TP.partition},
        )[0]
    )
    young.adopt(recs)
    assert young.held == 0 and all(gc.is_tracked(r) for r in recs)


def test_records_the_application_dropped_are_freed_at_the_next_drain_by_refcount(
    collector_paused: None,
) -> None:
    young = YoungRecords()
    refs = [weakref.ref(r) for r in drain(young, batch(0))]
    assert all(w() is not None for w in refs)  # dropped by the application: held here
    drain(young, batch(5), 5)
    assert all(w() is None for w in refs)  # the next drain's turn: freed, no collection


def test_records_the_application_holds_stay_untracked_through_idle_turns(
    collector_paused: None,
) -> None:
    young = YoungRecords()
    kept = drain(young, batch(0))
    for _ in range(5):
        young.turn()  # drains that built nothing (waiting for data): nothing ages
    assert young.held == 5 and not any(gc.is_tracked(r) for r in kept)


def test_a_record_still_held_when_let_go_is_tracked_again() -> None:
    young = YoungRecords()
    kept = drain(young, batch(0))
    drain(young, batch(5), 5)  # dropped by the application at once: freed at the next turn
    assert not any(gc.is_tracked(r) for r in kept) and young.held == 10
    later = drain(young, batch(10), 10)
    assert all(gc.is_tracked(r) for r in kept)  # let go, still referred to: tracked
    assert not any(gc.is_tracked(r) for r in later)
    assert young.held == 5  # only the newest drain's


def cycle_by_attribute(r: ConsumerRecord) -> None:
    r.note = [r]  # type: ignore[attr-defined]


def cycle_by_field(r: ConsumerRecord) -> None:
    r.value = {"record": r}


def cycle_by_headers(r: ConsumerRecord) -> None:
    box: list[Any] = []
    r.headers = (("box", box),)  # type: ignore[assignment]
    box.append(r)


def cycle_by_vars(r: ConsumerRecord) -> None:
    vars(r)["self"] = r


CYCLES = [cycle_by_attribute, cycle_by_field, cycle_by_headers, cycle_by_vars]


@pytest.mark.parametrize("make_cycle", CYCLES)
def test_a_cycle_through_a_record_is_collected_after_two_drains(make_cycle: Any) -> None:
    young = YoungRecords()
    recs = drain(young, batch(0))
    target = recs[2]
    make_cycle(target)
    ref = weakref.ref(target)
    del recs, target
    gc.collect()
    assert ref() is not None  # still held by the fetcher: not garbage yet
    drain(young, batch(5), 5)
    drain(young, batch(10), 10)
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize("make_cycle", CYCLES)
def test_a_cycle_through_a_record_is_collected_after_release(make_cycle: Any) -> None:
    young = YoungRecords()
    recs = drain(young, batch(0))
    make_cycle(recs[0])
    ref = weakref.ref(recs[0])
    del recs
    young.release()  # the consumer's close()
    assert young.held == 0
    gc.collect()
    assert ref() is None


def test_a_cycle_through_a_record_is_collected_when_the_holder_goes() -> None:
    young = YoungRecords()
    recs = drain(young, batch(0))
    cycle_by_attribute(recs[0])
    ref = weakref.ref(recs[0])
    del recs, young  # the consumer dropped without close()
    gc.collect()
    assert ref() is None


def test_a_holder_in_a_garbage_cycle_lets_its_records_be_collected() -> None:
    class Owner:
        pass

    owner = Owner()
    owner.young = YoungRecords()  # type: ignore[attr-defined]
    owner.me = owner  # type: ignore[attr-defined]
    recs = drain(owner.young, batch(0))  # type: ignore[attr-defined]
    cycle_by_field(recs[1])
    ref = weakref.ref(recs[1])
    del recs, owner
    gc.collect()  # the owner's cycle: the holder's finalizer tracks the record again
    gc.collect()  # then the record's cycle
    assert ref() is None


def test_a_deserialized_value_that_takes_the_record_in_is_collected() -> None:
    young = YoungRecords()
    recs = drain(young, batch(0, value=b'{"a": 1}'), vd=json.loads)
    assert recs[0].value == {"a": 1} and not gc.is_tracked(recs[0])
    recs[0].value["me"] = recs[0]
    ref = weakref.ref(recs[0])
    del recs
    drain(young, batch(5), 5)
    drain(young, batch(10), 10)
    gc.collect()
    assert ref() is None


def test_the_collector_walks_fewer_objects_after_a_drain() -> None:
    """What this is for: the first collection after a call does not visit the records."""
    data = batch(0, 2000)
    young = YoungRecords()
    for holder in (None, young):
        gc.collect()
        gc.disable()
        try:
            recs = drain(holder, data)
            walked = len(gc.get_objects(generation=0))
        finally:
            gc.enable()
        assert len(recs) == 2000
        if holder is None:
            assert walked >= 2000
        else:
            assert walked < 2000


def test_header_tuples_are_built_untracked_as_the_collector_would_leave_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A header pair (str, bytes or None) and the tuple of pairs can hold no cycle."""
    data = batch(0, headers=True)
    monkeypatch.setenv("AIOGROUP_NATIVE", "0")
    pure = drain(None, data)
    monkeypatch.setenv("AIOGROUP_NATIVE", "1")
    fast = drain(None, data)
    for p, f in zip(pure, fast, strict=True):
        assert f.headers == p.headers == (("trace", b"abc"), ("k", None))
        assert type(f.headers) is type(p.headers) is tuple
        assert all(type(h) is tuple for h in f.headers)
        assert not gc.is_tracked(f.headers)
        assert not any(gc.is_tracked(h) for h in f.headers)
        assert gc.is_tracked(f)  # no holder: the record itself stays tracked


def test_a_sweep_frees_what_only_the_holder_holds_and_ages_nothing(
    collector_paused: None,
) -> None:
    young = YoungRecords()
    recs = drain(young, batch(0))
    kept = recs[1]
    refs = [weakref.ref(r) for r in recs]
    del recs
    young.sweep()
    assert [w() is not None for w in refs] == [False, True, False, False, False]
    assert young.held == 1 and not gc.is_tracked(kept)
    for _ in range(3):
        young.sweep()  # no drain: the kept record stays untracked, held
    assert young.held == 1 and not gc.is_tracked(kept)


def test_generations_age_even_when_a_sweep_freed_the_newest() -> None:
    """A record kept from an old drain is let go (tracked) although every later drain's
    records were dropped and swept before the next turn."""
    young = YoungRecords()
    kept = drain(young, batch(0))[2]
    cycle_by_attribute(kept)
    ref = weakref.ref(kept)
    del kept
    for base in (5, 10, 15):
        drain(young, batch(base), base)
        young.sweep()  # the event loop's turn after the call: the drain's records freed
    gc.collect()
    assert ref() is None
