"""Capacity as the offered rate where SLA attainment crosses the target, with an interval.

Owns :func:`crossing`: from a capacity walk's points (each an offered rate, its measured
requests and how many met the SLA), the rate at which attainment falls through the target
and a bootstrap interval for it; and :func:`walk_capacity`, a walk's capacity as every
verdict reads it (the main job's, the sizing search's, the report's BCR table, the
experiments'). The ladder's own capacity (the highest point that met, its interval from
points *surely* meeting and missing) stays in ``capacity.json`` beside it, as the walk's
record.

Why a second reading of the same points: at a 99 % target a point of a few hundred
requests is never *surely* meeting (Wilson's lower bound of 400 / 400 is 99.05 %), so the
ladder's interval starts at 0 and a BCR ratio between two such intervals spans −100 % to
open. Here attainment is fitted non-increasing in log rate (pool-adjacent-violators,
weighted by requests; a point whose servers were left busy is a miss), the crossing is
interpolated between the last fitted point at or above the target and the first below,
and the interval is the percentile bootstrap of that crossing with each point's met count
redrawn binomially (at ``(met + ½) / (n + 1)``, so an all-met point can still miss).
What it does not hold: the difference between trace windows (each point replays its own);
the main job's repeated, interleaved points are what bound that.

Sans-IO and deterministic (a seeded generator): points in, :class:`Crossing` out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pddbench.harness.rundir.ladder import LadderPoint, LadderVerdict

RESAMPLES = 2000
METHOD = (
    "crossing of the SLA target by attainment fitted non-increasing in log rate; "
    "interval: percentile bootstrap of binomial redraws of every point"
)


@dataclass(frozen=True)
class Crossing:
    """The crossing rate (req/s offered) and its interval, with what a system serves there."""

    rate: float | None  # None: no point met (below the walk) or none missed (above it)
    low: float | None  # 0.0: the interval reaches below the lowest point
    high: float | None  # None: open above (no point surely missed)
    target: float  # attainment target, a fraction
    basis: str  # "crossing" | "load-bounded" (no miss) | "below the walk" (no met point)
    points: int

    def goodput(self, rate: float | None) -> float | None:
        """Requests per second meeting the SLA at ``rate`` (the target's share of it)."""
        return None if rate is None else rate * self.target


def _fit(att: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted least-squares non-increasing fit (pool adjacent violators)."""
    vals: list[float] = []
    wts: list[float] = []
    sizes: list[int] = []
    for a, n in zip(att.tolist(), w.tolist(), strict=True):
        vals.append(a)
        wts.append(n)
        sizes.append(1)
        while len(vals) > 1 and vals[-2] < vals[-1]:
            v2, w2, s2 = vals.pop(), wts.pop(), sizes.pop()
            v1, w1, s1 = vals.pop(), wts.pop(), sizes.pop()
            tot = w1 + w2
            vals.append((v1 * w1 + v2 * w2) / tot if tot else (v1 + v2) / 2)
            wts.append(tot)
            sizes.append(s1 + s2)
    return np.repeat(np.array(vals), sizes)


def _cross(x: np.ndarray, fit: np.ndarray, target: float) -> float:
    """The log rate where ``fit`` falls through ``target`` (−inf: below the first point,
    +inf: never)."""
    if fit[0] < target:
        return -math.inf
    below = np.nonzero(fit < target)[0]
    if below.size == 0:
        return math.inf
    j = int(below[0])
    i = j - 1
    span = fit[i] - fit[j]
    frac = (fit[i] - target) / span if span > 0 else 0.5
    return float(x[i] + frac * (x[j] - x[i]))


def crossing(
    points: Sequence[LadderPoint],
    target: float,
    *,
    confidence: float = 0.95,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Crossing:
    """The crossing of ``target`` (a fraction) by the walk's counted points."""
    rows: dict[float, list[int]] = {}
    for p in points:
        rate = p.planned_rps or p.offered_rps
        if p.excluded is not None or p.requests <= 0 or not rate or rate <= 0:
            continue
        met = 0 if p.backlog else p.met  # not sustained: a miss whatever it measured
        acc = rows.setdefault(math.log(rate), [0, 0, 0])
        acc[0] += met
        acc[1] += p.requests
        acc[2] += 1 if p.backlog else 0
    if not rows:
        return Crossing(None, None, None, target, "no counted point", 0)
    xs = sorted(rows)
    x = np.array(xs)
    met = np.array([rows[k][0] for k in xs], dtype=np.float64)
    n = np.array([rows[k][1] for k in xs], dtype=np.float64)
    stuck = np.array([rows[k][2] > 0 for k in xs])
    c = _cross(x, _fit(met / n, n), target)
    rng = np.random.default_rng(seed)
    p_draw = np.where(stuck, 0.0, (met + 0.5) / (n + 1.0))
    draws = rng.binomial(n.astype(np.int64), p_draw, size=(resamples, n.size)) / n
    boot = np.array([_cross(x, _fit(d, n), target) for d in draws])
    far = 50.0  # log rate: ends outside the walk stay outside (quantiles need finite values)
    boot = np.clip(boot, x[0] - far, x[-1] + far)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = (float(v) for v in np.quantile(boot, [alpha, 1.0 - alpha]))
    lo = -math.inf if lo <= x[0] - far / 2 else lo
    hi = math.inf if hi >= x[-1] + far / 2 else hi

    def rate(v: float) -> float | None:
        return None if math.isinf(v) else math.exp(v)

    basis = "crossing" if not math.isinf(c) else "load-bounded" if c > 0 else "below the walk"
    return Crossing(
        rate=rate(c),
        low=0.0 if lo == -math.inf else rate(lo),
        high=rate(hi),
        target=target,
        basis=basis,
        points=len(xs),
    )


@dataclass(frozen=True)
class WalkCapacity:
    """A walk's capacity as the verdicts read it: the crossing's, a refused walk refused."""

    basis: str  # "capacity" | "load-bounded" | "below the walk" | "no counted point" | "refused"
    capacity: float | None  # SLA goodput (req/s) at the crossing
    capacity_low: float | None  # its interval (capacity basis only)
    capacity_high: float | None  # None: open above
    capacity_rps: float | None  # the offered rate at the crossing
    crossing: Crossing

    @property
    def held(self) -> bool:
        return self.basis == "capacity"


def walk_capacity(walk: LadderVerdict) -> WalkCapacity:
    """The crossing of ``walk``'s target by its points (see the module docstring)."""
    cross = crossing(walk.points, walk.target_pct / 100.0, confidence=walk.confidence)
    basis = "capacity" if cross.basis == "crossing" else cross.basis
    if walk.basis == "refused":
        basis = "refused"
    held = basis == "capacity"
    return WalkCapacity(
        basis=basis,
        capacity=cross.goodput(cross.rate),
        capacity_low=cross.goodput(cross.low) if held else None,
        capacity_high=cross.goodput(cross.high) if held else None,
        capacity_rps=cross.rate,
        crossing=cross,
    )
