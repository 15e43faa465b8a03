"""Capacity search: the highest load at which a system still meets its SLA target.

Also :func:`measure_point`: what one load point of the shared ladder
(:mod:`pddbench.harness.plan.ladder`) measured — warm-up excluded, per-criterion
attainment, schedule lag, the servers' lost scheduler time — from its records.

The older bracket-and-interpolate search below is kept for callers that run one
deployment at arbitrary loads; ``pddbench capacity`` and the main job use the ladder.

Pure logic: the caller supplies ``run_at(load_scale) -> CapacityPoint`` (run the replay
at that load, measure SLA attainment and goodput); this module decides which loads to
try, in as few runs as it can, and how to read the result. No I/O, no clock.

Method (attainment assumed to fall as load rises; noise tolerated):

1. *Bracket.* Run at ``start``. If it meets the target, multiply the load by ``growth``
   until a run misses (or ``max_load``); if not, divide until a run meets (or
   ``min_load``). The bracket is [highest load meeting, lowest load missing].
2. *Interpolate.* Guess the crossing by linear interpolation of logit(attainment)
   between the bracket's ends (regula falsi on the S-curve made straight), kept at least
   10 % inside the bracket so it always shrinks; run there and replace the end on the
   same side. Stop when the bracket is within ``rel_tol`` of its lower end or after
   ``max_runs`` runs in all.

:class:`CapacityResult` reports ``capacity`` (the highest load *measured* to meet the
target — a conservative answer) and ``estimate`` (the interpolated crossing), plus every
point measured, which is also the goodput/attainment-vs-load curve a report draws
(saved as ``capacity.json``, :class:`CapacityCurve`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.sla import SLA, check
from pddbench.harness.plan.ladder import LadderSettings, PointHealth, PointMeasure, PointWindow

LOST_METRIC = "pdd_scheduler_lost_seconds_total"


class CapacityPoint(BaseModel):
    """One measured run: its load and what it achieved (attainment as a fraction)."""

    model_config = ConfigDict(frozen=True)

    load_scale: float = Field(gt=0)
    attainment: float = Field(ge=0, le=1)
    goodput: float | None = None  # req/s meeting the SLA, when measured
    offered_rps: float | None = None


class CapacityCurve(BaseModel):
    """The file form of a capacity search (``capacity.json`` in a run folder)."""

    model_config = ConfigDict(extra="forbid")

    system: str
    target_pct: float = Field(gt=0, le=100)
    sla: dict[str, float | None] = {}
    points: list[CapacityPoint]
    capacity_load_scale: float | None = None
    estimate_load_scale: float | None = None


@dataclass
class CapacityResult:
    target: float  # fraction
    capacity: float | None  # highest load measured to meet the target; None: none did
    estimate: float | None  # interpolated crossing; None when not bracketed
    bracketed: bool
    points: list[CapacityPoint] = field(default_factory=list)
    reason: str = ""

    @property
    def runs(self) -> int:
        return len(self.points)

    def sorted_points(self) -> list[CapacityPoint]:
        return sorted(self.points, key=lambda p: p.load_scale)


def _logit(a: float) -> float:
    a = min(max(a, 1e-4), 1.0 - 1e-4)
    return math.log(a / (1.0 - a))


def _crossing(lo: CapacityPoint, hi: CapacityPoint, target: float) -> float:
    """Load where attainment crosses ``target`` on the line through lo and hi in logit space.

    Attainment-vs-load curves are S-shaped (flat near 100 %, then a drop); in logit space
    they are close to straight, so the interpolation converges in a few runs.
    """
    y_lo, y_hi, y_t = _logit(lo.attainment), _logit(hi.attainment), _logit(target)
    drop = y_lo - y_hi
    if drop <= 0:
        return 0.5 * (lo.load_scale + hi.load_scale)
    frac = (y_lo - y_t) / drop
    return lo.load_scale + min(max(frac, 0.0), 1.0) * (hi.load_scale - lo.load_scale)


def find_capacity(
    run_at: Callable[[float], CapacityPoint],
    *,
    target_pct: float = 99.0,
    start: float = 1.0,
    growth: float = 2.0,
    min_load: float = 1.0 / 64,
    max_load: float = 64.0,
    rel_tol: float = 0.05,
    max_runs: int = 8,
) -> CapacityResult:
    """Search for the highest load meeting ``target_pct`` % attainment (see module doc)."""
    if not (0 < target_pct <= 100 and growth > 1 and 0 < min_load <= start <= max_load):
        raise ValueError("need 0 < target_pct <= 100, growth > 1, min_load <= start <= max_load")
    if max_runs < 2 or rel_tol <= 0:
        raise ValueError("need max_runs >= 2 and rel_tol > 0")
    target = target_pct / 100.0
    points: list[CapacityPoint] = []

    def run(load: float) -> CapacityPoint:
        p = run_at(load)
        points.append(p)
        return p

    first = run(start)
    lo: CapacityPoint | None = first if first.attainment >= target else None
    hi: CapacityPoint | None = None if lo is not None else first
    # 1. bracket
    while len(points) < max_runs and (lo is None or hi is None):
        if hi is None:
            assert lo is not None
            load = lo.load_scale * growth
            if load > max_load:
                return CapacityResult(
                    target,
                    lo.load_scale,
                    None,
                    False,
                    points,
                    f"meets the target up to max_load {max_load:g}",
                )
            p = run(load)
            if p.attainment >= target:
                lo = p
            else:
                hi = p
        else:
            load = hi.load_scale / growth
            if load < min_load:
                return CapacityResult(
                    target,
                    None,
                    None,
                    False,
                    points,
                    f"misses the target even at min_load {min_load:g}",
                )
            p = run(load)
            if p.attainment >= target:
                lo = p
            else:
                hi = p
    if lo is None or hi is None:
        cap = lo.load_scale if lo is not None else None
        return CapacityResult(
            target, cap, None, False, points, f"not bracketed within {max_runs} runs"
        )
    # 2. interpolate inside the bracket
    while len(points) < max_runs and (hi.load_scale - lo.load_scale) > rel_tol * lo.load_scale:
        width = hi.load_scale - lo.load_scale
        guess = _crossing(lo, hi, target)
        guess = min(max(guess, lo.load_scale + 0.1 * width), hi.load_scale - 0.1 * width)
        p = run(guess)
        if p.attainment >= target:
            lo = p
        else:
            hi = p
    converged = (hi.load_scale - lo.load_scale) <= rel_tol * lo.load_scale
    return CapacityResult(
        target,
        lo.load_scale,
        _crossing(lo, hi, target),
        True,
        points,
        "converged" if converged else f"stopped after {max_runs} runs",
    )


def to_curve(result: CapacityResult, *, system: str, sla: dict[str, float | None]) -> CapacityCurve:
    """The file form of a search result."""
    return CapacityCurve(
        system=system,
        target_pct=result.target * 100.0,
        sla=sla,
        points=result.sorted_points(),
        capacity_load_scale=result.capacity,
        estimate_load_scale=result.estimate,
    )


def scheduler_lost_s(server_metrics: pa.Table | None) -> float:
    """Modelled time the servers' schedulers lost (summed over instances; last sample)."""
    if server_metrics is None or server_metrics.num_rows == 0:
        return 0.0
    names = server_metrics.column("raw_name").to_pylist()
    rows = [i for i, n in enumerate(names) if n == LOST_METRIC]
    if not rows:
        return 0.0
    inst = server_metrics.column("instance").to_pylist()
    vals = server_metrics.column("value").to_pylist()
    last: dict[str, float] = {}
    for i in rows:  # rows are in time order: the last one per instance is the total
        last[inst[i]] = float(vals[i])
    return float(sum(last.values()))


