"""``_support.heap_trim``: glibc's malloc_trim when there is one, nothing otherwise."""

from __future__ import annotations

import ctypes.util
import platform

import pytest

from aiogroup._support import heap_trim


@pytest.fixture(autouse=True)
def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap_trim, "_loaded", False)
    monkeypatch.setattr(heap_trim, "_trim", None)


def test_trims_where_the_c_library_is_glibc() -> None:
    glibc = platform.libc_ver()[0] == "glibc" and ctypes.util.find_library("c") is not None
    assert heap_trim.trim() is glibc


def test_turned_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOGROUP_MALLOC_TRIM", "0")
    assert heap_trim.trim() is False


def test_a_c_library_without_malloc_trim_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoTrim:
        def __init__(self, name: str) -> None:
            pass

    monkeypatch.setattr(heap_trim.ctypes, "CDLL", NoTrim)
    assert heap_trim.trim() is False
