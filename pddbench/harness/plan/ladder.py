"""SLA goodput at capacity: one shared load ladder, independent points, intervals, a verdict.

Sans-IO. The caller runs each point (:class:`PointWindow`: which slice of the trace to
replay, at which load) and hands back what it measured (:class:`PointMeasure`); this
module decides which point comes next, when to stop, which points count and what the
capacity is. No files, no clock, no servers: ``pddbench capacity`` and the nightly drive
the same :class:`LadderSearch`.

Method (DistServe's goodput: the highest load at which SLA attainment meets its target):

* **One ladder for every system**: loads ``start × growth^k`` for ``k < max_points``; the
  same settings give every system the same loads, so equal-load comparisons come free.
  Bounded in points, and in time (``max_points × (warmup_s + point_s)`` of sending).
* **Independent points**: point ``k`` replays the task groups that *start* in the trace
  window after point ``k − 1``'s (:func:`point_windows` walks on through the trace), so no
  point sends a session an earlier point sent and no cache is warmed by an earlier
  point's prompts beyond what different sessions share anyway (agent system prompts).
* **Warm-up**: requests intended to be sent in a point's first ``warmup_s`` are excluded
  from its figures; how many is recorded.
* **Intervals**: each point's attainment has a Wilson score interval; the capacity's
  interval runs from the goodput of the highest point that *surely* meets the target (its
  interval's lower end ≥ target; 0 if none) to the offered load of the lowest point that
  surely misses (its upper end < target; open if none).
* **Points the harness cannot stand behind** are recorded with a reason and excluded:
  schedule lag P99 above ``max_lag_s``, a server's scheduler lost time (the emulator fell
  behind), or link probes off on an emulated run. An excluded point ends the walk (a
  higher load would only be worse): the verdict is then load-bounded.
* **Censoring**: a point's requests are cut ``request_limit_s`` after they were sent, so
  one very long output cannot hold the walk for many minutes; a cut request whose own
  SLA bound lies beyond the limit could still have met it, so it is excluded from the
  point's figures and counted (``censored``), never scored as a miss.
* **Attainable SLA**: the search refuses an SLA the system misses at its lowest load,
  naming the criterion (TTFT, TPOT, E2E) that fell short.

Verdict basis: ``capacity`` (a valid point missed above one that met: the capacity is
the highest point that met), ``load-bounded`` (no valid point missed: the ladder or the
harness ran out first, so the figure is a lower bound and never a capacity), or
``refused`` (missed at the lowest load).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pddbench.harness.plan.sessions import Selection

Basis = Literal["capacity", "load-bounded", "refused"]
CRITERIA = ("ttft", "tpot", "e2e")


@dataclass(frozen=True)
class LadderSettings:
    """The shared load ladder and what makes a point count."""

    start: float = 1.0  # load scale of the first point (× the base arrival rate)
    growth: float = 1.5
    max_points: int = 6
    point_s: float = 60.0  # measured wall time per point (after the warm-up)
    warmup_s: float = 10.0  # excluded at the start of every point
    max_lag_p99_s: float = 0.5  # schedule-lag P99 above this: the harness fell behind
    confidence: float = 0.95  # of every interval
    request_limit_s: float = 60.0  # a point's requests are cut after this (see censoring)

    def __post_init__(self) -> None:
        if not (self.start > 0 and self.growth > 1 and self.max_points >= 1):
            raise ValueError("ladder: need start > 0, growth > 1 and max_points >= 1")
        if not (self.point_s > 0 and self.warmup_s >= 0 and self.max_lag_p99_s > 0):
            raise ValueError("ladder: need point_s > 0, warmup_s >= 0, max_lag_p99_s > 0")
        if self.request_limit_s <= 0:
            raise ValueError("ladder: need request_limit_s > 0")
        if not 0 < self.confidence < 1:
            raise ValueError("ladder: confidence must be in (0, 1)")

    def loads(self) -> list[float]:
        return [self.start * self.growth**k for k in range(self.max_points)]

    @property
    def send_s(self) -> float:
        """Wall time one point sends for (warm-up included)."""
        return self.warmup_s + self.point_s

    @property
    def budget_s(self) -> float:
        """Upper bound on the sending time of a whole search (every point run)."""
        return self.max_points * self.send_s


# The one default ladder (``pddbench capacity`` and the main job): x4 ... x26 of the base
# arrival rate (for jan-feb: the busiest hour at x10, ~0.5 req/s per unit of load), 5 points
# of 70 s sending + at most 45 s draining; ~10 min a system; ~1,900 measured requests per
# system when the walk goes through.
DEFAULT_LADDER = LadderSettings(
    start=4.0, growth=1.6, max_points=5, point_s=60.0, warmup_s=10.0, request_limit_s=45.0
)
# ``--quick``: 4 points of 35 s + 30 s; fewer requests, wider intervals (reported either way)
QUICK_LADDER = LadderSettings(
    start=4.0, growth=2.0, max_points=4, point_s=30.0, warmup_s=5.0, request_limit_s=30.0
)


@dataclass(frozen=True)
class PointWindow:
    """One point: its load and the slice of the trace (session starts) it replays."""

    index: int
    load: float
    trace_start_s: float
    trace_duration_s: float

    @property
    def trace_end_s(self) -> float:
        return self.trace_start_s + self.trace_duration_s


def point_windows(
    settings: LadderSettings, origin_s: float, base_speedup: float
) -> list[PointWindow]:
    """The ladder's points as consecutive, disjoint trace windows starting at ``origin_s``.

    At load ``x`` a point sends for ``send_s`` wall seconds with arrivals compressed by
    ``base_speedup × x``, so it spans ``send_s × base_speedup × x`` seconds of session
    starts; the next point starts where it ended."""
    if base_speedup <= 0:
        raise ValueError("base speedup must be > 0")
    out: list[PointWindow] = []
    cursor = origin_s
    for k, load in enumerate(settings.loads()):
        span = settings.send_s * base_speedup * load
        out.append(PointWindow(k, load, cursor, span))
        cursor += span
    return out


def _z(confidence: float) -> float:
    """Two-sided standard-normal quantile for ``confidence``."""
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; (0, 1) when ``n`` is 0."""
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError("need 0 <= successes <= n")
    z = _z(confidence)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class PointHealth:
    """What says whether the harness can stand behind a point."""

    schedule_lag_p99_s: float | None = None
    scheduler_lost_s: float = 0.0  # servers' modelled time lost beyond the catch-up tolerance
    emulated: bool = True
    probes_on: bool = True

    def exclusion(self, settings: LadderSettings) -> str | None:
        """Why the point must not count (``None``: it counts)."""
        lag = self.schedule_lag_p99_s
        if lag is not None and lag > settings.max_lag_p99_s:
            return (
                f"schedule lag P99 {lag:.3g} s > {settings.max_lag_p99_s:g} s: the load "
                "generator could not keep its schedule"
            )
        if self.scheduler_lost_s > 0:
            return (
                f"the servers' schedulers lost {self.scheduler_lost_s:.3g} s: the emulator "
                "fell behind"
            )
        if self.emulated and not self.probes_on:
            return "link probes were off: the emulated WAN is unchecked"
        return None


