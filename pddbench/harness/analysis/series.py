"""Curves for the report's figures, computed from the records (numbers only, no drawing).

* ``ttft_cdf`` / ``task_cdf``: thinned empirical CDFs (tails kept).
* ``hit_shares``: share of requests per published hit-rate bin in equal time windows of
  the run (by intended send time) — the run-time view of the published Jan-Feb figure.
* ``bathtub``: per 5 %-wide hit-rate bin, the *token service rate* of ok requests,
  ``Σ(input + output tokens) / Σ E2E`` — how many tokens per second one request of that
  hit rate was served at. Honest limit: in a mixed run all bins share the same servers,
  so this is a per-request view, not the cluster throughput at a fixed hit rate that
  the published bathtub (E2) plots; that needs one run per hit rate (the report then
  plots the runs' token throughput against their mean hit rate). Bins with fewer than
  ``min_requests`` requests are NaN.
* ``handoff``: inter-token intervals of relayed requests around the handoff seam
  (token index − relay_tokens; the seam is where MD's first token follows RLD's last),
  as median and P90 per offset, plus a few individual requests; needs token times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pddbench.harness.analysis.recordset import HIT_BIN_LABELS, RecordSet, list_intervals
from pddbench.harness.analysis.stats import ecdf


@dataclass(frozen=True)
class Curve:
    x: np.ndarray
    y: np.ndarray


@dataclass(frozen=True)
class HitShares:
    start_s: np.ndarray  # window starts, seconds from the run start
    period_s: float
    shares: np.ndarray  # (windows, bins)
    requests: np.ndarray  # per window
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Bathtub:
    low: np.ndarray  # bin lower edges, fraction
    high: np.ndarray
    requests: np.ndarray
    service_rate: np.ndarray  # tokens/s per request
    ttft_p50_s: np.ndarray


@dataclass(frozen=True)
class HandoffTimeline:
    offsets: np.ndarray  # token index − relay_tokens
    median_s: np.ndarray
    p90_s: np.ndarray
    examples: tuple[Curve, ...]  # individual relayed requests (offset, interval)
    requests: int  # relayed requests with token times that were used
    direct_median_s: float  # median interval of direct requests (reference level)


def ttft_cdf(records: RecordSet) -> Curve:
    x, y = ecdf(records.col("ttft_s")[records.ok])
    return Curve(x, y)


def ttft_timeline(records: RecordSet) -> Curve:
    """Each ok request's TTFT (y) at its actual send time (x, s from the run's origin)."""
    ok = records.ok
    x = records.col("actual_send_s")[ok]
    order = np.argsort(x)
    return Curve(x[order], records.col("ttft_s")[ok][order])


def curve_of(values: np.ndarray) -> Curve:
    x, y = ecdf(values)
    return Curve(x, y)


def hit_shares(records: RecordSet, windows: int = 40) -> HitShares:
    t = records.col("intended_send_s")
    known = (records.hit_bin >= 0) & np.isfinite(t)
    nbins = len(HIT_BIN_LABELS)
    if not known.any():
        return HitShares(
            np.empty(0), 0.0, np.zeros((0, nbins)), np.zeros(0, np.int64), HIT_BIN_LABELS
        )
    t0, t1 = float(t[known].min()), float(t[known].max())
    span = max(t1 - t0, 1e-9)
    period = span / windows
    w = np.minimum(((t[known] - t0) / period).astype(np.int64), windows - 1)
    counts = np.bincount(w * nbins + records.hit_bin[known], minlength=windows * nbins)
    counts = counts.reshape(windows, nbins)
    req = counts.sum(axis=1)
    shares = counts / np.maximum(req, 1)[:, None]
    return HitShares(t0 + np.arange(windows) * period, period, shares, req, HIT_BIN_LABELS)


def bathtub(records: RecordSet, width: float = 0.05, min_requests: int = 5) -> Bathtub:
    edges = np.round(np.arange(0.0, 1.0 + 1e-9, width), 6)
    low, high = edges[:-1], edges[1:]
    rate = records.hit_rate
    use = records.ok & np.isfinite(rate) & (records.col("e2e_s") > 0)
    idx = np.minimum((rate[use] / width).astype(np.int64), low.size - 1)
    n = np.bincount(idx, minlength=low.size)
    tokens = (records.col("input_tokens") + records.col("output_tokens"))[use]
    tok = np.bincount(idx, weights=tokens, minlength=low.size)
    e2e = np.bincount(idx, weights=records.col("e2e_s")[use], minlength=low.size)
    with np.errstate(divide="ignore", invalid="ignore"):
        service = np.where(n >= min_requests, tok / e2e, np.nan)
    ttft = records.col("ttft_s")[use]
    p50 = np.full(low.size, np.nan)
    order = np.argsort(idx, kind="stable")
    sorted_idx = idx[order]
    bounds = np.searchsorted(sorted_idx, np.arange(low.size + 1))
    for b in range(low.size):
        if n[b] >= min_requests:
            vals = ttft[order[bounds[b] : bounds[b + 1]]]
            vals = vals[np.isfinite(vals)]
            if vals.size:
                p50[b] = float(np.median(vals))
    return Bathtub(low, high, n.astype(np.int64), service, p50)


def handoff_timeline(
    records: RecordSet,
    *,
    before: int = 20,
    after: int = 40,
    max_requests: int = 2000,
    examples: int = 5,
) -> HandoffTimeline | None:
    """ITL around the handoff seam of relayed ok requests; None without token times."""
    tt = records.token_times
    if tt is None:
        return None
    relay = np.nan_to_num(records.col("relay_tokens"), nan=0.0).astype(np.int64)
    lengths = pc.list_value_length(tt).fill_null(0).to_numpy(zero_copy_only=False)
    candidates = np.flatnonzero(records.ok & (relay > 0) & (lengths > relay))
    direct = np.flatnonzero(records.ok & ~records.relayed & (lengths > 1))
    direct_med = float("nan")
    if direct.size:
        gaps = list_intervals(tt.take(pa.array(direct[:max_requests])))
        direct_med = float(np.median(gaps)) if gaps.size else float("nan")
    if candidates.size == 0:
        return HandoffTimeline(np.empty(0), np.empty(0), np.empty(0), (), 0, direct_med)
    candidates = candidates[:max_requests]
    offsets = np.arange(-before, after + 1)
    grid = np.full((candidates.size, offsets.size), np.nan)
    curves: list[Curve] = []
    for row, i in enumerate(candidates):
        times = np.asarray(tt[int(i)].as_py(), dtype=np.float64)
        itl = np.diff(times)  # itl[k] = gap before token k+1
        token_index = np.arange(1, times.size)
        rel = token_index - relay[i]
        sel = (rel >= -before) & (rel <= after)
        grid[row, rel[sel] + before] = itl[sel]
        if len(curves) < examples:
            curves.append(Curve(rel[sel].astype(np.float64), itl[sel]))
    with np.errstate(all="ignore"):
        counts = np.isfinite(grid).sum(axis=0)
        med = np.where(counts > 0, np.nanmedian(np.where(counts > 0, grid, 0.0), axis=0), np.nan)
        p90 = np.where(
            counts > 0, np.nanpercentile(np.where(counts > 0, grid, 0.0), 90, axis=0), np.nan
        )
    return HandoffTimeline(
        offsets.astype(np.float64), med, p90, tuple(curves), int(candidates.size), direct_med
    )
