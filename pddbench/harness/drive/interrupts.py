"""Ctrl-C / SIGTERM for a client that runs off the main thread.

Signals reach only the main thread. When the replay client runs in its own thread (bound
to the emulated client namespace, ``drive.netns.run_in_client_netns``), it registers
what stopping it means here, and the main thread calls :func:`interrupt_all` when a
signal arrives. Owns only that registry; must not install signal handlers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_lock = threading.Lock()
_hooks: dict[int, Callable[[], None]] = {}
_next = [0]


def register(hook: Callable[[], None]) -> Callable[[], None]:
    """Call ``hook`` (thread-safe itself) on :func:`interrupt_all`; returns the remover."""
    with _lock:
        key = _next[0]
        _next[0] += 1
        _hooks[key] = hook

    def remove() -> None:
        with _lock:
            _hooks.pop(key, None)

    return remove


def interrupt_all() -> int:
    """Run every registered hook; returns how many there were."""
    with _lock:
        hooks = list(_hooks.values())
    for hook in hooks:
        hook()
    return len(hooks)