@dataclass(frozen=True)
class PointMeasure:
    """What one point measured, warm-up excluded."""

    window: PointWindow
    requests: int  # measured (after the warm-up)
    met: int  # of those, meeting the whole SLA
    met_by: dict[str, int]  # per criterion ("ttft", "tpot", "e2e"): requests meeting it
    warmup_excluded: int
    measured_s: float  # wall time the measured requests span
    offered_rps: float
    health: PointHealth = field(default_factory=PointHealth)
    censored: int = 0  # cut at the request limit before their SLA bound: excluded

    @property
    def attainment(self) -> float:
        return self.met / self.requests if self.requests else 0.0

    @property
    def goodput_rps(self) -> float:
        return self.met / self.measured_s if self.measured_s > 0 else 0.0


class LadderPoint(BaseModel):
    """The file form of one point (``capacity.json`` ``points``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    load_scale: float
    trace_start_s: float
    trace_duration_s: float
    requests: int
    met: int
    met_by: dict[str, int]
    warmup_excluded: int
    censored: int = 0
    attainment: float
    attainment_low: float
    attainment_high: float
    goodput: float
    offered_rps: float
    schedule_lag_p99_s: float | None = None
    excluded: str | None = None  # why the point does not count


class LadderVerdict(BaseModel):
    """The file form of a search: settings, every point, the capacity and its basis."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str
    target_pct: float = Field(gt=0, le=100)
    confidence: float
    warmup_s: float
    point_s: float
    max_lag_p99_s: float
    loads: list[float]
    points: list[LadderPoint]
    basis: Basis
    reason: str
    capacity_load_scale: float | None = None
    capacity_goodput: float | None = None  # req/s meeting the SLA at the capacity point
    capacity_low: float | None = None  # req/s; 0 when no point surely met
    capacity_high: float | None = None  # req/s; None when no point surely missed
    measured_requests: int = 0

    def describe(self) -> str:
        if self.basis == "refused":
            return f"{self.system}: refused: {self.reason}"
        if self.capacity_goodput is None:
            return f"{self.system}: {self.basis}: {self.reason}"
        if self.basis != "capacity":
            return (
                f"{self.system}: load-bounded (not a capacity) goodput "
                f"{self.capacity_goodput:.3g} req/s at x{self.capacity_load_scale:g}; {self.reason}"
            )
        high = "open" if self.capacity_high is None else f"{self.capacity_high:.3g}"
        return (
            f"{self.system}: capacity goodput {self.capacity_goodput:.3g} req/s at x"
            f"{self.capacity_load_scale:g} [{self.capacity_low or 0:.3g}, {high}] "
            f"({self.confidence:.0%}); {self.reason}"
        )


