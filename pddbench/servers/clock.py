"""Clocks of a server process: one monotonic clock, one wall-clock anchor, event-loop lag.

Owns the time base every reported timestamp uses: ``time.monotonic()`` (CLOCK_MONOTONIC,
shared by all processes of one host, network namespaces included) plus one anchor taken at
process start — ``(host, mono, wall)`` — so a client can map a server timestamp ``t`` to wall
time as ``wall + (t - mono)`` and join it with its own clock. Also owns the process-wide
event-loop lag probe (how late a periodic timer fires), exported, never hidden.
"""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import asdict, dataclass

from pddbench.servers.metrics import Histogram

now = time.monotonic


@dataclass(frozen=True)
class ClockAnchor:
    host: str
    mono: float
    wall: float

    @classmethod
    def take(cls) -> ClockAnchor:
        # Bracket the wall reading with two monotonic readings and take their midpoint.
        m0 = time.monotonic()
        w = time.time()
        m1 = time.monotonic()
        return cls(socket.gethostname(), (m0 + m1) / 2, w)

    def to_json(self) -> dict[str, object]:
        return asdict(self)


class LoopLagMonitor:
    """Measures how late a ``interval_s`` timer fires on the running loop."""

    def __init__(self, interval_s: float = 0.02) -> None:
        self.interval_s = interval_s
        self.histogram = Histogram(
            "pdd_event_loop_lag_seconds", "How late a periodic timer fired on this process's loop"
        )
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._due = loop.time() + self.interval_s
        self._handle = loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        t = loop.time()
        self.histogram.observe(max(0.0, t - self._due))
        self._due = t + self.interval_s
        self._handle = loop.call_at(self._due, self._tick)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
