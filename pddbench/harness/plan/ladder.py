"""SLA goodput at capacity: one shared load ladder, independent points, intervals, a verdict.

Sans-IO. The caller runs each point (:class:`PointWindow`: which slice of the trace to
replay, at which load scale, aimed at which rate) and hands back what it measured
(:class:`PointMeasure`); this module decides which point comes next, when to stop, which
points count and what the capacity is. No files, no clock, no servers: ``pddbench
capacity`` and the nightly drive the same :class:`LadderSearch`.

Method (DistServe's goodput: the highest load at which SLA attainment meets its target):

* **One ladder for every system, of offered rates**: the rungs are request rates
  ``r0 × growth^k`` (``k < max_points``), ``r0`` being what the load scale ``start``
  offers at the walk's origin by the trace's planned schedule; each point's load scale is
  searched so that its planned offered rate (requests intended after the warm-up ÷ its
  measured time) is the rung's (:mod:`~pddbench.harness.plan.ladder_rate`): the walk moves
  on through a trace whose own rate declines and rises, so a doubled load scale may offer
  little more, a doubled rate target always asks for about twice the load. Planned from
  the trace, the rungs and their load scales are the same for every system (equal-rate
  comparisons come free). After the first valid miss the search **bisects** (geometric
  midpoint of the highest rate that met and the lowest that missed) ``bisect_points``
  times. Without a schedule the rungs are load scales ``start × growth^k``.
* **Powered points**: a point measures until the trace's planned schedule has offered
  ``min_requests`` after its warm-up (:func:`powered_measure_s`), at least ``point_s`` and
  at most ``max_point_s``: sized from the trace, not from what a system measured, so every
  system gets the same windows on the ladder. 381 requests with no miss put the Wilson
  lower end at 99 % (95 % confidence), so the default asks for 400.
* **Bounded in points and time**: at most ``max_points + bisect_points`` points, and no
  point starts that the ``time_budget_s`` left cannot hold with its warm-up, worst-case
  draining (``request_limit_s``) and reading (a point may be shortened to fit, never below
  ``point_s``); each point's real wall time is what is spent.
* **Independent points**: point ``k`` replays the trace window after point ``k − 1``'s
  (:func:`point_windows` walks on through the trace). A steady-state point
  (:mod:`~pddbench.harness.plan.steady`, the default) replays every request of its window,
  sessions in progress continuing, its caches primed from the trace's history in its own
  prompt namespaces, never from an earlier point's prompts; a cold one
  (``LadderSettings.steady = False``) the task groups that *start* in its window.
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
  (its rate ÷ ``growth^j``, at most ``descend_points`` times, each on a fresh stretch) so a
  system slower than the ladder's start still gets a capacity; it refuses an SLA the system
  misses at the lowest load it tried, naming the criterion (TTFT, TPOT, E2E) that fell short.

Goodput at capacity is the most SLA goodput any point that met the target achieved (a
closed loop offers what the system lets it: the measured offered rate can differ from
the planned one; each point records both, and its load scale).

Verdict basis: ``capacity`` (a valid point missed above one that met: the capacity is
the highest point that met below the lowest that missed), ``load-bounded`` (no valid
point missed: the ladder, the time budget or the harness ran out first, so the figure is
a lower bound and never a capacity), or ``refused`` (missed at the lowest load).
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist

from pddbench.harness.config.replay import Selection
from pddbench.harness.plan.ladder_points import (  # PointHealth, PointMeasure: re-exported
    LadderSettings,
    PointHealth,
    PointMeasure,
    PointWindow,
    Schedule,
    _window,
)
from pddbench.harness.plan.ladder_rate import PointPlan, plan_point, scale_for_rate
from pddbench.harness.rundir.ladder import (
    RECORDED,
    Basis,
    LadderPoint,
    LadderVerdict,
)

CRITERIA = ("ttft", "tpot", "e2e")
__all__ = ["LadderSearch", "PointHealth", "PointMeasure", "wilson", "window_selection"]


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


class LadderSearch:
    """Walks the ladder for one system: ``next_window()`` → run it → ``record()``.

    Climbs the rungs until a valid point misses the target, then bisects (geometric
    midpoint) between the highest rung that met and the lowest that missed,
    ``bisect_points`` times. When the first rung already misses it steps down (÷ growth,
    ``descend_points`` times) until a point meets, then bisects as above; it refuses only
    when the lowest of those misses too. Every point, bisection and step-down ones too,
    replays the next stretch of the trace. With a ``schedule`` the rungs are **offered
    rates** (the first: what ``start`` offers at the origin, then × growth; each point's
    load scale is searched for its rate, :func:`scale_for_rate`) and every point is powered
    (:func:`powered_measure_s`); without, the rungs are load scales ``start × growth^k`` and
    a point measures ``point_s``. No point starts that the time budget cannot hold."""

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
        self._met: PointWindow | None = None  # the highest rung that met (below every miss)
        self._missed: PointWindow | None = None  # the lowest rung that missed
        self._descended = 0
        self._pending: PointWindow | None = None
        self._stop: tuple[Basis, str] | None = None
        # rate rungs: what ``start`` offers at the origin (none planned there: load rungs)
        self.origin_rps: float | None = None
        if schedule is not None:
            first = plan_point(settings, schedule, origin_s, settings.start)
            self.origin_rps = first.planned_rps if first.planned_requests else None

    @property
    def rate_rungs(self) -> bool:
        return self.origin_rps is not None

    def level(self, w: PointWindow) -> float:
        """What orders the points: the planned offered rate (rate rungs), else the load."""
        return w.planned_rps if self.rate_rungs and w.planned_rps is not None else w.load

    def _label(self, w: PointWindow) -> str:
        if self.rate_rungs and w.planned_rps is not None:
            return f"{w.planned_rps:.3g} req/s (x{w.load:.3g})"
        return f"x{w.load:.3g}"

    def _rung(self, level: float) -> str:
        return f"{level:.3g} req/s" if self.rate_rungs else f"x{level:.3g}"

    # -- walking -------------------------------------------------------------------------
    def _next(self) -> tuple[float, str] | None:
        """The next rung's level and kind (``climb``, ``descend``, ``bisect``), or None."""
        s = self.settings
        if self._missed is None:
            k = len(self.measures)
            if k >= s.max_points:
                self._stop = ("load-bounded", "met the target at every ladder point")
                return None
            return (self.origin_rps or s.start) * s.growth**k, "climb"
        if self._met is None:  # every point so far missed: step down (record() refuses)
            return self.level(self._missed) / s.growth, "descend"
        done = sum(1 for m in self.measures if m.window.bisect)
        if done >= s.bisect_points:
            self._stop = ("capacity", self._capacity_reason())
            return None
        return math.sqrt(self.level(self._met) * self.level(self._missed)), "bisect"

    def _meets(self, m: PointMeasure) -> bool:
        """The point met the target on a load it sustained."""
        return m.attainment >= self.target and m.sustained

    def _capacity_reason(self, extra: str = "") -> str:
        assert self._met is not None and self._missed is not None
        n = sum(1 for m in self.measures if m.window.bisect)
        missed = next((m for m in self.measures if m.window is self._missed), None)
        how = "" if missed is None or missed.sustained else " (not sustained: a backlog)"
        return (
            f"met the target at {self._label(self._met)}, missed at "
            f"{self._label(self._missed)}{how}"
            + (f" ({n} bisection point{'s' * (n != 1)})" if self.settings.bisect_points else "")
            + extra
        )

    def _plan(self, level: float, cap_s: float | None) -> PointPlan | None:
        """What the schedule plans for the next point (None: no schedule)."""
        s, sched = self.settings, self.schedule
        if sched is None:
            return None
        if not self.rate_rungs or not self.measures:  # load rungs, or the first rate rung
            target = self.origin_rps if self.rate_rungs else None
            load = s.start if self.rate_rungs else level
            plan = plan_point(s, sched, self._cursor, load, cap_s)
            return dataclasses.replace(plan, target_rps=target)
        last = self.measures[-1].window
        guess = last.load * level / last.planned_rps if last.planned_rps else last.load
        return scale_for_rate(s, sched, self._cursor, level, guess, measure_cap_s=cap_s)

    def next_window(self) -> PointWindow | None:
        if self._stop is not None:
            return None
        if self._pending is not None:
            return self._pending
        nxt = self._next()
        if nxt is None:
            return None
        level, kind = nxt
        s = self.settings
        cap_s = None
        if s.time_budget_s is not None:
            cap_s = math.floor(s.time_budget_s - self.spent_s - s.point_cost_s(0.0))
            if cap_s < s.point_s:
                self._stop_on_budget(level)
                return None
        plan = self._plan(level, cap_s)
        load = level if plan is None else plan.load
        measure = min(s.point_s, cap_s or math.inf) if plan is None else plan.measure_s
        w = _window(s, len(self.measures), load, self._cursor, self.base_speedup, measure)
        self._pending = dataclasses.replace(
            w,
            bisect=kind == "bisect",
            descend=kind == "descend",
            target_rps=None if plan is None else plan.target_rps,
            planned_rps=plan.planned_rps if plan is not None and self.rate_rungs else None,
            planned_requests=None if plan is None else plan.planned_requests,
        )
        return self._pending

    def _stop_on_budget(self, level: float) -> None:
        why = (
            f"; the time budget ({self.settings.time_budget_s:g} s) held no point at "
            f"{self._rung(level)}"
        )
        if self._missed is not None:
            self._stop = ("capacity", self._capacity_reason(why))
        else:
            self._stop = (
                "load-bounded",
                f"no point missed before the time budget ({self.settings.time_budget_s:g} s) "
                f"ran out at {self._rung(level)}",
            )

    def record(self, m: PointMeasure) -> None:
        s = self.settings
        self.measures.append(m)
        self._pending = None
        self._cursor = max(self._cursor, m.window.trace_end_s)
        self.spent_s += m.wall_s if m.wall_s is not None else s.point_cost_s(m.window.measure_s)
        self._descended += m.window.descend
        excluded = m.health.exclusion(s)
        w = m.window
        if excluded is not None or m.requests == 0:
            why = excluded or "measured no request"
            if self._missed is not None and self._met is None:  # stepping down
                self._stop = (
                    "refused",
                    f"the SLA is missed at {self._label(self._missed)} and the step down to "
                    f"{self._label(w)} was excluded: {why}",
                )
            elif self._missed is not None:  # bisecting: the capacity stands, narrowing stops
                self._stop = (
                    "capacity",
                    self._capacity_reason(f"; {self._label(w)} excluded: {why}"),
                )
            else:
                self._stop = ("load-bounded", f"point {self._label(w)} excluded: {why}")
            return
        if self._meets(m):
            if self._met is None or self.level(w) > self.level(self._met):
                self._met = w
            return
        if self._met is None and (self._missed is None or self._descended >= s.descend_points):
            if self._descended < s.descend_points:  # the first rung misses: step down next
                self._missed = w
                return
            # the lowest load tried misses too
            short = [
                f"{c.upper()} {m.met_by.get(c, 0) / m.requests:.1%}"
                for c in CRITERIA
                if m.met_by.get(c, m.requests) / m.requests < self.target
            ]
            if m.attainment >= self.target:  # met, but on growing queues
                self._stop = (
                    "refused",
                    f"the lowest load {self._label(w)} was not sustained: the servers were "
                    f"{m.backlog}; this system's capacity lies below the ladder's lowest "
                    "point (start the walk lower)",
                )
                return
            which = ", ".join(short) or f"all criteria together {m.attainment:.1%}"
            self._stop = (
                "refused",
                f"the SLA is missed at the lowest load {self._label(w)} ({which} < "
                f"{self.target:.0%} target): not attainable for this system; loosen that "
                "criterion or make it scale with the work asked",
            )
            return
        if self._missed is None or self.level(w) < self.level(self._missed):
            self._missed = w

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
            return s.descend_points - self._descended + s.bisect_points
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
        """``"point 3/<=6 (x16, 60 s): 2 done in 4m10s, ETA <= 5m20s"``; rate rungs name
        the point's planned rate and load scale, and a point whose schedule plans fewer
        than ``min_requests`` in its longest time says how many it will get."""
        done = len(self.measures)
        total = done + self.points_left()
        nxt = self.next_window()
        if nxt is None:
            now = f"{done}/{done} done"
        else:
            kind = ", bisecting" if nxt.bisect else ", stepping down" if nxt.descend else ""
            n, want = nxt.planned_requests, self.settings.min_requests
            short = f", only {n} of {want} requests planned" if n is not None and n < want else ""
            now = f"point {done + 1}/<={total} ({self._label(nxt)}{kind}, {nxt.send_s:g} s{short})"
        return f"{now}: {done} done in {_mmss(elapsed_s)}, ETA <= {_mmss(self.eta_s(elapsed_s))}"

    # -- result ----------------------------------------------------------------------------
    def verdict(self, system: str) -> LadderVerdict:
        s = self.settings
        points = [self._point(m) for m in self.measures]
        self.next_window()  # settles the stop reason when the walk ran out
        basis, reason = self._stop or ("load-bounded", "the walk was cut short")
        valid = [m for m in self.measures if m.health.exclusion(s) is None and m.requests]

        def level(m: PointMeasure) -> float:
            return self.level(m.window)

        missed = [level(m) for m in valid if not self._meets(m)]
        ceiling = min(missed) if missed else math.inf
        meeting = [m for m in valid if self._meets(m) and level(m) < ceiling]
        cap = max(meeting, key=level) if meeting and basis != "refused" else None

        def bounds(m: PointMeasure) -> tuple[float, float]:
            return wilson(m.met, m.requests, s.confidence)

        surely_met = [m for m in meeting if bounds(m)[0] >= self.target]
        # a load not sustained is beyond the capacity whatever its sample said
        surely_missed = [m for m in valid if bounds(m)[1] < self.target or not m.sustained]
        low = max(surely_met, key=level) if surely_met else None
        high = min(surely_missed, key=level) if surely_missed else None
        origin = self.origin_rps
        return LadderVerdict(
            system=system,
            target_pct=self.target * 100,
            confidence=s.confidence,
            warmup_s=s.warmup_s,
            point_s=s.point_s,
            max_lag_p99_s=s.max_lag_p99_s,
            loads=s.loads(),
            rungs_rps=None
            if origin is None
            else [origin * s.growth**k for k in range(s.max_points)],
            **{k: getattr(s, k) for k in RECORDED},
            spent_s=self.spent_s,
            points=points,
            basis=basis,
            reason=reason,
            capacity_load_scale=cap.window.load if cap else None,
            capacity_planned_rps=cap.window.planned_rps if cap and self.rate_rungs else None,
            capacity_goodput=max(m.goodput_rps for m in meeting) if cap else None,
            capacity_low=(low.goodput_rps if low else 0.0) if cap else None,
            capacity_high=high.offered_rps if cap and high else None,
            measured_requests=sum(m.requests for m in valid),
        )

    def _point(self, m: PointMeasure) -> LadderPoint:
        lo, hi = wilson(m.met, m.requests, self.settings.confidence)
        w = m.window
        return LadderPoint(
            index=w.index,
            load_scale=w.load,
            trace_start_s=w.trace_start_s,
            trace_duration_s=w.trace_duration_s,
            measure_s=w.measure_s,
            bisect=w.bisect,
            descend=w.descend,
            target_rps=w.target_rps,
            planned_rps=w.planned_rps,
            planned_requests=w.planned_requests,
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
            settle_s=m.settle_s,
            backlog=m.backlog or None,
            settled=m.settled or None,
            planned_mix=m.planned_mix,
            mix=m.mix,
            served_hit_bins=m.served_hit_bins,
            trace_mix=m.trace_mix,
            primed_blocks=m.primed_blocks,
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
