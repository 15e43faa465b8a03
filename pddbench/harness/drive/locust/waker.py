"""A precise wake-up for a gevent process: an OS thread sleeps to the due time, then wakes the hub.

gevent's libev loop waits in ``epoll_wait``, whose timeout is whole milliseconds rounded
up, plus libev's minimum wait: a greenlet that sleeps until a request is due wakes
0.5–1.5 ms late, and every request's schedule lag starts there. :class:`PreciseWaker`
keeps one real (unpatched) OS thread that sleeps on a lock with a sub-millisecond
timeout until the deadline it is given, then sends a libev async signal, which wakes the
hub at once and runs ``on_wake`` in it. It costs one thread wake per deadline reached.

Must not: run gevent code on its thread (only ``async_.send``, which libev makes
thread-safe), or decide what is due (the shard driver does).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import gevent
from gevent import monkey

_start_thread = monkey.get_original("_thread", "start_new_thread")
_allocate_lock = monkey.get_original("_thread", "allocate_lock")
_monotonic = time.monotonic


class PreciseWaker:
    """Calls ``on_wake`` in the hub at (or a few tens of µs after) each deadline set."""

    def __init__(self, on_wake: Callable[[], None]):
        self._async = gevent.get_hub().loop.async_()
        self._async.start(on_wake)
        self._state = _allocate_lock()  # guards _deadline and _stopped
        self._changed = _allocate_lock()  # released when the deadline changes (a semaphore)
        self._changed.acquire()
        self._deadline: float | None = None
        self._stopped = False
        _start_thread(self._run, ())

    def wake_at(self, deadline: float) -> None:
        """Wake the hub at ``deadline`` (monotonic seconds); replaces the previous one."""
        with self._state:
            if self._deadline == deadline:
                return
            self._deadline = deadline
        self._signal_change()

    def close(self) -> None:
        with self._state:
            self._stopped = True
            self._async.stop()
            self._async.close()
        self._signal_change()

    def _signal_change(self) -> None:
        with contextlib.suppress(RuntimeError):  # already released: the thread has not looked
            self._changed.release()

    def _run(self) -> None:
        changed, state = self._changed, self._state
        while True:
            with state:
                if self._stopped:
                    return
                deadline = self._deadline
            if deadline is None:
                changed.acquire()
                continue
            left = deadline - _monotonic()
            if left > 0 and changed.acquire(timeout=left):
                continue  # a new deadline (or a stop) arrived first
            with state:  # sent under the lock: close() cannot close the watcher meanwhile
                if self._stopped:
                    return
                if self._deadline != deadline:
                    continue
                self._deadline = None
                self._async.send()
