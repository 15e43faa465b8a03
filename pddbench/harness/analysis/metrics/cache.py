"""Prefix-cache metrics: hit rate and cache fidelity (server-reported vs theoretical).

The theoretical cached tokens come from the trace's prefix structure (an unbounded or
capacity-limited prefix cache replayed in arrival order); the reported ones from the
server's ``usage.prompt_tokens_details.cached_tokens``. Fidelity 1.0 means the server's
cache behaved like the model; below 1, it hit less (evictions, a cold or partitioned
cache); above 1, more. The metrics are declared in ``catalog.py``; this module holds
their computations.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.registry import Context, MetricResult
from pddbench.harness.analysis.stats import ratio


def _both(records: RecordSet) -> tuple[np.ndarray, np.ndarray]:
    rep = records.col("cached_tokens_reported")
    theo = records.col("cached_tokens_theoretical")
    use = np.isfinite(rep) & np.isfinite(theo)
    return rep[use], theo[use]


def hit_rates(records: RecordSet, ctx: Context) -> np.ndarray:
    """Per record: its prefix hit rate (NaN where unknown)."""
    return records.hit_rate


def token_hit_rate(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """Σ cached tokens / Σ input tokens over the records with a known hit rate."""
    rate = records.hit_rate
    use = np.isfinite(rate)
    inp = records.col("input_tokens")[use]
    return ratio(float((rate[use] * inp).sum()), float(inp.sum()))


def fidelity(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """Σ reported cached tokens / Σ theoretical, over the records with both known."""
    rep, theo = _both(records)
    return ratio(float(rep.sum()), float(theo.sum()))


def fidelity_per_request(records: RecordSet, ctx: Context) -> np.ndarray:
    """Reported / theoretical, per record with both known and a theoretical hit."""
    rep, theo = _both(records)
    pos = theo > 0
    return rep[pos] / theo[pos]


def exact_share(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """Share of the records (both values known) whose reported == theoretical."""
    rep, theo = _both(records)
    return ratio(float(np.count_nonzero(rep == theo)), float(rep.size))
