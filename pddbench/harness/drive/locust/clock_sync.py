"""Clock offsets between a Locust worker and the master, NTP style (pure).

The master sends a ping stamped with its monotonic (and wall) clock; the worker answers
with its own clock readings at receipt and reply; the master stamps the answer's
arrival. Each exchange is a :class:`ClockSample`; its offset estimate
``((t2 - t1) + (t3 - t4)) / 2`` (worker minus master) is wrong by at most half its
round trip, so the samples with the smallest round trip are the ones to trust.
:func:`estimate` keeps the minimum-RTT sample per window of consecutive samples and, when
the exchanges span long enough, fits a straight line through them (crystal drift, tens of
ppm between machines, is 100+ ms per hour).

:meth:`ClockEstimate.to_master` turns a worker monotonic reading into the master's
monotonic clock; every time in a worker's records goes through it before the journal.

Must not: read clocks or send messages (the master's coordinator does that).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ClockSample:
    """One ping-pong: t1/t4 on the master's monotonic clock, t2/t3 on the worker's."""

    master_send_s: float  # t1
    worker_recv_s: float  # t2
    worker_send_s: float  # t3
    master_recv_s: float  # t4
    master_send_wall: float = float("nan")
    worker_wall: float = float("nan")  # worker wall clock when it replied
    master_recv_wall: float = float("nan")

    @property
    def rtt_s(self) -> float:
        """Round trip minus the worker's own handling time."""
        return (self.master_recv_s - self.master_send_s) - (self.worker_send_s - self.worker_recv_s)

    @property
    def offset_s(self) -> float:
        """Worker monotonic minus master monotonic (error at most ``rtt_s / 2``)."""
        return (
            (self.worker_recv_s - self.master_send_s) + (self.worker_send_s - self.master_recv_s)
        ) / 2

    @property
    def wall_offset_s(self) -> float:
        """Worker wall clock minus master wall clock (assumes a symmetric path)."""
        return self.worker_wall - (self.master_send_wall + self.master_recv_wall) / 2

    @property
    def master_mid_s(self) -> float:
        return (self.master_send_s + self.master_recv_s) / 2


@dataclass(frozen=True)
class ClockEstimate:
    """A worker's clock relative to the master's: offset at a reference time plus drift."""

    offset_s: float  # worker − master at reference_master_s
    reference_master_s: float
    drift: float  # d(offset)/d(master time); 1e-6 = 1 ppm
    rtt_min_s: float
    uncertainty_s: float  # half the best round trip: bound on the best sample's error
    wall_offset_s: float
    samples: int

    def offset_at(self, master_s: float) -> float:
        return self.offset_s + self.drift * (master_s - self.reference_master_s)

    def to_master(self, worker_s: float) -> float:
        """A worker monotonic reading on the master's monotonic clock."""
        approx = worker_s - self.offset_s
        return worker_s - self.offset_at(approx)

    def as_dict(self) -> dict[str, float | int]:
        return {
            "offset_s": self.offset_s,
            "reference_master_s": self.reference_master_s,
            "drift_ppm": self.drift * 1e6,
            "rtt_min_s": self.rtt_min_s,
            "uncertainty_s": self.uncertainty_s,
            "wall_offset_s": self.wall_offset_s,
            "samples": self.samples,
        }


def estimate(
    samples: Sequence[ClockSample], *, window: int = 8, min_span_s: float = 30.0
) -> ClockEstimate:
    """The offset (and drift, when the samples span ``min_span_s``) of a worker's clock."""
    if not samples:
        raise ValueError("no clock samples")
    valid = [s for s in samples if s.rtt_s >= 0]
    if not valid:
        raise ValueError("no clock sample with a non-negative round trip")
    best = min(valid, key=lambda s: s.rtt_s)
    ordered = sorted(valid, key=lambda s: s.master_send_s)
    picks = [
        min(ordered[i : i + window], key=lambda s: s.rtt_s) for i in range(0, len(ordered), window)
    ]
    # a window whose best exchange was still slow (a busy worker, a queue) adds noise only
    picks = [p for p in picks if p.rtt_s <= 3 * best.rtt_s + 0.5e-3]
    offset, reference, drift = best.offset_s, best.master_mid_s, 0.0
    span = picks[-1].master_mid_s - picks[0].master_mid_s if picks else 0.0
    if len(picks) >= 3 and span >= min_span_s:
        x = np.array([p.master_mid_s for p in picks])
        y = np.array([p.offset_s for p in picks])
        reference = float(x.mean())
        slope, intercept = np.polyfit(x - reference, y, 1)
        offset, drift = float(intercept), float(slope)
    return ClockEstimate(
        offset_s=offset,
        reference_master_s=reference,
        drift=drift,
        rtt_min_s=best.rtt_s,
        uncertainty_s=best.rtt_s / 2,
        wall_offset_s=best.wall_offset_s,
        samples=len(samples),
    )
