"""Rate rungs: the load scale at which a ladder point offers a target request rate (sans-IO).

The walk moves on through the trace, whose own rate varies (diurnally, by day), and its
sessions are closed loops whose think times are real: a point at load scale ``x`` offers
far from ``x`` times the base rate, and doubling ``x`` late in the walk may buy little
(measured: x16 6.64 req/s, x32 6.35). So the ladder's rungs are **offered request rates**
and each point's load scale is searched for: :func:`plan_point` says what the trace's
schedule plans for a point at ``x`` from a cursor (its powered measured time and the
requests intended after the warm-up in it); :func:`scale_for_rate` finds the ``x`` whose
planned rate is within ``rate_tolerance`` of the rung's, in ``[load_floor, load_cap]``
(a proportional step, then geometric bisection once bracketed; the closest query when the
budget of queries runs out or even the cap falls short: with the warm-up and the measured
time both stretched over more trace, a steep decline can make a higher scale offer less).
Planned, not measured: the same for every system. No I/O.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pddbench.harness.plan.ladder_points import LadderSettings, Schedule, powered_measure_s


@dataclass(frozen=True)
class PointPlan:
    """What the trace's schedule plans for one point at ``load`` from a cursor."""

    load: float
    measure_s: float  # powered (and, when given, capped) measured time
    planned_requests: int  # intended in [warm-up, warm-up + measure_s)
    target_rps: float | None = None  # the rung's rate it was aimed at

    @property
    def planned_rps(self) -> float:
        return self.planned_requests / self.measure_s

    def error(self) -> float:
        """How far the planned rate is from the target, as |log ratio| (inf: none planned)."""
        if self.target_rps is None:
            return 0.0
        if self.planned_requests == 0:
            return math.inf
        return abs(math.log(self.planned_rps / self.target_rps))


def planned_in(settings: LadderSettings, offsets: Sequence[float], measure_s: float) -> int:
    """Requests intended in the measured time ``[warmup, warmup + measure_s)``."""
    lo, hi = settings.warmup_s, settings.warmup_s + measure_s
    return sum(1 for t in offsets if lo <= t < hi)


def plan_point(
    settings: LadderSettings, sched: Schedule, at_s: float, load: float, cap_s: float | None = None
) -> PointPlan:
    """The point at ``load`` from trace time ``at_s``: powered measured time (at most
    ``cap_s``) and the requests the schedule intends in it."""
    longest_offsets = sched(at_s, load, settings.send_s)
    longest = settings.longest_point_s if cap_s is None else min(cap_s, settings.longest_point_s)
    measure = min(powered_measure_s(settings, longest_offsets), longest)

    def sent_for(measure_s: float) -> Sequence[float]:
        """The schedule of the point as it will be sent: a steady point's slices are as
        long as it measures, so sent for less it is not a prefix of the longest one's."""
        if measure_s >= settings.longest_point_s:
            return longest_offsets
        return sched(at_s, load, settings.warmup_s + measure_s)

    for _ in range(4):  # powered on the schedule it will be sent with
        planned = planned_in(settings, sent_for(measure), measure)
        if planned >= settings.min_requests or measure >= longest:
            break
        measure = min(longest, math.ceil(measure * settings.min_requests / max(1, planned)) + 1)
    return PointPlan(load, measure, planned_in(settings, sent_for(measure), measure))


def scale_for_rate(
    settings: LadderSettings,
    schedule: Schedule,
    cursor_s: float,
    target_rps: float,
    guess: float,
    *,
    measure_cap_s: float | None = None,
) -> PointPlan:
    """The plan whose load scale offers ``target_rps`` from ``cursor_s`` (see the module)."""
    if target_rps <= 0:
        raise ValueError("a rate rung needs a target > 0")
    floor, cap = settings.load_floor, settings.load_cap
    tol = math.log1p(settings.rate_tolerance)
    below: float | None = None  # highest load planning less than the target
    above: float | None = None  # lowest load planning at least the target
    tried: list[PointPlan] = []
    x = min(cap, max(floor, guess))
    for _ in range(settings.rate_iterations):
        p = dataclasses.replace(
            plan_point(settings, schedule, cursor_s, x, measure_cap_s), target_rps=target_rps
        )
        tried.append(p)
        if p.error() <= tol:
            return p
        if p.planned_rps < target_rps:
            below = x if below is None else max(below, x)
            if x >= cap:
                break  # the cap falls short: the closest (highest) rate found is taken
        else:
            above = x if above is None else min(above, x)
            if x <= floor:
                break
        step = settings.growth**2
        ratio = target_rps / p.planned_rps if p.planned_requests else step
        nxt = x * min(step, max(1.0 / step, ratio))
        if below is not None and above is not None and not below < nxt < above:
            nxt = math.sqrt(below * above)
        nxt = min(cap, max(floor, nxt))
        if nxt == x:
            break
        x = nxt
    return min(tried, key=lambda p: (p.error(), p.load))
