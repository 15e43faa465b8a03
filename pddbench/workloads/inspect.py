"""What a trace looks like: sizes, rates, length distributions and prefix-hit shares.

Pure computation over an in-memory :class:`~pddbench.workloads.traceio.Trace` and a
:class:`~pddbench.workloads.hitrate.HitResult` (the hit model is ``hitrate``'s job, not
this module's). Produces a :class:`TraceSummary` and, for plotting, a
:class:`HitShareSeries`. No printing, no files.

Conventions:

* Percentiles use numpy's default linear interpolation.
* A request with hit rate ``h`` (a fraction) falls into bin ``[low, high)`` when
  ``low/100 <= h < high/100``; the last bin (``high == 100``) also takes ``h == 1``.
  Comparisons are made on fractions (``cached / input``), so a request exactly at a
  boundary (e.g. 19/20 = 95 %) lands in the upper bin.
* ``share_ge_95`` is the share of requests with ``h >= 0.95`` and ``share_lt_50`` those
  with ``h < 0.5``; all shares are shares of *requests*, in [0, 1].
* Weeks are 7-day periods counted from arrival offset 0 (the trace's epoch when it has
  one); a week is labelled by the ISO date it starts on when the epoch is known, else
  ``"week 1"``, ``"week 2"``, ... Weeks without requests are left out.
* Rates are per second of the span between the first and the last arrival; ``None``
  when the span is zero. Values undefined for an empty trace are ``None``.

JSON form (:func:`summary_to_json`), stable keys::

    format ("pddbench.trace-summary"), version (1), file, epoch, requests, sessions,
    subagent_sessions, turns_per_session{mean,p50,p90,p99,max}, first_arrival_s,
    last_arrival_s, time_span_s, request_rate_per_s, session_rate_per_s,
    input_length{...}, output_length{...}, hit{HIT}, weeks[{label, start_s, end_s, hit{HIT}}],
    hashes (where the prefix hashes came from, as the importer recorded it, or null)

    HIT = capacity_blocks, requests, input_tokens, cached_tokens, token_weighted,
          mean_per_request, share_ge_95, share_lt_50,
          bins[{label, low_pct, high_pct, requests, share}] (the 7 published bins),
          coarse_bins[{...}] (the 4 coarse bins)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise

import numpy as np
import pyarrow.compute as pc

from pddbench.workloads.hitrate import HitResult
from pddbench.workloads.schema import COARSE_HIT_BINS, PUBLISHED_HIT_BINS, Col, bin_label
from pddbench.workloads.traceio import Trace

SUMMARY_FORMAT = "pddbench.trace-summary"
SUMMARY_VERSION = 1
WEEK_S = 7 * 86400.0
DAY_S = 86400.0
HOUR_S = 3600.0


@dataclass(frozen=True)
class Distribution:
    """Mean and percentiles of one quantity; all ``None`` when there is no data."""

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None


@dataclass(frozen=True)
class BinShare:
    """How many requests fall into one hit-rate bin ``[low_pct, high_pct)``."""

    label: str
    low_pct: float
    high_pct: float
    requests: int
    share: float | None


@dataclass(frozen=True)
class HitStats:
    """Prefix-hit figures of a set of requests under one cache model."""

    capacity_blocks: int | None  # None: unbounded cache
    requests: int
    input_tokens: int
    cached_tokens: int
    token_weighted: float | None  # cached tokens / input tokens
    mean_per_request: float | None
    share_ge_95: float | None
    share_lt_50: float | None
    bins: tuple[BinShare, ...]  # PUBLISHED_HIT_BINS
    coarse_bins: tuple[BinShare, ...]  # COARSE_HIT_BINS


@dataclass(frozen=True)
class PeriodHit:
    """Hit figures of the requests arriving in ``[start_s, end_s)``."""

    label: str
    start_s: float
    end_s: float
    hit: HitStats


@dataclass(frozen=True)
class TraceSummary:
    """Everything ``pddbench trace inspect`` reports about one trace."""

    file: str | None
    epoch: str | None
    requests: int
    sessions: int
    subagent_sessions: int
    turns_per_session: Distribution
    first_arrival_s: float | None
    last_arrival_s: float | None
    time_span_s: float
    request_rate_per_s: float | None
    session_rate_per_s: float | None
    input_length: Distribution
    output_length: Distribution
    hit: HitStats
    weeks: tuple[PeriodHit, ...]
    # where the prefix hashes came from, as the importer recorded it (carried, rebuilt
    # from a token count, or a stated synthetic model); None when the file does not say
    hashes: str | None = None


@dataclass(frozen=True)
class HitShareSeries:
    """Share of requests per hit-rate bin in consecutive periods, first to last request.

    A period without requests has ``requests == 0`` and all shares 0.
    """

    period_s: float
    epoch: str | None
    start_s: np.ndarray  # float64, start offset of each period
    requests: np.ndarray  # int64, requests per period
    shares: np.ndarray  # float64 (periods, bins), rows sum to 1 (0 for empty periods)
    labels: tuple[str, ...]


# ------------------------------------------------------------------------- helpers


def bin_index(hit_rate: np.ndarray, bins: tuple[tuple[float, float], ...]) -> np.ndarray:
    """Index into ``bins`` of every hit rate (fractions); see the module conventions."""
    for (_, high), (low, _) in pairwise(bins):
        if high != low:
            raise ValueError(f"hit-rate bins are not contiguous: {bins}")
    lows = np.array([low / 100.0 for low, _ in bins], dtype=np.float64)
    idx = np.searchsorted(lows, np.asarray(hit_rate, dtype=np.float64), side="right") - 1
    return np.clip(idx, 0, len(bins) - 1)


def distribution(values: np.ndarray) -> Distribution:
    """Mean, p50, p90, p99 and max of ``values``."""
    if values.size == 0:
        return Distribution(None, None, None, None, None)
    v = values.astype(np.float64, copy=False)
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return Distribution(float(v.mean()), float(p50), float(p90), float(p99), float(v.max()))


def parse_epoch(epoch: str) -> datetime:
    """The epoch as an aware UTC datetime (naive ISO strings are taken as UTC)."""
    dt = datetime.fromisoformat(epoch)
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _ratio(num: float, den: float) -> float | None:
    return float(num) / float(den) if den > 0 else None


def _grouped_bins(
    group: np.ndarray, n_groups: int, hit_rate: np.ndarray, bins: tuple[tuple[float, float], ...]
) -> np.ndarray:
    """Request counts, shape (n_groups, len(bins))."""
    key = group * len(bins) + bin_index(hit_rate, bins)
    counts = np.bincount(key, minlength=n_groups * len(bins))
    return counts.reshape(n_groups, len(bins))


def _bin_shares(
    counts: np.ndarray, total: int, bins: tuple[tuple[float, float], ...]
) -> tuple[BinShare, ...]:
    return tuple(
        BinShare(bin_label(low, high), low, high, int(c), _ratio(int(c), total))
        for (low, high), c in zip(bins, counts, strict=True)
    )


def grouped_hit_stats(
    group: np.ndarray,
    n_groups: int,
    hits: HitResult,
    input_length: np.ndarray,
) -> list[HitStats]:
    """One :class:`HitStats` per group id in ``range(n_groups)`` (vectorised)."""
    group = np.asarray(group, dtype=np.int64)
    rate = hits.hit_rate
    requests = np.bincount(group, minlength=n_groups)
    inputs = np.bincount(group, weights=input_length.astype(np.float64), minlength=n_groups)
    cached = np.bincount(group, weights=hits.cached_tokens.astype(np.float64), minlength=n_groups)
    rate_sum = np.bincount(group, weights=rate, minlength=n_groups)
    ge95 = np.bincount(group, weights=(rate >= 0.95).astype(np.float64), minlength=n_groups)
    lt50 = np.bincount(group, weights=(rate < 0.5).astype(np.float64), minlength=n_groups)
    fine = _grouped_bins(group, n_groups, rate, PUBLISHED_HIT_BINS)
    coarse = _grouped_bins(group, n_groups, rate, COARSE_HIT_BINS)
    out = []
    for g in range(n_groups):
        n = int(requests[g])
        out.append(
            HitStats(
                capacity_blocks=hits.capacity_blocks,
                requests=n,
                input_tokens=round(inputs[g]),
                cached_tokens=round(cached[g]),
                token_weighted=_ratio(cached[g], inputs[g]),
                mean_per_request=_ratio(rate_sum[g], n),
                share_ge_95=_ratio(ge95[g], n),
                share_lt_50=_ratio(lt50[g], n),
                bins=_bin_shares(fine[g], n, PUBLISHED_HIT_BINS),
                coarse_bins=_bin_shares(coarse[g], n, COARSE_HIT_BINS),
            )
        )
    return out


def _weeks(trace: Trace, arrival: np.ndarray, hits: HitResult, inp: np.ndarray) -> list[PeriodHit]:
    if arrival.size == 0:
        return []
    week = np.floor(arrival / WEEK_S).astype(np.int64)
    present, group = np.unique(week, return_inverse=True)
    stats = grouped_hit_stats(group, present.size, hits, inp)
    epoch = parse_epoch(trace.epoch) if trace.epoch else None
    periods = []
    for k, st in zip(present.tolist(), stats, strict=True):
        if epoch is not None:
            label = (epoch + timedelta(weeks=k)).date().isoformat()
        else:
            label = f"week {k + 1}"
        periods.append(PeriodHit(label, k * WEEK_S, (k + 1) * WEEK_S, st))
    return periods


# ------------------------------------------------------------------------ summaries


def summarize(trace: Trace, hits: HitResult) -> TraceSummary:
    """The summary of ``trace`` given its per-request ``hits`` (row order of the table)."""
    table = trace.table
    n = table.num_rows
    if hits.hit_rate.shape != (n,) or hits.cached_tokens.shape != (n,):
        raise ValueError("hits do not match the trace's rows")
    arrival = trace.column(Col.ARRIVAL).astype(np.float64)
    inp = trace.column(Col.INPUT_LENGTH).astype(np.int64)
    out = trace.column(Col.OUTPUT_LENGTH).astype(np.int64)

    sessions = pc.dictionary_encode(table.column(Col.SESSION_ID).combine_chunks())
    codes = sessions.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    n_sessions = len(sessions.dictionary)
    turns = np.bincount(codes, minlength=n_sessions)
    sub = pc.is_valid(table.column(Col.PARENT_SESSION_ID)).to_numpy(zero_copy_only=False)
    n_sub = int(np.unique(codes[sub]).size)

    first = float(arrival.min()) if n else None
    last = float(arrival.max()) if n else None
    span = (last - first) if first is not None and last is not None else 0.0
    overall = grouped_hit_stats(np.zeros(n, dtype=np.int64), 1, hits, inp)[0]
    return TraceSummary(
        file=trace.path,
        epoch=trace.epoch,
        requests=n,
        sessions=n_sessions,
        subagent_sessions=n_sub,
        turns_per_session=distribution(turns),
        first_arrival_s=first,
        last_arrival_s=last,
        time_span_s=span,
        request_rate_per_s=_ratio(n, span),
        session_rate_per_s=_ratio(n_sessions, span),
        input_length=distribution(inp),
        output_length=distribution(out),
        hit=overall,
        weeks=tuple(_weeks(trace, arrival, hits, inp)),
        hashes=_hashes_note(trace),
    )


def _hashes_note(trace: Trace) -> str | None:
    note = trace.source.get("hashes")
    importer = trace.source.get("importer")
    if not isinstance(note, str):
        return None
    return f"{importer}: {note}" if isinstance(importer, str) else note


def summary_to_json(summary: TraceSummary) -> dict[str, object]:
    """The JSON document of a summary (keys in the module docstring)."""
    return {"format": SUMMARY_FORMAT, "version": SUMMARY_VERSION, **asdict(summary)}


def default_period_s(time_span_s: float) -> float:
    """Plot resolution: one hour for traces shorter than three days, else one day."""
    return HOUR_S if time_span_s < 3 * DAY_S else DAY_S


def hit_share_series(
    trace: Trace, hits: HitResult, *, period_s: float | None = None
) -> HitShareSeries:
    """Share of requests per published bin in each period (periods counted from offset 0)."""
    arrival = trace.column(Col.ARRIVAL).astype(np.float64)
    if period_s is None:
        span = float(arrival.max() - arrival.min()) if arrival.size else 0.0
        period_s = default_period_s(span)
    labels = tuple(bin_label(low, high) for low, high in PUBLISHED_HIT_BINS)
    if arrival.size == 0:
        empty = np.zeros(0)
        return HitShareSeries(period_s, trace.epoch, empty, empty.astype(np.int64),
                              np.zeros((0, len(labels))), labels)
    period = np.floor(arrival / period_s).astype(np.int64)
    first = int(period.min())
    n_periods = int(period.max()) - first + 1
    counts = _grouped_bins(period - first, n_periods, hits.hit_rate, PUBLISHED_HIT_BINS)
    requests = counts.sum(axis=1)
    shares = counts / np.maximum(requests, 1)[:, None]
    return HitShareSeries(
        period_s=period_s,
        epoch=trace.epoch,
        start_s=(first + np.arange(n_periods, dtype=np.float64)) * period_s,
        requests=requests.astype(np.int64),
        shares=shares,
        labels=labels,
    )
