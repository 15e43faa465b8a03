"""Prefix-cache metrics: hit rate and cache fidelity (server-reported vs theoretical).

The theoretical cached tokens come from the trace's prefix structure (an unbounded or
capacity-limited prefix cache replayed in arrival order); the reported ones from the
server's ``usage.prompt_tokens_details.cached_tokens``. Fidelity 1.0 means the server's
cache behaved like the model; below 1, it hit less (evictions, a cold or partitioned
cache); above 1, more.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.registry import (
    Applies,
    Context,
    DistributionMetric,
    MetricResult,
    ScalarMetric,
)
from pddbench.harness.analysis.stats import ratio
from pddbench.harness.analysis.units import Unit


def _both(records: RecordSet) -> tuple[np.ndarray, np.ndarray]:
    rep = records.col("cached_tokens_reported")
    theo = records.col("cached_tokens_theoretical")
    use = np.isfinite(rep) & np.isfinite(theo)
    return rep[use], theo[use]


class HitRate(DistributionMetric):
    tag = "hit_rate"
    header = "prefix hit rate"
    unit = Unit.FRACTION
    display_unit = Unit.PERCENT
    description = (
        "per request: cached_tokens_theoretical / input_tokens (reported where the "
        "theoretical value is missing)"
    )
    nan_means = "no request with known cached tokens"

    def values(self, records: RecordSet, ctx: Context) -> np.ndarray:
        return records.hit_rate


class TokenHitRate(ScalarMetric):
    tag = "token_hit_rate"
    header = "token-weighted hit rate"
    unit = Unit.FRACTION
    display_unit = Unit.PERCENT
    description = "Σ cached tokens / Σ input tokens over requests with a known hit rate"
    nan_means = "no request with known cached tokens"

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        rate = records.hit_rate
        use = np.isfinite(rate)
        inp = records.col("input_tokens")[use]
        return ratio(float((rate[use] * inp).sum()), float(inp.sum()))


class CacheFidelity(ScalarMetric):
    tag = "cache_fidelity"
    header = "cache fidelity"
    unit = Unit.RATIO
    applies_to = Applies.OK
    description = "Σ reported cached tokens / Σ theoretical, over ok requests with both known"
    nan_means = "the server did not report cached tokens, or the trace has none"

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        rep, theo = _both(records)
        return ratio(float(rep.sum()), float(theo.sum()))


class CacheFidelityRequest(DistributionMetric):
    tag = "cache_fidelity_req"
    header = "cache fidelity per request"
    unit = Unit.RATIO
    applies_to = Applies.OK
    description = "per ok request with theoretical cached tokens > 0: reported / theoretical"
    nan_means = "no ok request with both values known and a theoretical hit"

    def values(self, records: RecordSet, ctx: Context) -> np.ndarray:
        rep, theo = _both(records)
        pos = theo > 0
        return rep[pos] / theo[pos]


class CacheExactShare(ScalarMetric):
    tag = "cache_exact_share"
    header = "cached tokens exact"
    unit = Unit.FRACTION
    display_unit = Unit.PERCENT
    applies_to = Applies.OK
    description = "share of ok requests (both values known) whose reported == theoretical"
    nan_means = "no ok request with both values known"

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        rep, theo = _both(records)
        return ratio(float(np.count_nonzero(rep == theo)), float(rep.size))
