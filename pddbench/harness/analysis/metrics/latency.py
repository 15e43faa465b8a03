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
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pddbench.harness.analysis.recordset import RecordSet, list_intervals
from pddbench.harness.analysis.registry import (
    Applies,
    Context,
    Direction,
    DistributionMetric,
    MetricResult,
    ScalarMetric,
)
from pddbench.harness.analysis.units import Unit


class TTFT(DistributionMetric):
    tag = "ttft"
    header = "TTFT"
    unit = Unit.SECONDS
    display_unit = Unit.MILLISECONDS
    applies_to = Applies.OK
    direction = Direction.LOWER
    description = "time to first token: first token-carrying chunk − actual send, per ok request"
    nan_means = "no ok request produced a token"
    min_change = 0.005
    column = "ttft_s"


class TPOT(DistributionMetric):
    tag = "tpot"
    header = "TPOT"
    unit = Unit.SECONDS
    display_unit = Unit.MILLISECONDS
    applies_to = Applies.OK
    direction = Direction.LOWER
    description = (
        "time per output token after the first: (last − first token) / (output tokens − 1), "
        "per ok request with at least 2 output tokens"
    )
    nan_means = "no ok request with 2 or more output tokens"
    min_change = 0.0005
    column = "tpot_s"


def token_intervals(records: RecordSet) -> np.ndarray:
    """Every inter-token interval of the records that carry ``token_times_s`` (pooled)."""
    return list_intervals(records.token_times)


class ITL(DistributionMetric):
    tag = "itl"
    header = "ITL (token-level)"
    unit = Unit.SECONDS
    display_unit = Unit.MILLISECONDS
    applies_to = Applies.OK
    direction = Direction.LOWER
    description = (
        "every inter-token interval of every ok request, pooled (each token counts once); "
        "needs token_times_s"
    )
    nan_means = "token_times_s was not recorded (see itl_mean, itl_req_p99)"
    min_change = 0.0005

    def values(self, records: RecordSet, ctx: Context) -> np.ndarray:
        return token_intervals(records)


class ITLMean(ScalarMetric):
    tag = "itl_mean"
    header = "ITL mean (token-weighted)"
    unit = Unit.SECONDS
    display_unit = Unit.MILLISECONDS
    applies_to = Applies.OK
    direction = Direction.LOWER
    description = "Σ(last − first token) / Σ(output tokens − 1) over ok requests"
    nan_means = "no ok request with 2 or more output tokens"
    min_change = 0.0005

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        span = records.col("last_token_s") - records.col("first_token_s")
        gaps = records.col("output_tokens") - 1
        use = np.isfinite(span) & (gaps >= 1)
        total = float(gaps[use].sum())
        return float(span[use].sum()) / total if total else float("nan")


class ITLRequestP99(DistributionMetric):
    tag = "itl_req_p99"
    header = "per-request P99 ITL"
    unit = Unit.SECONDS
    display_unit = Unit.MILLISECONDS
    applies_to = Applies.OK
    direction = Direction.LOWER
    description = (
        "one value per ok request: its own P99 inter-token interval; percentiles are over "
        "requests, not tokens"
    )
    nan_means = "no ok request with 2 or more output tokens"
    min_change = 0.0005
    column = "itl_p99_s"


class ITLRequestMax(DistributionMetric):
    tag = "itl_req_max"
    header = "per-request max ITL"
    unit = Unit.SECONDS
    display_unit = Unit.MILLISECONDS
    applies_to = Applies.OK
    direction = Direction.LOWER
    description = "one value per ok request: its largest inter-token interval (stalls, seams)"
    nan_means = "no ok request with 2 or more output tokens"
    min_change = 0.001
    column = "itl_max_s"


class E2E(DistributionMetric):
    tag = "e2e"
    header = "E2E latency"
    unit = Unit.SECONDS
    applies_to = Applies.OK
    direction = Direction.LOWER
    description = "end of the response − actual send, per ok request"
    nan_means = "no ok requests"
    min_change = 0.01
    column = "e2e_s"


class ClientQueue(DistributionMetric):
    tag = "client_queue"
    header = "client queueing"
    unit = Unit.SECONDS
    display_unit = Unit.MILLISECONDS
    applies_to = Applies.SENT
    direction = Direction.LOWER
    description = "time a sent request waited for the client's concurrency cap (0 without one)"
    nan_means = "nothing was sent"
    min_change = 0.001
    column = "client_queue_s"


class ScheduleLag(DistributionMetric):
    tag = "schedule_lag"
    header = "schedule lag"
    unit = Unit.SECONDS
    display_unit = Unit.MILLISECONDS
    applies_to = Applies.SENT
    direction = Direction.LOWER
    description = (
        "actual send − intended send − client queueing, per sent request: how late the engine "
        "was beyond any wait for the concurrency cap (large values: an overloaded client)"
    )
    nan_means = "nothing was sent"
    min_change = 0.001

    def values(self, records: RecordSet, ctx: Context) -> np.ndarray:
        return records.schedule_lag_s
