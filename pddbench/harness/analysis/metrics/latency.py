"""Latency metrics: TTFT, TPOT, inter-token latency (three views), E2E, queueing, lag.

What each ITL metric means — they are different numbers, do not compare one with another:

* ``itl`` — token-level: every inter-token interval of every ok request, pooled, so each
  token counts once and ``itl.p99`` is the true 99th percentile over tokens. Needs the
  per-token times (``token_times_s``); without them it has no values (count 0).
* ``itl_mean`` — token-weighted mean interval, exact without per-token times:
  ``Σ(last_token − first_token) / Σ(output_tokens − 1)`` over ok requests.
* ``itl_req_p99`` — one value per request: that request's own P99 interval
  (``itl_p99_s``). Its ``p99`` is the P99 over requests of per-request P99s, which is
  *not* the token-level P99 (long requests and short ones weigh the same).
* ``itl_req_max`` — each request's largest interval (stalls, handoff seams).

A chunk carrying k tokens contributes k intervals (its gap split evenly; extra tokens in
the first chunk contribute 0 s intervals) — see ``harness/drive/stream.py``.

The metrics themselves are declared in ``catalog.py``; this module holds the
computations that are more than reading one records column.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pddbench.harness.analysis.recordset import RecordSet, list_intervals
from pddbench.harness.analysis.registry import Context, MetricResult


def token_intervals(records: RecordSet, ctx: Context) -> np.ndarray:
    """Every inter-token interval of the records that carry ``token_times_s`` (pooled)."""
    return list_intervals(records.token_times)


def itl_mean(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """Σ(last − first token) / Σ(output tokens − 1), over records with 2 or more tokens."""
    span = records.col("last_token_s") - records.col("first_token_s")
    gaps = records.col("output_tokens") - 1
    use = np.isfinite(span) & (gaps >= 1)
    total = float(gaps[use].sum())
    return float(span[use].sum()) / total if total else float("nan")
