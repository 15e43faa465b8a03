"""The servers' own counters over a run, from ``server_metrics.parquet``.

Owns reading the scraped ``/metrics`` series (common names, ``engines.metrics``) into the
figures the report puts beside the client's: the servers' prefix-cache hit rate (Δ hit
tokens / Δ queried tokens over the run, summed over instances), their queue (requests
waiting: mean and peak over the scrapes; mean time queued from the histogram's Δsum /
Δcount), and how many prompt tokens they actually computed. A counter's run total is
its last value minus its first per series; a drop (a restart) counts from the new value.
Pure: takes the table ``analysis.rundir`` loaded; computes no client metric.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

HIT = "prefix_cache_hit_tokens_total"
QUERY = "prefix_cache_query_tokens_total"
PROMPT = "prompt_tokens_total"
COMPUTED = "prompt_tokens_computed_total"
WAITING = "requests_waiting"
QUEUE_TIME = "queue_time_seconds"


@dataclass(frozen=True)
class ServerCounters:
    """One run's server-side figures (NaN where no instance exports the series)."""

    instances: int
    scrapes: int
    prefix_hit_rate: float  # Σ Δ hit tokens / Σ Δ queried tokens
    prompt_tokens: float  # Σ Δ prompt tokens received
    prompt_tokens_computed: float  # Σ Δ prompt tokens prefilled (not from a cache)
    waiting_mean: float  # requests waiting, mean over every instance's scrapes
    waiting_max: float  # the most waiting on one instance at one scrape
    queue_time_mean_s: float  # Δ queue-time sum / Δ count, all instances


def _series(table: pa.Table, metric: str) -> dict[tuple[str, str], np.ndarray]:
    """(instance, labels) → values in scrape order, for one common metric name."""
    rows = table.filter(pc.equal(table.column("metric"), metric))
    if rows.num_rows == 0:
        return {}
    rows = rows.sort_by([("instance", "ascending"), ("labels", "ascending"), ("t_s", "ascending")])
    inst = rows.column("instance").to_pylist()
    labels = rows.column("labels").to_pylist()
    values = rows.column("value").to_numpy(zero_copy_only=False).astype(np.float64)
    out: dict[tuple[str, str], list[float]] = {}
    for key, v in zip(zip(inst, labels, strict=True), values.tolist(), strict=True):
        out.setdefault(key, []).append(v)
    return {k: np.asarray(v) for k, v in out.items()}


def _increase(values: np.ndarray) -> float:
    """A counter's increase over its samples (a drop restarts it from the new value)."""
    steps = np.diff(values)
    return float(np.where(steps >= 0, steps, values[1:]).sum()) if values.size > 1 else 0.0


def _total_increase(table: pa.Table, metric: str) -> float:
    series = _series(table, metric)
    return sum(_increase(v) for v in series.values()) if series else math.nan


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 and math.isfinite(num) else math.nan


def server_counters(table: pa.Table | None) -> ServerCounters | None:
    """The figures of a run's ``server_metrics.parquet`` (None when it has none)."""
    if table is None or table.num_rows == 0:
        return None
    waiting = np.concatenate(list(_series(table, WAITING).values()) or [np.empty(0)])
    return ServerCounters(
        instances=len(set(table.column("instance").to_pylist())),
        scrapes=len(set(table.column("t_s").to_pylist())),
        prefix_hit_rate=_ratio(_total_increase(table, HIT), _total_increase(table, QUERY)),
        prompt_tokens=_total_increase(table, PROMPT),
        prompt_tokens_computed=_total_increase(table, COMPUTED),
        waiting_mean=float(waiting.mean()) if waiting.size else math.nan,
        waiting_max=float(waiting.max()) if waiting.size else math.nan,
        queue_time_mean_s=_ratio(
            _total_increase(table, QUEUE_TIME + "_sum"),
            _total_increase(table, QUEUE_TIME + "_count"),
        ),
    )
