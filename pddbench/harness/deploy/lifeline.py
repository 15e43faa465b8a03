"""Processes that die with the harness, however it ends (SIGKILL included).

Two mechanisms, both set up when a server is started:

* ``PR_SET_PDEATHSIG=SIGKILL`` (:func:`child_setup`, run in the child between fork and
  exec): the kernel kills the direct child when the harness thread that started it dies;
  the child also starts its own session (process group).
* a *lifeline* (:class:`Lifeline`): a tiny watcher process (``python -m
  pddbench.harness.deploy.lifeline``) in its own session, holding the read end of a pipe from
  the harness. Each started process group is announced on the pipe; when the pipe
  reaches end-of-file without a clean ``bye`` (the harness died), the watcher sends
  SIGTERM to every announced group, then SIGKILL after a grace period — which also
  reaches grandchildren the kernel's death signal does not (an engine's workers).

A clean teardown terminates the groups itself and says ``bye``; the watcher then exits
without signalling anything. Must not: decide what to start, or wait for health.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
GRACE_S = 2.0


def child_setup() -> Callable[[], None]:
    """A ``preexec_fn``: SIGKILL on the death of the starting thread (Linux), and exit at
    once when the harness already died between fork and this call."""
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None

    def setup() -> None:
        if libc is not None:
            libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return setup


class Lifeline:
    """The watcher of one harness process; announce each process group it starts."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "pddbench.harness.deploy.lifeline"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # not in the harness's group: survives its kill
            )
        return self._proc

    def watch(self, pgid: int) -> None:
        """Kill process group ``pgid`` should the harness die before :meth:`release`."""
        proc = self._start()
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            proc.stdin.write(f"{pgid}\n".encode())
            proc.stdin.flush()

    def release(self) -> None:
        """The harness tore down itself: the watcher exits without signalling."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            proc.stdin.write(b"bye\n")
            proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def _kill_groups(groups: list[int]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        if sig == signal.SIGTERM:
            deadline = time.monotonic() + GRACE_S
            while time.monotonic() < deadline and any(_alive(g) for g in groups):
                time.sleep(0.05)


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def main() -> None:
    """The watcher: read announced groups until ``bye`` (exit) or end-of-file (kill them)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the harness's to handle
    groups: list[int] = []
    for line in sys.stdin.buffer:
        word = line.strip()
        if word == b"bye":
            return
        if word.isdigit():
            groups.append(int(word))
    _kill_groups(groups)


if __name__ == "__main__":
    main()
