"""SLA goodput at capacity: one shared load ladder, independent points, intervals, a verdict.

Sans-IO. The caller runs each point (:class:`PointWindow`: which slice of the trace to
replay, at which load) and hands back what it measured (:class:`PointMeasure`); this
module decides which point comes next, when to stop, which points count and what the
capacity is. No files, no clock, no servers: ``pddbench capacity`` and the nightly drive
the same :class:`LadderSearch`.

Method (DistServe's goodput: the highest load at which SLA attainment meets its target):

* **One ladder for every system**: loads ``start × growth^k`` for ``k < max_points``; the
  same settings give every system the same ladder loads, so equal-load comparisons come
  free. After the first valid miss the search **bisects** (geometric midpoint of the
  highest load that met and the lowest that missed) ``bisect_points`` times.
* **Powered points**: a point measures until the trace's planned schedule has offered
  ``min_requests`` after its warm-up (:func:`powered_measure_s`), at least ``point_s`` and
  at most ``max_point_s``: sized from the trace, not from what a system measured, so every
  system gets the same windows on the ladder. 381 requests with no miss put the Wilson
  lower end at 99 % (95 % confidence), so the default asks for 400.
* **Bounded in points and time**: at most ``max_points + bisect_points`` points, and no
  point starts that the ``time_budget_s`` left cannot hold with its warm-up, worst-case
  draining (``request_limit_s``) and reading (a point may be shortened to fit, never below
  ``point_s``); each point's real wall time is what is spent.
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
  behind), or link probes off on an emulated run. An excluded point ends the climb (a
  higher load would only be worse): the verdict is then load-bounded; an excluded
  bisection point only ends the narrowing (the bracket found stands).
* **Censoring**: a point's requests are cut ``request_limit_s`` after they were sent, so
  one very long output cannot hold the walk for many minutes; a cut request whose own
  SLA bound lies beyond the limit could still have met it, so it is excluded from the
  point's figures and counted (``censored``), never scored as a miss.
* **Attainable SLA**: when the first rung already misses, the search steps down
  (``start / growth^j``, at most ``descend_points`` times, each on a fresh stretch) so a
  system slower than the ladder's start still gets a capacity; it refuses an SLA the system
  misses at the lowest load it tried, naming the criterion (TTFT, TPOT, E2E) that fell short.

Goodput at capacity is the most SLA goodput any point that met the target achieved: the
walk moves through the trace, whose own rate varies, so a higher load scale need not
offer more requests per second (each point records its offered rate).

Verdict basis: ``capacity`` (a valid point missed above one that met: the capacity is
the highest point that met below the lowest that missed), ``load-bounded`` (no valid
point missed: the ladder, the time budget or the harness ran out first, so the figure is
a lower bound and never a capacity), or ``refused`` (missed at the lowest load).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from pddbench.harness.plan.ladder_points import (
    LadderSettings,
    PointWindow,
    Schedule,
    _window,
    powered_measure_s,
)
from pddbench.harness.plan.sessions import Selection

Basis = Literal["capacity", "load-bounded", "refused"]
CRITERIA = ("ttft", "tpot", "e2e")


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
    wall_s: float | None = None  # sending + draining, as run (None: the budget's reserve)

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
    measure_s: float | None = None  # measured wall time (after the warm-up)
    bisect: bool = False  # a bisection point (between the highest met and lowest missed)
    wall_s: float | None = None  # sending + draining
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
    loads: list[float]  # the ladder's (bisection points carry their own load)
    min_requests: int = 0  # the power rule: see LadderSettings
    max_point_s: float | None = None
    bisect_points: int = 0
    descend_points: int = 0
    time_budget_s: float | None = None
    spent_s: float = 0.0  # wall time the points took (sending + draining)
    points: list[LadderPoint]
    basis: Basis
    reason: str
    capacity_load_scale: float | None = None
    # req/s meeting the SLA: the most any point that met the target achieved (the trace's
    # own rate varies along the walk, so a higher load scale need not offer more)
    capacity_goodput: float | None = None
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


# settings recorded in verdicts
_RECORDED = ("min_requests", "max_point_s", "bisect_points", "descend_points", "time_budget_s")


class LadderSearch:
    """Walks the ladder for one system: ``next_window()`` → run it → ``record()``.

    Climbs ``start × growth^k`` until a valid point misses the target, then bisects
    (geometric midpoint) between the highest load that met and the lowest that missed,
    ``bisect_points`` times. When the first rung already misses it steps down
    (``start / growth^j``, ``descend_points`` times) until a point meets, then bisects
    as above; it refuses only when the lowest of those misses too. Every point, bisection
    and step-down ones too, replays the next stretch of the trace. With a ``schedule``
    each point is powered (:func:`powered_measure_s`); without, it measures ``point_s``.
    No point starts that the time budget cannot hold."""

    def __init__(
        self,
        settings: LadderSettings,
        *,
        target_pct: float,
        origin_s: float,
        base_speedup: float,
        schedule: Schedule | None = None,
    ) -> None:
        if not 0 < target_pct <= 100:
            raise ValueError("target_pct must be in (0, 100]")
        if base_speedup <= 0:
            raise ValueError("base speedup must be > 0")
        self.settings = settings
        self.target = target_pct / 100.0
        self.base_speedup = base_speedup
        self.schedule = schedule
        self.measures: list[PointMeasure] = []
        self.spent_s = 0.0
        self._cursor = origin_s
        self._met: float | None = None  # highest load that met (below every miss)
        self._missed: float | None = None  # lowest load that missed
        self._pending: PointWindow | None = None
        self._stop: tuple[Basis, str] | None = None

    # -- walking -------------------------------------------------------------------------
    def _next_load(self) -> tuple[float, bool] | None:
        s = self.settings
        if self._missed is None:
            k = len(self.measures)
            if k >= s.max_points:
                self._stop = ("load-bounded", "met the target at every ladder point")
                return None
            return s.start * s.growth**k, False
        if self._met is None:  # every point so far missed: step down (record() refuses)
            return self._missed / s.growth, False
        done = sum(1 for m in self.measures if m.window.bisect)
        if done >= s.bisect_points or self._met is None:
            self._stop = ("capacity", self._capacity_reason())
            return None
        return math.sqrt(self._met * self._missed), True

    def _capacity_reason(self, extra: str = "") -> str:
        n = sum(1 for m in self.measures if m.window.bisect)
        return (
            f"met the target at x{self._met:g}, missed at x{self._missed:g}"
            + (f" ({n} bisection point{'s' * (n != 1)})" if self.settings.bisect_points else "")
            + extra
        )

    def next_window(self) -> PointWindow | None:
        if self._stop is not None:
            return None
        if self._pending is not None:
            return self._pending
        nxt = self._next_load()
        if nxt is None:
            return None
        load, bisect = nxt
        s = self.settings
        measure = s.point_s
        if self.schedule is not None and s.min_requests > 0:
            offsets = self.schedule(self._cursor, load, s.send_s)
            measure = powered_measure_s(s, offsets)
        if s.time_budget_s is not None:
            left = s.time_budget_s - self.spent_s
            measure = min(measure, math.floor(left - s.point_cost_s(0.0)))
            if measure < s.point_s:
                self._stop_on_budget(load)
                return None
        self._pending = _window(
            s, len(self.measures), load, self._cursor, self.base_speedup, measure, bisect
        )
        return self._pending

    def _stop_on_budget(self, load: float) -> None:
        why = f"; the time budget ({self.settings.time_budget_s:g} s) held no point at x{load:g}"
        if self._missed is not None:
            self._stop = ("capacity", self._capacity_reason(why))
        else:
            self._stop = (
                "load-bounded",
                f"no point missed before the time budget ({self.settings.time_budget_s:g} s) "
                f"ran out at x{load:g}",
            )

    def record(self, m: PointMeasure) -> None:
        s = self.settings
        self.measures.append(m)
        self._pending = None
        self._cursor = max(self._cursor, m.window.trace_end_s)
        self.spent_s += m.wall_s if m.wall_s is not None else s.point_cost_s(m.window.measure_s)
        excluded = m.health.exclusion(s)
        load = m.window.load
        if excluded is not None or m.requests == 0:
            why = excluded or "measured no request"
            if self._missed is not None and self._met is None:  # stepping down
                self._stop = (
                    "refused",
                    f"the SLA is missed at x{self._missed:g} and the step down to x{load:g} "
                    f"was excluded: {why}",
                )
            elif self._missed is not None:  # bisecting: the capacity stands, narrowing stops
                self._stop = ("capacity", self._capacity_reason(f"; x{load:g} excluded: {why}"))
            else:
                self._stop = ("load-bounded", f"point x{load:g} excluded: {why}")
            return
        if m.attainment >= self.target:
            self._met = load if self._met is None else max(self._met, load)
            return
        descended = sum(1 for x in self.measures if x.window.load < s.start)
        if self._met is None and (self._missed is None or descended >= s.descend_points):
            if descended < s.descend_points:  # the first rung misses: step down next
                self._missed = load
                return
            # the lowest load tried misses too
            short = [
                f"{c.upper()} {m.met_by.get(c, 0) / m.requests:.1%}"
                for c in CRITERIA
                if m.met_by.get(c, m.requests) / m.requests < self.target
            ]
            which = ", ".join(short) or f"all criteria together {m.attainment:.1%}"
            self._stop = (
                "refused",
                f"the SLA is missed at the lowest load x{load:g} ({which} < "
                f"{self.target:.0%} target): not attainable for this system; loosen that "
                "criterion or make it scale with the work asked",
            )
            return
        self._missed = load if self._missed is None else min(self._missed, load)

    @property
    def done(self) -> bool:
        return self.next_window() is None

    # -- progress --------------------------------------------------------------------------
    def points_left(self) -> int:
        """At most how many more points the search runs (the pending one included)."""
        if self._stop is not None:
            return 0
        s = self.settings
        bisected = sum(1 for m in self.measures if m.window.bisect)
        if self._missed is None:
            return s.max_points - len(self.measures) + s.bisect_points
        if self._met is None:
            descended = sum(1 for m in self.measures if m.window.load < s.start)
            return s.descend_points - descended + s.bisect_points
        return s.bisect_points - bisected

    def eta_s(self, elapsed_s: float) -> float:
        """Upper bound on the time left: the points left at the mean wall time per point so
        far (the budget's reserve per point before any), never beyond the budget left."""
        s = self.settings
        done = len(self.measures)
        per = elapsed_s / done if done else s.point_cost_s(s.longest_point_s)
        eta = self.points_left() * per
        if s.time_budget_s is not None:
            eta = min(eta, max(0.0, s.time_budget_s - self.spent_s))
        return eta

    def progress(self, elapsed_s: float) -> str:
        """``"point 3/<=6 (x16): 2 done in 4m10s, ETA <= 5m20s"``."""
        done = len(self.measures)
        total = done + self.points_left()
        nxt = self.next_window()
        if nxt is None:
            now = f"{done}/{done} done"
        else:
            kind = ", bisecting" if nxt.bisect else ""
            now = f"point {done + 1}/<={total} (x{nxt.load:.3g}{kind}, {nxt.send_s:g} s)"
        return f"{now}: {done} done in {_mmss(elapsed_s)}, ETA <= {_mmss(self.eta_s(elapsed_s))}"

    # -- result ----------------------------------------------------------------------------
    def verdict(self, system: str) -> LadderVerdict:
        s = self.settings
        points = [self._point(m) for m in self.measures]
        self.next_window()  # settles the stop reason when the walk ran out
        basis, reason = self._stop or ("load-bounded", "the walk was cut short")
        valid = [m for m in self.measures if m.health.exclusion(s) is None and m.requests]
        missed = [m.window.load for m in valid if m.attainment < self.target]
        ceiling = min(missed) if missed else math.inf
        meeting = [m for m in valid if m.attainment >= self.target and m.window.load < ceiling]
        cap = max(meeting, key=lambda m: m.window.load) if meeting and basis != "refused" else None

        def bounds(m: PointMeasure) -> tuple[float, float]:
            return wilson(m.met, m.requests, s.confidence)

        surely_met = [m for m in meeting if bounds(m)[0] >= self.target]
        surely_missed = [m for m in valid if bounds(m)[1] < self.target]
        low = max(surely_met, key=lambda m: m.window.load) if surely_met else None
        high = min(surely_missed, key=lambda m: m.window.load) if surely_missed else None
        return LadderVerdict(
            system=system,
            target_pct=self.target * 100,
            confidence=s.confidence,
            warmup_s=s.warmup_s,
            point_s=s.point_s,
            max_lag_p99_s=s.max_lag_p99_s,
            loads=s.loads(),
            **{k: getattr(s, k) for k in _RECORDED},
            spent_s=self.spent_s,
            points=points,
            basis=basis,
            reason=reason,
            capacity_load_scale=cap.window.load if cap else None,
            capacity_goodput=max(m.goodput_rps for m in meeting) if cap else None,
            capacity_low=(low.goodput_rps if low else 0.0) if cap else None,
            capacity_high=high.offered_rps if cap and high else None,
            measured_requests=sum(m.requests for m in valid),
        )

    def _point(self, m: PointMeasure) -> LadderPoint:
        lo, hi = wilson(m.met, m.requests, self.settings.confidence)
        return LadderPoint(
            index=m.window.index,
            load_scale=m.window.load,
            trace_start_s=m.window.trace_start_s,
            trace_duration_s=m.window.trace_duration_s,
            measure_s=m.window.measure_s,
            bisect=m.window.bisect,
            wall_s=m.wall_s,
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
