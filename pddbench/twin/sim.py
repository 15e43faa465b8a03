"""The twin's virtual clock: a heap of timed callbacks, run in time order (sans-IO).

Owns virtual time only: ``now``, scheduling a callback at or after an instant, and running
them in (time, order of scheduling) order, so equal times break ties the same way on every
run. Must not read a wall clock, sleep or touch sockets.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any


class Sim:
    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._n = 0
        self._events = 0  # callbacks run off the heap ...
        self._direct = 0  # ... and by a lane straight after the one before it
        self._until = float("inf")  # the running run()'s bound

    @property
    def events(self) -> int:
        """Callbacks run so far."""
        return self._events + self._direct

    def at(self, t: float, fn: Callable[..., None], *args: Any) -> None:
        """Run ``fn(*args)`` at ``t`` (never before now)."""
        n = self._n = self._n + 1
        now = self.now
        heappush(self._heap, (now if now > t else t, n, fn, args))  # max(t, now)

    def next_time(self) -> float | None:
        """When the next callback is due (None: nothing is scheduled)."""
        return self._heap[0][0] if self._heap else None

    def after(self, dt: float, fn: Callable[..., None], *args: Any) -> None:
        self.at(self.now + dt, fn, *args)

    def lane(self, fn: Callable[..., None]) -> Lane:
        """A FIFO of calls to ``fn`` due in time order (one link's messages, see :class:`Lane`)."""
        return Lane(self, fn)

    def run(self, until: float = float("inf")) -> None:
        heap = self._heap
        events = self._events
        self._until = until
        try:
            while heap and heap[0][0] <= until:
                t, _, fn, args = heappop(heap)
                self.now = t
                events += 1
                fn(*args)
        finally:
            self._events = events
            self._until = float("inf")


class Lane:
    """Calls of one function due in nondecreasing time, such as the messages of one FIFO
    link: only the earliest waits on the sim's heap; when it runs, the next ones run straight
    after it while nothing else on the heap is due before them. Every call keeps the order
    number :meth:`Sim.at` would have given it, so everything runs in the same (time, order)
    order as with a heap entry each. A call due before the lane's last is given its own
    heap entry."""

    __slots__ = ("_armed", "_fire", "_queue", "_sim", "fn")

    def __init__(self, sim: Sim, fn: Callable[..., None]) -> None:
        self._sim = sim
        self.fn = fn
        self._queue: deque[tuple[float, int, tuple[Any, ...]]] = deque()
        self._armed = False  # the head is on the heap, or the lane is running
        self._fire = self.fire

    def at(self, t: float, *args: Any) -> None:
        """Run ``fn(*args)`` at ``t`` (never before now), as :meth:`Sim.at` would."""
        sim = self._sim
        n = sim._n = sim._n + 1
        now = sim.now
        if now > t:
            t = now
        q = self._queue
        if q and t < q[-1][0]:  # out of time order: on the heap of its own
            heappush(sim._heap, (t, n, self.fn, args))
            return
        q.append((t, n, args))
        if not self._armed:
            self._armed = True
            heappush(sim._heap, (t, n, self._fire, ()))

    def fire(self) -> None:
        """The head is due: run it, then the next ones while none of the heap's is due
        before them (an earlier time, or the same time and an earlier order number)."""
        sim = self._sim
        q = self._queue
        heap = sim._heap
        fn = self.fn
        args = q.popleft()[2]
        fn(*args)
        direct = 0
        try:
            while q:
                t, n, args = q[0]
                if heap:
                    top = heap[0]
                    if t > top[0] or (t == top[0] and n > top[1]):
                        heappush(heap, (t, n, self._fire, ()))
                        return
                if t > sim._until:
                    heappush(heap, (t, n, self._fire, ()))
                    return
                q.popleft()
                sim.now = t
                direct += 1
                fn(*args)
            self._armed = False
        finally:
            sim._direct += direct


class _Handle:
    """A scheduled callback that can be cancelled (the sim runs :meth:`fire`)."""

    __slots__ = ("callback", "cancelled")

    def __init__(self, callback: Callable[[], object]) -> None:
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        if not self.cancelled:
            self.callback()


class SimTimers:
    """The sim as the event loop of a :class:`~pddbench.servers.driver.StepDriver`."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim

    def time(self) -> float:
        return self.sim.now

    def call_at(self, when: float, callback: Callable[[], object]) -> _Handle:
        handle = _Handle(callback)
        self.sim.at(when, handle.fire)
        return handle

    def call_soon(self, callback: Callable[[], object]) -> _Handle:
        return self.call_at(self.sim.now, callback)
