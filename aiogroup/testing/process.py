"""Child processes that die with us: the test brokers (Tansu, Kafka JVMs).

Why: a broker left running after pytest is killed holds ports and memory until
someone notices (issue 17 item 9).  Each broker therefore runs in its own process
group (so that stopping it stops whatever it forked) and, on Linux, asks the kernel
for a parent-death signal: SIGKILL when the thread that started it goes away, even
if that was by SIGKILL.  The signal follows the *thread* that called ``Popen``, so
brokers are started on the caller's thread, never from a short-lived executor thread.

Also the freeze a fault test injects into a child (:func:`sigstop`), stamped in a history
only once it took effect.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

from aiogroup._support.timeouts import wait_for

__all__ = ["sigstop", "spawn_owned", "terminate"]

_PR_SET_PDEATHSIG = 1


def _deathsig_preexec(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that sets PR_SET_PDEATHSIG(SIGKILL), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:  # pragma: no cover - every glibc/musl system has one
        return None
    libc = ctypes.CDLL(libc_name, use_errno=True)

    def preexec() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent may have died between fork and prctl: then nobody would kill us.
        if os.getppid() != parent:
            os._exit(1)

    return preexec


def spawn_owned(
    args: Sequence[str],
    log: IO[bytes],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``args`` in a new session, output to ``log``, killed when we die."""
    return subprocess.Popen(
        list(args),
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        env=env,
        start_new_session=True,
        preexec_fn=_deathsig_preexec(os.getpid()),
    )


def terminate(proc: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds; reap the process."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        kill(proc)


def kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group at once (a crash, as failover tests need) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


async def sigstop(pid: int, timeout: float = 30.0) -> None:
    """SIGSTOP the child ``pid`` and return once the kernel reports it stopped.

    A history records a freeze as an event ("frozen"), and a checker reads the
    member's first event after it as its wake.  Stamped as the signal is sent, the
    stamp can precede the stop: a process runs on until the signal lands, and on a
    loaded machine writes events in between (a record acquired or started), which
    would then look as if they happened through the freeze.  Stamped after this
    returns, every event before the stop precedes the stamp.

    ``waitid`` with WNOWAIT reports the stop without consuming it (the child's owner -
    asyncio's watcher, ``Popen.wait`` - still reaps it later); WEXITED too, so that a
    child that died instead cannot leave the waiting thread behind: that is an error.
    """
    os.kill(pid, signal.SIGSTOP)
    got = await wait_for(
        asyncio.to_thread(os.waitid, os.P_PID, pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT),
        timeout,
    )
    if got is None or got.si_code != os.CLD_STOPPED:
        raise RuntimeError(f"process {pid} did not stop on SIGSTOP: {got}")
