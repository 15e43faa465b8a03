"""Step detection: the best piecewise-constant fit of a noisy series (written here, asv-like).

Model: the series is constant on consecutive segments plus independent noise. The fit
minimises ``Σ w_i (y_i − μ_seg(i))² + γ · (segments − 1)`` exactly by dynamic programming
over all segmentations (optimal partitioning, O(n²) with prefix sums — nightly
histories are tens to hundreds of points). ``γ`` is the price of one more step; the
default ``γ = β · σ̂² · ln(n)`` with ``β = 4`` is twice the BIC price of a step's two
extra parameters (where and how much) — BIC's own price still finds a spurious step in
~20 % of flat 40-point series, ``β = 4`` in ~3 %, while a 3σ step is always found — and
``σ̂`` is a step-robust noise estimate from the successive differences (a step moves one
difference, not the median).

Pure numpy; no I/O. Used by ``verdict`` to find the current regime of a metric and to
date a recent step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class Segment:
    start: int  # first index
    end: int  # one past the last index
    level: float  # weighted mean of the segment

    @property
    def size(self) -> int:
        return self.end - self.start


def diff_sigma(y: np.ndarray) -> float:
    """Noise σ from successive differences: 1.4826 · median|Δy| / √2 (robust to steps)."""
    y = np.asarray(y, dtype=np.float64)
    if y.size < 3:
        return math.nan
    return MAD_TO_SIGMA * float(np.median(np.abs(np.diff(y)))) / math.sqrt(2.0)


def fit_steps(
    y: np.ndarray,
    weights: np.ndarray | None = None,
    *,
    gamma: float | None = None,
    beta: float = 4.0,
    sigma: float | None = None,
    min_size: int = 1,
    min_last: int | None = None,
) -> list[Segment]:
    """Segments of the optimal piecewise-constant fit of ``y`` (see module doc).

    ``weights`` (default 1) scale each point's squared error, e.g. by its number of
    repeated runs (a point of weight w is taken to have variance σ²/w; ``sigma`` is per
    unit weight). Every segment has at least ``min_size`` points except the last, which
    needs ``min_last`` (default ``min_size``) — so a change in the newest points can show
    while older regimes must persist. ``gamma`` overrides the step price; otherwise it is
    ``beta · sigma² · ln(n)`` with ``sigma`` defaulting to :func:`diff_sigma`.
    """
    y = np.asarray(y, dtype=np.float64)
    n = y.size
    if n == 0:
        return []
    last_min = min_size if min_last is None else min_last
    if n < min_size + last_min:
        w1 = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
        return [Segment(0, n, float(np.average(y, weights=w1)))]
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    if gamma is None:
        # σ per unit weight: a point of weight w has variance σ²/w
        s = diff_sigma(y) * math.sqrt(float(np.mean(w))) if sigma is None else sigma
        if not math.isfinite(s) or s <= 0:
            s = float(np.std(y)) * math.sqrt(float(np.mean(w))) or 1.0
        gamma = beta * s * s * math.log(max(n, 2))
    cw = np.r_[0.0, np.cumsum(w)]
    cwy = np.r_[0.0, np.cumsum(w * y)]
    cwyy = np.r_[0.0, np.cumsum(w * y * y)]

    def cost(i: np.ndarray, j: int) -> np.ndarray:
        """Weighted SSE of segments y[i:j] for an array of starts i."""
        sw = cw[j] - cw[i]
        swy = cwy[j] - cwy[i]
        sse = (cwyy[j] - cwyy[i]) - np.where(sw > 0, swy * swy / np.where(sw > 0, sw, 1.0), 0.0)
        return np.maximum(sse, 0.0)

    best = np.full(n + 1, np.inf)
    best[0] = -gamma
    prev = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        need = last_min if j == n else min_size
        starts = np.arange(0, j - need + 1)
        starts = starts[(starts == 0) | (starts >= min_size)]
        starts = starts[np.isfinite(best[starts])]
        if starts.size == 0:
            continue
        total = best[starts] + cost(starts, j) + gamma
        k = int(np.argmin(total))
        best[j] = total[k]
        prev[j] = starts[k]
    bounds = []
    j = n
    while j > 0:
        i = int(prev[j])
        bounds.append((i, j))
        j = i
    bounds.reverse()
    return [
        Segment(i, j, float((cwy[j] - cwy[i]) / (cw[j] - cw[i])) if cw[j] > cw[i] else math.nan)
        for i, j in bounds
    ]


def fitted(segments: list[Segment], n: int) -> np.ndarray:
    """The fitted level at every index."""
    out = np.full(n, np.nan)
    for s in segments:
        out[s.start : s.end] = s.level
    return out
