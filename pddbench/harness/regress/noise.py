"""The noise model's arithmetic: normal and Student-t quantiles, robust spread, pooling.

Owns small statistical helpers the verdicts need, without scipy: the Student-t quantile
by the Cornish-Fisher expansion around the normal quantile (Hill 1970; within 0.5 % of
the exact value for df >= 5 at the tail probabilities used here), a MAD-based σ, and the
pooled within-night variance of repeated runs. Pure functions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

MAD_TO_SIGMA = 1.4826


def z_quantile(p: float) -> float:
    """The standard normal quantile of probability ``p``."""
    return NormalDist().inv_cdf(p)


def t_quantile(p: float, df: float) -> float:
    """The Student-t quantile of probability ``p`` with ``df`` degrees of freedom (df >= 1).

    Cornish-Fisher expansion in 1/df; df below 3 is treated as 3 (conservative use only).
    """
    z = z_quantile(p)
    if not math.isfinite(df) or df > 1e6:
        return z
    v = max(float(df), 3.0)
    z2 = z * z
    g1 = (z2 + 1.0) * z / 4.0
    g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0
    g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0
    g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0
    return z + g1 / v + g2 / v**2 + g3 / v**3 + g4 / v**4


def mad_sigma(x: np.ndarray) -> float:
    """1.4826 · median |x − median x| (NaN for fewer than 2 values)."""
    x = np.asarray(x, dtype=np.float64)
    if x.size < 2:
        return math.nan
    return MAD_TO_SIGMA * float(np.median(np.abs(x - np.median(x))))


def pooled_within(groups: Sequence[np.ndarray]) -> tuple[float, int]:
    """Pooled variance of values around their own group mean, and its degrees of freedom."""
    ss = 0.0
    df = 0
    for g in groups:
        g = np.asarray(g, dtype=np.float64)
        if g.size >= 2:
            ss += float(((g - g.mean()) ** 2).sum())
            df += g.size - 1
    return (ss / df if df else math.nan), df
