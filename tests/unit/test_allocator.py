"""``_support.allocator``: glibc's mallopt/malloc_trim where there is glibc, nothing otherwise."""

from __future__ import annotations

import ctypes.util
import platform
from typing import Any

import pytest

from aiogroup._support import allocator

GLIBC = platform.libc_ver()[0] == "glibc" and ctypes.util.find_library("c") is not None


class FakeLibc:
    """Records the calls instead of changing this test process's allocator."""

    def __init__(self, ok: int = 1) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.ok = ok

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append(("mallopt", param, value))
        return self.ok

    def malloc_trim(self, pad: int) -> int:
        self.calls.append(("malloc_trim", pad))
        return 1


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> FakeLibc:
    libc = FakeLibc()
    monkeypatch.setattr(allocator, "_loaded", True)
    monkeypatch.setattr(allocator, "_libc", libc)
    monkeypatch.setattr(allocator, "_tuned", None)
    for name in (*allocator._GLIBC_TUNABLES, "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIOGROUP_MALLOC_TUNE", "1")  # opted in; see the off-by-default test
    monkeypatch.delenv("AIOGROUP_MALLOC_TRIM", raising=False)
    return libc


def test_thresholds_are_left_alone_unless_the_application_opts_in(
    _fresh: FakeLibc, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AIOGROUP_MALLOC_TUNE")
    assert allocator.keep_freed_pages() is False
    assert allocator.trim() is True  # the trim at the bound changes no setting: on by default
    assert _fresh.calls == [("malloc_trim", 0)]


def test_the_real_c_library_is_found_where_it_is_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_loaded", False)
    monkeypatch.setattr(allocator, "_libc", None)
    assert (allocator._glibc() is not None) is GLIBC
    assert allocator.trim() is GLIBC  # malloc_trim changes no setting: safe to call here


def test_trim_calls_malloc_trim(_fresh: FakeLibc) -> None:
    assert allocator.trim() is True
    assert _fresh.calls == [("malloc_trim", 0)]


def test_trim_turned_off(_fresh: FakeLibc, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOGROUP_MALLOC_TRIM", "0")
    assert allocator.trim() is False
    assert _fresh.calls == []


def test_thresholds_are_fixed_once(_fresh: FakeLibc) -> None:
    assert allocator.keep_freed_pages() is True
    assert allocator.keep_freed_pages() is True
    assert _fresh.calls == [
        ("mallopt", allocator._M_MMAP_THRESHOLD, allocator.MMAP_THRESHOLD),
        ("mallopt", allocator._M_TRIM_THRESHOLD, allocator.TRIM_THRESHOLD),
    ]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("AIOGROUP_MALLOC_TUNE", "0"),
        ("MALLOC_MMAP_THRESHOLD_", "131072"),
        ("MALLOC_TRIM_THRESHOLD_", "0"),
        ("MALLOC_TOP_PAD_", "0"),
        ("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0"),
    ],
)
def test_an_application_choice_is_left_alone(
    _fresh: FakeLibc, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    assert allocator.keep_freed_pages() is False
    assert _fresh.calls == []


def test_a_refused_setting_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_libc", FakeLibc(ok=0))
    assert allocator.keep_freed_pages() is False


def test_without_glibc_nothing_happens(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(allocator, "_libc", None)
    assert allocator.trim() is False
    assert allocator.keep_freed_pages() is False


def test_free_heap_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    assert allocator.free_heap_bytes() is None  # the fake has no mallinfo2
    monkeypatch.setattr(allocator, "_loaded", False)
    monkeypatch.setattr(allocator, "_libc", None)
    free = allocator.free_heap_bytes()
    if GLIBC:
        assert isinstance(free, int) and free >= 0
