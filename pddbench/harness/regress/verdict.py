"""Nightly verdicts: is tonight's value of a metric a regression, an improvement or noise?

Pure decision logic over numbers (no files): the history of one metric of one scenario
as nights (each with the values of its repeated runs), tonight's values, the metric's
direction and smallest meaningful change.

Noise model
-----------
Values are compared on a log scale when all are positive (noise in latencies and rates
is multiplicative: "3 %" is the same everywhere), else on the raw scale. A night's value
is the mean of its repeated runs. Its variance is ``τ² + σ_w² / r``: ``σ_w²`` is the
within-night variance of repeated runs (pooled over every night with repeats), ``τ²``
the extra night-to-night variance (from the residuals of the step fit, minus the part
``σ_w²`` explains). Without repeats anywhere, all noise is ``τ²`` and repeats tonight
are given no credit (conservative). σ never drops below ``noise_floor`` (relative), so
identical values do not make every tiny change "significant".

Tests (a change counts only in the metric's *bad* or *good* direction, and only when
``|z|`` exceeds the Student-t quantile ``1 − alpha`` with the noise estimate's degrees of
freedom, AND the relative change is at least ``min_rel_change``, AND the absolute change
is at least the metric's ``min_change``):

1. *Point test* — tonight against the rolling baseline: the mean of the last ``window``
   nights of the current regime (the last segment of a step fit over the history, so a
   step months ago does not pollute the baseline).
2. *Step test* — a step fit over the history *with* tonight appended: if the last
   segment began within the last ``recent`` nights, its level is compared with the
   previous segment's (last ``window`` nights). This catches a regression that landed a
   few nights ago and is too small to see in one night alone, and keeps it red for
   ``recent`` nights; after that the new level is the baseline.

Regression if either test finds a significant bad change; improvement if either finds a
good one and none a bad one; otherwise noise. Fewer than ``min_history`` nights:
``insufficient-history`` (never a failure).

Detection power (``tests/analysis/test_regress.py`` measures it): with 3 % noise per
run, a 10 % step is 3.2 σ for one run — below the default threshold (≈ 4.1 σ at alpha
1e-4): one run per night flags it within 2-4 nights via the step test; 3 repeated runs
per night flag it the first night with high probability.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from pddbench.harness.analysis.registry import Direction
from pddbench.harness.regress.noise import pooled_within, t_quantile
from pddbench.harness.regress.stepdetect import Segment, fit_steps


class Verdict(StrEnum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NOISE = "noise"
    INSUFFICIENT = "insufficient-history"
    NO_DATA = "no-data"


@dataclass(frozen=True)
class RegressConfig:
    window: int = 14
    alpha: float = 1e-4
    min_rel_change: float = 0.05
    recent: int = 7
    min_history: int = 5
    min_segment: int = 3  # nights; shorter regimes in the history count as noise
    noise_floor: float = 0.005
    # BIC's step price (stepdetect's default is twice that): the z-test guards against
    # spurious steps, and a cheap step keeps a fresh regression out of the noise estimate
    beta: float = 2.0


@dataclass(frozen=True)
class TestResult:
    diff: float  # transformed scale
    z: float
    rel_change: float
    abs_change: float
    significant: bool
    bad: bool


@dataclass
class MetricVerdict:
    """The verdict on one metric of one scenario, with what a trend plot needs."""

    key: str
    direction: Direction
    verdict: Verdict
    current: float = math.nan  # mean of tonight's runs (base unit)
    baseline: float = math.nan  # baseline level (base unit)
    rel_change: float = math.nan
    z: float = math.nan
    threshold: float = math.nan
    sigma: float = math.nan  # noise of one night (transformed scale)
    log_scale: bool = True
    step_since: str | None = None
    reason: str = ""
    nights: list[str] = field(default_factory=list)
    night_values: list[list[float]] = field(default_factory=list)
    night_means: list[float] = field(default_factory=list)
    fit: list[float] = field(default_factory=list)  # fitted level per history night
    current_values: list[float] = field(default_factory=list)
    baseline_band: tuple[float, float] = (math.nan, math.nan)


def _clean(values: Sequence[float]) -> np.ndarray:
    a = np.asarray(values, dtype=np.float64)
    return a[np.isfinite(a)]


def judge(
    key: str,
    nights: Sequence[str],
    history: Sequence[Sequence[float]],
    current: Sequence[float],
    *,
    direction: Direction,
    min_change: float = 0.0,
    config: RegressConfig | None = None,
) -> MetricVerdict:
    """The verdict on tonight's ``current`` values given per-night ``history`` values."""
    cfg = config or RegressConfig()
    pairs = [(n, _clean(v)) for n, v in zip(nights, history, strict=True)]
    pairs = [(n, v) for n, v in pairs if v.size]
    cur = _clean(current)
    out = MetricVerdict(
        key,
        direction,
        Verdict.NO_DATA,
        nights=[n for n, _ in pairs],
        night_values=[v.tolist() for _, v in pairs],
        current_values=cur.tolist(),
    )
    if cur.size == 0:
        out.reason = "tonight's runs have no value for this metric"
        return out
    out.current = float(cur.mean())
    if len(pairs) < cfg.min_history:
        out.verdict = Verdict.INSUFFICIENT
        out.reason = f"{len(pairs)} night(s) of history, need {cfg.min_history}"
        if pairs:
            out.baseline = float(np.mean([v.mean() for _, v in pairs]))
        return out
    everything = np.concatenate([cur, *[v for _, v in pairs]])
    log = bool((everything > 0).all())
    tf = np.log if log else (lambda x: np.asarray(x, dtype=np.float64))
    t_hist = [tf(v) for _, v in pairs]
    t_cur = tf(cur)
    means = np.array([v.mean() for v in t_hist])
    reps = np.array([v.size for v in t_hist], dtype=np.float64)
    n = means.size
    # --- noise: within-night (repeats) and between-night (step-fit residuals)
    sw2, df_w = pooled_within([*t_hist, t_cur])
    segs = fit_steps(means, reps, beta=cfg.beta, min_size=cfg.min_segment, min_last=1)
    level = np.empty(n)
    for s in segs:
        level[s.start : s.end] = s.level
    resid = means - level
    df_b = max(n - len(segs), 1)
    sb2 = float((resid**2).sum()) / df_b
    if math.isfinite(sw2):
        tau2 = max(0.0, sb2 - float(np.mean(sw2 / reps)))
    else:
        tau2, sw2 = sb2, 0.0
    scale = abs(float(np.mean(means))) if not log else 1.0
    floor2 = (cfg.noise_floor * (1.0 if log else max(scale, 1e-12))) ** 2

    def night_var(r: float) -> float:
        return max(tau2 + sw2 / r, floor2)

    df = df_b + (df_w if df_w else 0)
    thr = t_quantile(1.0 - cfg.alpha, df)
    inv = np.exp if log else (lambda x: x)
    # --- point test against the current regime's rolling window
    last = segs[-1]
    win = np.arange(max(last.start, n - cfg.window), n)
    base_level = float(np.average(means[win], weights=reps[win]))
    var_base = float(np.mean([night_var(r) for r in reps[win]])) / win.size
    var_cur = night_var(float(cur.size))
    point = _test(
        float(t_cur.mean()),
        base_level,
        var_cur + var_base,
        thr,
        log,
        inv,
        direction,
        min_change,
        cfg,
    )
    # --- step test over history + tonight
    all_means = np.r_[means, t_cur.mean()]
    all_reps = np.r_[reps, float(cur.size)]
    segs2 = fit_steps(all_means, all_reps, beta=cfg.beta, min_size=cfg.min_segment, min_last=1)
    step: TestResult | None = None
    since: str | None = None
    if len(segs2) >= 2 and segs2[-1].start >= len(all_means) - cfg.recent:
        tail, prev = segs2[-1], segs2[-2]
        pw = np.arange(max(prev.start, prev.end - cfg.window), prev.end)
        tw = np.arange(tail.start, tail.end)
        lv_prev = float(np.average(all_means[pw], weights=all_reps[pw]))
        lv_tail = float(np.average(all_means[tw], weights=all_reps[tw]))
        var = (
            float(np.mean([night_var(r) for r in all_reps[pw]])) / pw.size
            + float(np.mean([night_var(r) for r in all_reps[tw]])) / tw.size
        )
        step = _test(lv_tail, lv_prev, var, thr, log, inv, direction, min_change, cfg)
        since = out.nights[tail.start] if tail.start < n else "tonight"
    # --- decide
    out.log_scale = log
    out.baseline = float(inv(base_level))
    out.rel_change = point.rel_change
    out.z = point.z
    out.threshold = thr
    out.sigma = math.sqrt(night_var(1.0))
    out.night_means = [float(inv(m)) for m in means]
    out.fit = [float(inv(x)) for x in level]
    half = thr * math.sqrt(var_base + night_var(float(cur.size)))
    out.baseline_band = (float(inv(base_level - half)), float(inv(base_level + half)))
    tests = [("tonight vs baseline", point, None)]
    if step is not None:
        tests.append((f"step since {since}", step, since))
    bad = [(name, t, s) for name, t, s in tests if t.significant and t.bad]
    good = [(name, t, s) for name, t, s in tests if t.significant and not t.bad]
    if bad:
        name, t, s = max(bad, key=lambda x: abs(x[1].z))
        out.verdict, out.step_since = Verdict.REGRESSION, s
    elif good:
        name, t, s = max(good, key=lambda x: abs(x[1].z))
        out.verdict, out.step_since = Verdict.IMPROVEMENT, s
    else:
        name, t = "tonight vs baseline", point
        out.verdict = Verdict.NOISE
    out.reason = (
        f"{name}: {t.rel_change * 100:+.1f} %, z = {t.z:+.1f} "
        f"(threshold ±{thr:.1f}, min change {cfg.min_rel_change * 100:g} %)"
    )
    if t is not point:
        out.rel_change, out.z = t.rel_change, t.z
    return out


def _test(
    value: float,
    base: float,
    var: float,
    thr: float,
    log: bool,
    inv: object,
    direction: Direction,
    min_change: float,
    cfg: RegressConfig,
) -> TestResult:
    diff = value - base
    z = diff / math.sqrt(var) if var > 0 else math.copysign(math.inf, diff) if diff else 0.0
    if log:
        rel = math.expm1(diff)
        abs_change = math.exp(value) - math.exp(base)
    else:
        abs_change = diff
        rel = diff / abs(base) if base else (math.inf if diff else 0.0)
    worse = (diff > 0) if direction is Direction.LOWER else (diff < 0)
    significant = (
        direction is not Direction.NONE
        and abs(z) > thr
        and abs(rel) >= cfg.min_rel_change
        and abs(abs_change) >= min_change
    )
    return TestResult(diff, z, rel, abs_change, significant, worse)


def segments_of(values: Sequence[float], weights: Sequence[float] | None = None) -> list[Segment]:
    """Convenience for plots: the step fit of a plain series."""
    return fit_steps(
        np.asarray(values, dtype=np.float64),
        None if weights is None else np.asarray(weights, dtype=np.float64),
    )