class LadderSearch:
    """Walks the ladder for one system: ``next_window()`` → run it → ``record()``."""

    def __init__(
        self, settings: LadderSettings, *, target_pct: float, origin_s: float, base_speedup: float
    ) -> None:
        if not 0 < target_pct <= 100:
            raise ValueError("target_pct must be in (0, 100]")
        self.settings = settings
        self.target = target_pct / 100.0
        self.windows = point_windows(settings, origin_s, base_speedup)
        self.measures: list[PointMeasure] = []
        self._stop: tuple[Basis, str] | None = None

    # -- walking -------------------------------------------------------------------------
    def next_window(self) -> PointWindow | None:
        if self._stop is not None or len(self.measures) >= len(self.windows):
            return None
        return self.windows[len(self.measures)]

    def record(self, m: PointMeasure) -> None:
        self.measures.append(m)
        excluded = m.health.exclusion(self.settings)
        valid = [p for p in self.measures if p.health.exclusion(self.settings) is None]
        if excluded is not None:
            self._stop = ("load-bounded", f"point x{m.window.load:g} excluded: {excluded}")
            return
        if m.requests == 0:
            self._stop = ("load-bounded", f"point x{m.window.load:g} measured no request")
            return
        if m.attainment >= self.target:
            return
        if len(valid) == 1:  # the lowest load already misses
            short = [
                f"{c.upper()} {m.met_by.get(c, 0) / m.requests:.1%}"
                for c in CRITERIA
                if m.met_by.get(c, m.requests) / m.requests < self.target
            ]
            which = ", ".join(short) or f"all criteria together {m.attainment:.1%}"
            self._stop = (
                "refused",
                f"the SLA is missed at the lowest load x{m.window.load:g} ({which} < "
                f"{self.target:.0%} target): not attainable for this system; loosen that "
                "criterion or make it scale with the work asked",
            )
            return
        self._stop = ("capacity", f"missed the target at x{m.window.load:g}")

    @property
    def done(self) -> bool:
        return self.next_window() is None

    # -- progress --------------------------------------------------------------------------
    def progress(self, elapsed_s: float) -> str:
        """``"point 3/6 (x2.25): 2 done in 2m10s, ETA <= 4m20s"`` (ETA: the rest at the
        mean time per point so far, or the settings' send time before any point)."""
        done = len(self.measures)
        total = len(self.windows)
        per = elapsed_s / done if done else self.settings.send_s
        eta = (total - done) * per
        nxt = self.next_window()
        now = f"point {done + 1}/{total} (x{nxt.load:g})" if nxt else f"{done}/{total} done"
        return f"{now}: {done} done in {_mmss(elapsed_s)}, ETA <= {_mmss(eta)}"

    # -- result ----------------------------------------------------------------------------
    def verdict(self, system: str) -> LadderVerdict:
        s = self.settings
        points = [self._point(m) for m in self.measures]
        basis, reason = self._stop or ("load-bounded", "met the target at every ladder point")
        valid = [m for m in self.measures if m.health.exclusion(s) is None and m.requests]
        meeting = [m for m in valid if m.attainment >= self.target]
        cap = meeting[-1] if meeting and basis != "refused" else None
        surely_met = [m for m in valid if wilson(m.met, m.requests, s.confidence)[0] >= self.target]
        surely_missed = [
            m for m in valid if wilson(m.met, m.requests, s.confidence)[1] < self.target
        ]
        return LadderVerdict(
            system=system,
            target_pct=self.target * 100,
            confidence=s.confidence,
            warmup_s=s.warmup_s,
            point_s=s.point_s,
            max_lag_p99_s=s.max_lag_p99_s,
            loads=[w.load for w in self.windows],
            points=points,
            basis=basis,
            reason=reason,
            capacity_load_scale=cap.window.load if cap else None,
            capacity_goodput=cap.goodput_rps if cap else None,
            capacity_low=(surely_met[-1].goodput_rps if surely_met else 0.0) if cap else None,
            capacity_high=surely_missed[0].offered_rps if cap and surely_missed else None,
            measured_requests=sum(m.requests for m in valid),
        )

    def _point(self, m: PointMeasure) -> LadderPoint:
        lo, hi = wilson(m.met, m.requests, self.settings.confidence)
        return LadderPoint(
            index=m.window.index,
            load_scale=m.window.load,
            trace_start_s=m.window.trace_start_s,
            trace_duration_s=m.window.trace_duration_s,
            requests=m.requests,
            met=m.met,
            met_by=m.met_by,
            warmup_excluded=m.warmup_excluded,
            censored=m.censored,
            attainment=m.attainment,
            attainment_low=lo,
            attainment_high=hi,
            goodput=m.goodput_rps,
            offered_rps=m.offered_rps,
            schedule_lag_p99_s=m.health.schedule_lag_p99_s,
            excluded=m.health.exclusion(self.settings),
        )


def _mmss(seconds: float) -> str:
    seconds = max(0.0, seconds)
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def window_selection(selection: Selection, window: PointWindow, base_speedup: float) -> Selection:
    """The base selection narrowed to one point's trace window at its load (same sample,
    seed and request cap; arrivals compressed ``base_speedup × load``)."""
    return dataclasses.replace(
        selection,
        window_start_s=window.trace_start_s,
        window_duration_s=window.trace_duration_s,
        speedup=base_speedup * window.load,
    )
