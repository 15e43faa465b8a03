"""Running the client where the scenario places it: a thread bound to the client namespace.

Owns :func:`run_in_client_netns` and the signals it relays. Must not know what the client
does (replay, settle, health checks are the callers').
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_RELAYED = {signal.SIGINT, signal.SIGTERM}  # what run_in_client_netns relays to the client


def run_in_client_netns(name: str | None, fn: Callable[[], T]) -> T:
    """``fn()`` in a thread bound to the client namespace ``name`` (None: here, loopback).

    The main thread never enters an emulated namespace: a cleanup that kills processes by
    namespace inode (``pddbench netem cleanup``) would otherwise SIGKILL the harness
    itself. It waits for the client thread and relays Ctrl-C / SIGTERM (as
    ``KeyboardInterrupt`` or ``Terminated``) to the client through ``interrupts``, then
    returns what the client returned (an interrupted outcome) — a second signal while it
    finishes is relayed again.
    """
    if name is None:
        return fn()
    from pddbench.harness.drive import interrupts
    from pddbench.netem import nsutil

    box: dict[str, Any] = {}
    done = threading.Event()  # waited on, not Thread.join: a join interrupted by Ctrl-C
    # can leave the thread looking finished (CPython 3.11)

    def target() -> None:
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _RELAYED)  # not blocked in children
            fd = os.open(nsutil.netns_path(name), os.O_RDONLY | os.O_CLOEXEC)
            try:
                nsutil.setns(fd)
            finally:
                os.close(fd)
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc
        finally:
            done.set()

    thread = threading.Thread(target=target, name=f"client-{name}", daemon=True)
    # A signal while the thread starts would surface in Thread.start, outside the loop
    # below (seen in CI: a Ctrl-C right after the client registered escaped as a
    # KeyboardInterrupt); held until the loop's first wait, it is relayed like any other.
    signal.pthread_sigmask(signal.SIG_BLOCK, _RELAYED)
    try:
        thread.start()
    except BaseException:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _RELAYED)
        raise
    held = True  # unblocked inside the try below, even when the client is already done
    unheard: BaseException | None = None  # a signal no client was there to take
    while True:
        try:
            if held:
                held = False
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _RELAYED)
            if done.is_set():
                break
            done.wait(0.2)
        except BaseException as exc:  # Ctrl-C or SIGTERM (Terminated) in the main thread
            if not interrupts.interrupt_all():
                unheard = exc
    if "error" in box:
        raise box["error"]
    if unheard is not None:
        raise unheard
    return box["value"]
