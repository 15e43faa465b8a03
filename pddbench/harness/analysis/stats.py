"""Summary statistics of one sample: count, mean, min, max and chosen percentiles.

Owns the one definition of a percentile used by every metric and report (numpy's
default linear interpolation between order statistics) and the names of the statistics
(``mean``, ``p50``, ``p99.9``, ...). Pure numpy; no metric knowledge.

An empty sample has ``count == 0`` and NaN for every other statistic: "no data", never 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 99.0, 99.9)
BASIC_STATS: tuple[str, ...] = ("count", "mean", "min", "max")


def percentile_key(p: float) -> str:
    """``50 -> "p50"``, ``99.9 -> "p99.9"``."""
    return f"p{p:g}"


def parse_percentiles(text: str) -> tuple[float, ...]:
    """``"50,90,99,99.9"`` -> (50.0, 90.0, 99.0, 99.9); raises ValueError when malformed."""
    values = tuple(float(part) for part in text.split(",") if part.strip())
    if not values or any(not 0.0 <= v <= 100.0 for v in values):
        raise ValueError(f"percentiles must be numbers in [0, 100], got {text!r}")
    return tuple(sorted(set(values)))


@dataclass(frozen=True)
class Distribution:
    """Summary of a sample; ``percentiles`` maps a percentile (e.g. 99.9) to its value."""

    count: int
    mean: float
    min: float
    max: float
    percentiles: dict[float, float]

    def get(self, stat: str) -> float:
        """A statistic by name: ``count``, ``mean``, ``min``, ``max`` or ``pNN``."""
        if stat == "count":
            return float(self.count)
        if stat in ("mean", "min", "max"):
            return float(getattr(self, stat))
        if stat.startswith("p"):
            try:
                p = float(stat[1:])
            except ValueError:
                p = math.nan
            if p in self.percentiles:
                return self.percentiles[p]
        raise KeyError(stat)

    def stat_names(self) -> tuple[str, ...]:
        return BASIC_STATS + tuple(percentile_key(p) for p in self.percentiles)

    def as_dict(self) -> dict[str, float]:
        return {name: self.get(name) for name in self.stat_names()}

    def scaled(self, factor: float) -> Distribution:
        return Distribution(
            self.count,
            self.mean * factor,
            self.min * factor,
            self.max * factor,
            {p: v * factor for p, v in self.percentiles.items()},
        )


def describe(
    values: np.ndarray, percentiles: Sequence[float] = DEFAULT_PERCENTILES
) -> Distribution:
    """Summary of the finite values of ``values`` (NaN and inf are left out)."""
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        nan = math.nan
        return Distribution(0, nan, nan, nan, dict.fromkeys(percentiles, nan))
    qs = np.percentile(arr, list(percentiles)) if percentiles else np.empty(0)
    return Distribution(
        count=int(arr.size),
        mean=float(arr.mean()),
        min=float(arr.min()),
        max=float(arr.max()),
        percentiles={float(p): float(q) for p, q in zip(percentiles, qs, strict=True)},
    )


def ratio(num: float, den: float) -> float:
    """``num / den``; NaN when ``den`` is 0 or NaN (an undefined ratio, not 0)."""
    if not den or math.isnan(den):
        return math.nan
    return num / den


def ecdf(values: np.ndarray, points: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """An empirical CDF thinned to at most ``points`` (x, F(x)) pairs for plotting.

    Keeps the exact order statistics at evenly spaced probabilities plus the maximum,
    so tails (P99, P99.9) stay visible however large the sample.
    """
    arr = np.sort(np.asarray(values, dtype=np.float64)[np.isfinite(values)])
    if arr.size == 0:
        return np.empty(0), np.empty(0)
    n = arr.size
    if n <= points:
        idx = np.arange(n)
    else:
        head = np.linspace(0, n - 1, points // 2).astype(np.int64)
        # denser in the tail: probabilities 1 - 10^-k for k in [1, log10 n]
        tail_p = 1.0 - np.logspace(-1, -math.log10(n), points // 2)
        tail = np.clip((tail_p * n).astype(np.int64), 0, n - 1)
        idx = np.unique(np.concatenate([head, tail, [n - 1]]))
    return arr[idx], (idx + 1) / n
