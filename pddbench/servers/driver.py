"""Runs an :class:`~pddbench.servers.engine.Engine` in real time on the asyncio loop.

Owns the only place where modelled time meets the wall clock: a step planned at ``start``
with modelled duration ``d`` completes when the loop's monotonic clock reaches
``start + d`` (a ``call_at`` timer, no polling). How late the timer fires is the scheduler
lag, exported as a histogram. When the engine stays busy, the next step starts at the
previous step's *modelled* end if the lag was within ``max_catchup_s`` (timer granularity,
so modelled throughput is exact); a larger lag is not absorbed: the next step starts at
the real time and the lost time is counted in ``pdd_scheduler_lost_seconds_total``.

Events the engine returns are handed to ``on_events`` synchronously. Many drivers (one per
instance) share one loop. The loop is asyncio's running one unless the caller passes other
:class:`Timers` (the virtual-time twin passes its clock: there the lag is always 0).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from pddbench.servers.engine import Engine, Event, Step
from pddbench.servers.metrics import Counter, Histogram


class Timers(Protocol):
    """The part of an event loop the driver uses (asyncio's, or the twin's virtual clock)."""

    def time(self) -> float: ...
    def call_at(self, when: float, callback: Callable[[], object]) -> Any: ...
    def call_soon(self, callback: Callable[[], object]) -> Any: ...


class StepDriver:
    def __init__(
        self,
        engine: Engine,
        on_events: Callable[[list[Event]], None],
        *,
        max_catchup_s: float,
        lag: Histogram,
        lost: Counter,
        loop: Timers | None = None,
    ) -> None:
        self.engine = engine
        self.on_events = on_events
        self.max_catchup_s = max_catchup_s
        self.lag = lag
        self.lost = lost
        self._step: Step | None = None
        self._deadline = 0.0
        self._kicked = False
        self._timer: Any = None
        self._loop: Timers | None = loop

    @property
    def loop(self) -> Timers:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    def kick(self) -> None:
        """New work or freed memory: start stepping if idle (coalesced)."""
        if self._step is None and not self._kicked:
            self._kicked = True
            self.loop.call_soon(self._idle_start)

    def _idle_start(self) -> None:
        self._kicked = False
        if self._step is None:
            self._run_next(self.loop.time())

    def _run_next(self, start: float) -> None:
        events = self.engine.admit(start)
        if events:
            self.on_events(events)
        step = self.engine.plan(start)
        self._step = step
        if step is None:
            return
        self._deadline = start + step.duration
        self._timer = self.loop.call_at(self._deadline, self._done)

    def _done(self) -> None:
        step = self._step
        assert step is not None
        t = self.loop.time()
        late = max(0.0, t - self._deadline)
        self.lag.observe(late)
        self._step = None
        events = self.engine.complete(step, t)
        if events:
            self.on_events(events)
        if late <= self.max_catchup_s:
            start = self._deadline
        else:
            self.lost.inc(late)
            start = t
        if self._step is None:  # on_events may not start a step, but be safe
            self._run_next(start)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._step = None
