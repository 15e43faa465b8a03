"""The load ladder's settings and the points it places in the trace (sans-IO).

Owns :class:`LadderSettings` (rungs, power, time budget, what counts), the default and
quick ladders, :class:`PointWindow`, what a point measured (:class:`PointMeasure`, its
:class:`PointHealth`) and how consecutive points walk on through the trace
(:func:`point_windows`, :func:`powered_measure_s`). The rungs are offered request rates
when the trace's schedule is known (each point's load scale is found for its rate:
:mod:`pddbench.harness.plan.ladder_rate`), else load scales. The search that runs them, the
intervals and the verdict are :mod:`pddbench.harness.plan.ladder`. No I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pddbench.harness.rundir.ladder import RequestMix


@dataclass(frozen=True)
class LadderSettings:
    """The shared load ladder, the power of its points, its time budget and what counts."""

    start: float = 1.0  # load scale of the first point (× the base arrival rate)
    growth: float = 1.5  # offered-rate factor between rungs (load factor without a schedule)
    max_points: int = 6  # ladder points (bisection points come on top, ``bisect_points``)
    point_s: float = 60.0  # measured wall time per point (after the warm-up); the minimum
    warmup_s: float = 10.0  # excluded at the start of every point
    max_lag_p99_s: float = 0.5  # schedule-lag P99 above this: the harness fell behind
    confidence: float = 0.95  # of every interval
    request_limit_s: float = 60.0  # a point's requests are cut after this (see censoring)
    # power: a point measures until the trace's schedule has offered ``min_requests`` after
    # its warm-up, at least ``point_s`` and at most ``max_point_s`` (None: ``point_s``)
    min_requests: int = 0
    max_point_s: float | None = None
    bisect_points: int = 0  # after the first miss, bisect the bracket this many times
    # when the lowest rung already misses, step down (÷ growth) this many times before
    # refusing: a system slower than the ladder's start still gets a capacity
    descend_points: int = 0
    # the search's wall time (sending + draining) is kept under this (None: unbounded)
    time_budget_s: float | None = None
    point_overhead_s: float = 5.0  # planning and reading a point, reserved in the budget
    # rate rungs: a point's load scale is searched in [load_floor, load_cap] until its
    # planned offered rate is within ``rate_tolerance`` of the rung's (at most
    # ``rate_iterations`` schedule queries; the closest one is taken)
    max_load: float | None = None  # None: start × growth^(max_points + 1)
    rate_tolerance: float = 0.05
    rate_iterations: int = 12
    # steady-state points (:mod:`pddbench.harness.plan.steady`): a point replays every
    # request of its trace window, sessions in progress continuing, caches primed from the
    # trace's history; False: the sessions that start in the window, from cold caches
    steady: bool = True

    def __post_init__(self) -> None:
        if not (self.start > 0 and self.growth > 1 and self.max_points >= 1):
            raise ValueError("ladder: need start > 0, growth > 1 and max_points >= 1")
        if not (self.point_s > 0 and self.warmup_s >= 0 and self.max_lag_p99_s > 0):
            raise ValueError("ladder: need point_s > 0, warmup_s >= 0, max_lag_p99_s > 0")
        if self.request_limit_s <= 0:
            raise ValueError("ladder: need request_limit_s > 0")
        if not 0 < self.confidence < 1:
            raise ValueError("ladder: confidence must be in (0, 1)")
        if self.min_requests < 0 or self.bisect_points < 0:
            raise ValueError("ladder: need min_requests >= 0 and bisect_points >= 0")
        if not 0 <= self.descend_points < self.max_points:
            raise ValueError("ladder: need 0 <= descend_points < max_points")
        if self.max_point_s is not None and self.max_point_s < self.point_s:
            raise ValueError("ladder: need max_point_s >= point_s")
        if self.time_budget_s is not None and self.time_budget_s < self.point_cost_s(self.point_s):
            raise ValueError("ladder: the time budget does not hold one point")
        if self.max_load is not None and self.max_load < self.start:
            raise ValueError("ladder: need max_load >= start")
        if not (0 < self.rate_tolerance < 1 and self.rate_iterations >= 1):
            raise ValueError("ladder: need 0 < rate_tolerance < 1 and rate_iterations >= 1")

    def loads(self) -> list[float]:
        return [self.start * self.growth**k for k in range(self.max_points)]

    @property
    def load_cap(self) -> float:
        """The highest load scale a rate rung may use (its rate may fall short there)."""
        return self.max_load or self.start * self.growth ** (self.max_points + 1)

    @property
    def load_floor(self) -> float:
        """The lowest load scale a rate rung may use: two steps below the last step-down."""
        return self.start / self.growth ** (self.descend_points + 2)

    def describe_walk(self, origin_rps: float | None = None) -> str:
        """``"ladder x4, x8, x16, x32 (down to x1 if x4 misses) + <= 2 bisection points"``;
        with ``origin_rps`` (what ``start`` offers at the walk's origin) the rungs are rates:
        ``"ladder of offered rates 3.84, 7.68, ... req/s (...) ..."``."""
        if origin_rps is not None:
            rates = ", ".join(f"{origin_rps * self.growth**k:.3g}" for k in range(self.max_points))
            down = (
                f" (down to {origin_rps / self.growth**self.descend_points:.3g} if the first "
                "misses)"
                if self.descend_points
                else ""
            )
            return (
                f"ladder of offered rates {rates} req/s{down} + <= {self.bisect_points} "
                f"bisection points (first rung: what x{self.start:g} offers at the walk's "
                f"origin; each point's load scale, <= x{self.load_cap:g}, is chosen from the "
                "trace's schedule to offer its rate)"
            )
        down = (
            f" (down to x{self.start / self.growth**self.descend_points:g} if x{self.start:g} "
            "misses)"
            if self.descend_points
            else ""
        )
        rungs = ", x".join(f"{x:g}" for x in self.loads())
        return f"ladder x{rungs}{down} + <= {self.bisect_points} bisection points"

    @property
    def longest_point_s(self) -> float:
        return self.point_s if self.max_point_s is None else self.max_point_s

    @property
    def send_s(self) -> float:
        """Wall time the longest point sends for (warm-up included)."""
        return self.warmup_s + self.longest_point_s

    def point_cost_s(self, measure_s: float) -> float:
        """What the budget reserves for a point measuring ``measure_s``: its sending and
        at most ``request_limit_s`` of draining (its last requests are cut then), and the
        planning and reading of it."""
        return self.warmup_s + measure_s + self.request_limit_s + self.point_overhead_s

    @property
    def most_points(self) -> int:
        return self.max_points + self.bisect_points

    @property
    def budget_s(self) -> float:
        """Upper bound on a whole search's wall time (sending + draining, every point)."""
        worst = self.most_points * self.point_cost_s(self.longest_point_s)
        return worst if self.time_budget_s is None else min(worst, self.time_budget_s)


# A point decides at the 99 % target when its Wilson interval can clear it: with no miss,
# 381 measured requests put the lower end at 99 % (95 % confidence); with 3 % missed, 17
# put the upper end below it. So a point measures until the trace's schedule has offered
# 400 requests after its warm-up (30 s at least, 120 s at most); four rate rungs, x2 apart,
# bracket the capacity, then two bisection points (fresh stretches of the trace) narrow it.
# The first rung is what x1 offers at the origin: a steady point at load x plays 10 × x
# slices of the window at once, each at the trace's own rate (jan-feb's busiest hour:
# ~0.4 req/s), so x1 offers 3.9 req/s, as x4 did (3.84) when a point started its sessions
# at turn 0 (it offered only their first turns): the same rungs as before. The main job
# gives every system the same settings and an equal share of its 30 minutes
# (``time_budget_s`` set there); ``pddbench capacity`` takes these as they are.
DEFAULT_LADDER = LadderSettings(
    start=1.0,
    growth=2.0,
    max_points=4,
    point_s=30.0,
    warmup_s=10.0,
    request_limit_s=45.0,
    min_requests=400,
    max_point_s=120.0,
    bisect_points=2,
    descend_points=2,
)
# ``--quick``: 150 requests a point (an all-met point cannot surely meet 99 %: its interval
# says so), 20-60 s, one bisection point, shorter warm-up and request limit
QUICK_LADDER = dataclasses.replace(
    DEFAULT_LADDER, point_s=20.0, warmup_s=5.0, request_limit_s=30.0, max_point_s=60.0
)
QUICK_LADDER = dataclasses.replace(QUICK_LADDER, min_requests=150, bisect_points=1)

# ``schedule(start_s, load, send_s)``: the planned send offsets (wall s after the point's
# start, sorted) of the requests a point at ``load`` starting at trace time ``start_s``
# would send if it sent for ``send_s``: how the search sizes and aims a point from the
# trace itself (the same for every system).
Schedule = Callable[[float, float, float], Sequence[float]]


@dataclass(frozen=True)
class PointWindow:
    """One point: its load, the slice of the trace (session starts) it replays, how long
    it measures and whether it is a bisection point."""

    index: int
    load: float
    trace_start_s: float
    trace_duration_s: float
    measure_s: float = 60.0  # measured wall time (after the warm-up), whole seconds
    warmup_s: float = 10.0
    bisect: bool = False
    descend: bool = False  # a step-down point (the first rung missed)
    # rate rungs: the rung's offered rate, and what the trace's schedule plans at ``load``
    # in the measured time (requests intended after the warm-up, and per second)
    target_rps: float | None = None
    planned_rps: float | None = None
    planned_requests: int | None = None

    @property
    def trace_end_s(self) -> float:
        return self.trace_start_s + self.trace_duration_s

    @property
    def send_s(self) -> float:
        return self.warmup_s + self.measure_s


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
    # the servers' work after the point's last answer (drive.quiesce): how long it took to
    # finish (None: not watched), and, when it did not finish in the wait, what was left.
    # A point that leaves a backlog did not sustain its load (its answers came while queues
    # grew, as relayed requests' WAN transfers can): it misses, whatever its attainment.
    settle_s: float | None = None
    backlog: str = ""
    settled: str = ""  # why nothing was waited on, when known (virtual time: nothing left)
    # steady-state points: what kind of requests were measured (the trace's hit rates),
    # the hit rates the servers reported, the trace window's own mix, the primed blocks
    planned_mix: RequestMix | None = None
    mix: RequestMix | None = None
    served_hit_bins: list[float] | None = None
    trace_mix: RequestMix | None = None
    primed_blocks: int | None = None

    @property
    def sustained(self) -> bool:
        return not self.backlog

    @property
    def attainment(self) -> float:
        return self.met / self.requests if self.requests else 0.0

    @property
    def goodput_rps(self) -> float:
        return self.met / self.measured_s if self.measured_s > 0 else 0.0


def _window(
    settings: LadderSettings,
    index: int,
    load: float,
    cursor: float,
    base_speedup: float,
    measure_s: float,
    bisect: bool = False,
) -> PointWindow:
    """At load ``x`` a point sends for ``warmup + measure_s`` wall seconds with arrivals
    compressed ``base_speedup × x``, so it spans that many times as much of the trace; a
    steady point measures ``base_speedup × x`` stretches of ``measure_s`` (its slices'
    warm-ups replay the trace just before each: :mod:`~pddbench.harness.plan.steady`)."""
    sent = measure_s if settings.steady else settings.warmup_s + measure_s
    span = sent * base_speedup * load
    return PointWindow(index, load, cursor, span, measure_s, settings.warmup_s, bisect)


def point_windows(
    settings: LadderSettings, origin_s: float, base_speedup: float
) -> list[PointWindow]:
    """The ladder's points at ``point_s`` each, as consecutive, disjoint trace windows
    starting at ``origin_s`` (the next starts where one ended)."""
    if base_speedup <= 0:
        raise ValueError("base speedup must be > 0")
    out: list[PointWindow] = []
    cursor = origin_s
    for k, load in enumerate(settings.loads()):
        out.append(_window(settings, k, load, cursor, base_speedup, settings.point_s))
        cursor = out[-1].trace_end_s
    return out


def powered_measure_s(settings: LadderSettings, offsets: Sequence[float]) -> float:
    """The power rule: how long a point measures so that the trace's schedule offers
    ``min_requests`` after the warm-up, within ``[point_s, max_point_s]``. ``offsets``:
    planned send offsets (wall s, sorted) of the point sent for its longest time."""
    lo, hi = settings.point_s, settings.longest_point_s
    if settings.min_requests <= 0 or hi <= lo:
        return lo
    after = [t - settings.warmup_s for t in offsets if t >= settings.warmup_s]
    if len(after) < settings.min_requests:
        return hi
    return min(hi, max(lo, math.ceil(after[settings.min_requests - 1]) + 1.0))
