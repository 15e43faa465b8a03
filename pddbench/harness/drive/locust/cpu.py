"""Client CPU saturation: process CPU time over wall intervals, and the verdict on a run.

A load generator whose process is busy all the time stamps late and sends late, so its
latencies describe itself rather than the server. :class:`CpuMeter` reads the process's
CPU time (user + system, all threads) against the monotonic clock; :func:`cpu_verdict`
(pure) says whether any interval reached the saturation threshold (fraction of one core:
a gevent or asyncio process uses one core at most).

Must not: decide what to do about saturation (the master marks the run suspect).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

SATURATION_THRESHOLD = 0.9


MIN_INTERVAL_S = 0.25  # shorter intervals say more about clock granularity than about load


class CpuMeter:
    """Fraction of one core this process used since the previous reading."""

    def __init__(self) -> None:
        self._cpu = time.process_time()
        self._wall = time.monotonic()
        self.total_cpu_s = 0.0
        self.total_wall_s = 0.0

    def read(self) -> float | None:
        """The fraction since the last reading (None when that was under MIN_INTERVAL_S)."""
        cpu, wall = time.process_time(), time.monotonic()
        d_cpu, d_wall = cpu - self._cpu, wall - self._wall
        self._cpu, self._wall = cpu, wall
        self.total_cpu_s += d_cpu
        self.total_wall_s += d_wall
        return d_cpu / d_wall if d_wall >= MIN_INTERVAL_S else None


@dataclass(frozen=True)
class CpuVerdict:
    intervals: int
    mean_fraction: float | None
    p95_fraction: float | None
    max_fraction: float | None
    saturated_intervals: int
    threshold: float

    @property
    def saturated(self) -> bool:
        return self.saturated_intervals > 0

    def as_dict(self) -> dict[str, object]:
        return {
            "intervals": self.intervals,
            "mean_fraction": self.mean_fraction,
            "p95_fraction": self.p95_fraction,
            "max_fraction": self.max_fraction,
            "saturated_intervals": self.saturated_intervals,
            "threshold": self.threshold,
            "saturated": self.saturated,
        }


def cpu_verdict(
    fractions: Sequence[float], *, threshold: float = SATURATION_THRESHOLD
) -> CpuVerdict:
    """Summary of per-interval CPU fractions; saturated when any interval ≥ ``threshold``."""
    a = np.asarray(fractions, dtype=np.float64)
    if a.size == 0:
        return CpuVerdict(0, None, None, None, 0, threshold)
    return CpuVerdict(
        intervals=int(a.size),
        mean_fraction=float(a.mean()),
        p95_fraction=float(np.percentile(a, 95)),
        max_fraction=float(a.max()),
        saturated_intervals=int((a >= threshold).sum()),
        threshold=threshold,
    )
