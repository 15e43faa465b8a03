"""The twin's virtual clock: a heap of timed callbacks, run in time order (sans-IO).

Owns virtual time only: ``now``, scheduling a callback at or after an instant, and running
them in (time, order of scheduling) order, so equal times break ties the same way on every
run. Must not read a wall clock, sleep or touch sockets.
"""

from __future__ import annotations

from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any


class Sim:
    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._n = 0
        self.events = 0

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

    def run(self, until: float = float("inf")) -> None:
        heap = self._heap
        events = self.events
        try:
            while heap and heap[0][0] <= until:
                t, _, fn, args = heappop(heap)
                self.now = t
                events += 1
                fn(*args)
        finally:
            self.events = events


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
