"""Shape checks: pure functions that compare a measured figure with a published shape.

Owns the vocabulary of the declarations' checks — a value inside a band, a ratio band,
a direction between two values, dips near given points, a bathtub, a monotone trend —
each returning a :class:`~pddbench.harness.experiments.model.CheckResult` that says what
was seen and, when it misses, by how much. Also the bootstrap interval for a statistic.
No I/O, no clocks; randomness only through an explicit seed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np

from pddbench.harness.experiments.model import CheckResult


def _f(x: float) -> str:
    return f"{x:.3g}"


def in_band(name: str, value: float, low: float, high: float, unit: str = "") -> CheckResult:
    """``low <= value <= high``; the gap is the distance to the nearer edge."""
    u = f" {unit}" if unit else ""
    seen = f"{name} {_f(value)}{u} (band {_f(low)}–{_f(high)}{u})"
    if not math.isfinite(value):
        return CheckResult(False, seen, f"{name} undefined (no requests it applies to)")
    if value < low:
        return CheckResult(False, seen, f"{_f(low - value)}{u} below the band")
    if value > high:
        return CheckResult(False, seen, f"{_f(value - high)}{u} above the band")
    return CheckResult(True, seen)


def direction(name_a: str, a: float, name_b: str, b: float, *, less: bool = True) -> CheckResult:
    """``a < b`` (``less``) or ``a > b``; the gap is the relative miss."""
    ok = a < b if less else a > b
    sign = "<" if less else ">"
    seen = f"{name_a} {_f(a)} {sign}? {name_b} {_f(b)}"
    if ok:
        return CheckResult(True, seen)
    undefined = [n for n, v in ((name_a, a), (name_b, b)) if not math.isfinite(v)]
    if undefined:
        return CheckResult(False, seen, f"{' and '.join(undefined)} undefined (no requests)")
    if b == 0:
        return CheckResult(False, seen, f"{name_a} − {name_b} = {_f(a - b)}")
    return CheckResult(False, seen, f"{name_a} is {a / b - 1:+.1%} against {name_b}")


def all_of(*results: CheckResult) -> CheckResult:
    """Every part passes; seen and gaps joined."""
    seen = "; ".join(r.seen for r in results)
    gap = "; ".join(r.gap for r in results if not r.passed)
    return CheckResult(all(r.passed for r in results), seen, gap)


def local_dips(
    x: Sequence[float], y: Sequence[float], *, window: int = 3, depth: float = 0.03
) -> list[float]:
    """The x where y falls more than ``depth`` below the median of its ±``window`` neighbours."""
    out = []
    ys = list(y)
    for i, v in enumerate(ys):
        around = ys[max(0, i - window) : i] + ys[i + 1 : i + 1 + window]
        if around and v < (1 - depth) * statistics.median(around):
            out.append(float(x[i]))
    return out


def dip_regions(found: Sequence[float], gap: float = 0.02) -> list[list[float]]:
    """Dips closer than ``gap`` to the previous one form one region (one singular point)."""
    regions: list[list[float]] = []
    for d in sorted(found):
        if regions and d - regions[-1][-1] <= gap + 1e-9:
            regions[-1].append(d)
        else:
            regions.append([d])
    return regions


def dips_near(
    x: Sequence[float], y: Sequence[float], targets: Sequence[float], tol: float, *, need: int
) -> CheckResult:
    """Dips near at least ``need`` of ``targets``, and no more dips elsewhere than targets.

    A dip is a dip region (:func:`dip_regions`); one is *near* a target when any of its
    points lies within ``tol``; regions near no target are *elsewhere*.
    """
    regions = dip_regions(local_dips(x, y))

    def near(r: list[float], t: float) -> bool:
        return any(abs(d - t) <= tol + 1e-9 for d in r)  # 1e-9: the float grid

    hit = [t for t in targets if any(near(r, t) for r in regions)]
    elsewhere = [r for r in regions if not any(near(r, t) for t in targets)]
    shown = [f"{r[0]:.2f}" if len(r) == 1 else f"{r[0]:.2f}–{r[-1]:.2f}" for r in regions]
    seen = f"dips at {shown or 'none'}; near {list(targets)}: {hit}; elsewhere {len(elsewhere)}"
    gaps = []
    if len(hit) < need:
        gaps.append(f"{need - len(hit)} more of the published dips missing")
    if len(elsewhere) > len(targets):
        gaps.append(f"{len(elsewhere)} dips away from the published points")
    return CheckResult(not gaps, seen, "; ".join(gaps))


def bathtub(
    x: Sequence[float],
    y: Sequence[float],
    *,
    edge: float = 0.15,
    middle: tuple[float, float] = (0.3, 0.85),
    margin: float = 0.05,
) -> CheckResult:
    """Both ends (x within ``edge`` of 0 and of 1) above the middle's minimum by ``margin``."""
    xs, ys = np.asarray(x, float), np.asarray(y, float)
    low_end = ys[xs <= edge]
    high_end = ys[xs >= 1 - edge]
    mid = ys[(xs >= middle[0]) & (xs <= middle[1])]
    if not (low_end.size and high_end.size and mid.size):
        return CheckResult(False, "too few points for a bathtub", "need both ends and a middle")
    bottom = float(mid.min())
    where = float(xs[(xs >= middle[0]) & (xs <= middle[1])][int(mid.argmin())])
    lo, hi = float(low_end.max()), float(high_end.max())
    seen = f"ends {_f(lo)} / {_f(hi)}, bottom {_f(bottom)} at x={where:.2f}"
    ok = lo > bottom * (1 + margin) and hi > bottom * (1 + margin)
    if ok:
        return CheckResult(True, seen)
    worse = min(lo, hi) / bottom - 1 if bottom else 0.0
    return CheckResult(False, seen, f"lower end only {worse:+.1%} above the bottom")


def monotone(
    name: str, y: Sequence[float], *, increasing: bool, tolerance: float = 0.0
) -> CheckResult:
    """Last minus first has the stated sign, and no step reverses by more than ``tolerance``."""
    ys = [float(v) for v in y]
    if len(ys) < 2:
        return CheckResult(False, f"{name}: {len(ys)} point(s)", "need two points for a trend")
    if not all(math.isfinite(v) for v in ys):
        bad = sum(not math.isfinite(v) for v in ys)
        return CheckResult(False, f"{name} {[_f(v) for v in ys]}", f"undefined at {bad} point(s)")
    steps = np.diff(ys)
    sign = 1.0 if increasing else -1.0
    total = sign * (ys[-1] - ys[0])
    worst = float(np.min(sign * steps))
    seen = f"{name} {_f(ys[0])} → {_f(ys[-1])} ({'rising' if ys[-1] > ys[0] else 'falling'})"
    if total > 0 and worst >= -tolerance * max(abs(ys[0]), 1e-12):
        return CheckResult(True, seen)
    return CheckResult(False, seen, f"trend {'not rising' if increasing else 'not falling'}")


def bootstrap_ci(
    values: np.ndarray,
    stat: Callable[[np.ndarray], float],
    *,
    reps: int = 400,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat`` over ``values`` (rows resampled)."""
    values = np.asarray(values)
    if values.shape[0] < 2:
        v = stat(values) if values.shape[0] else float("nan")
        return v, v
    rng = np.random.default_rng(seed)
    n = values.shape[0]
    draws = np.array([stat(values[rng.integers(0, n, n)]) for _ in range(reps)])
    a = (1 - level) / 2
    return float(np.quantile(draws, a)), float(np.quantile(draws, 1 - a))