def measure_point(
    records: RecordSet,
    sla: SLA,
    window: PointWindow,
    settings: LadderSettings,
    *,
    lost_s: float = 0.0,
    emulated: bool,
    probes_on: bool,
) -> PointMeasure:
    """One ladder point's figures: requests intended in ``[warmup, warmup + point_s)``."""
    n = records.num
    intended = n["intended_send_s"]
    start, end = settings.warmup_s, settings.warmup_s + settings.point_s
    sent = records.sent
    measured = sent & (intended >= start) & (intended < end)
    warm = sent & (intended < start)
    sc = check(sla, records)
    lag = records.schedule_lag_s[measured]
    lag = lag[np.isfinite(lag)]
    count = int(measured.sum())
    return PointMeasure(
        window=window,
        requests=count,
        met=int((sc.met & measured).sum()),
        met_by={
            "ttft": int((sc.ttft_ok & measured).sum()),
            "tpot": int((sc.tpot_ok & measured).sum()),
            "e2e": int((sc.e2e_ok & measured).sum()),
        },
        warmup_excluded=int(warm.sum()),
        measured_s=settings.point_s,
        offered_rps=count / settings.point_s,
        health=PointHealth(
            schedule_lag_p99_s=float(np.percentile(lag, 99)) if lag.size else None,
            scheduler_lost_s=lost_s,
            emulated=emulated,
            probes_on=probes_on,
        ),
    )
