"""PDD-specific metrics: RLD's share of output tokens, WAN traffic, handoff ITL spikes.

``relay_tokens``, ``wan_bytes`` and the pipeline come from the reference servers' ``pdd``
object and are null for servers that do not report them; the metrics then are NaN
("not reported"), never 0. A request is *relayed* when ``relay_tokens > 0`` or its
pipeline names RLD. The metrics are declared in ``catalog.py``; this module holds their
computations.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.registry import Context, MetricResult
from pddbench.harness.analysis.stats import ratio


def relay_token_share(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """Σ relay_tokens / Σ output_tokens over the records that report relay_tokens."""
    relay = records.col("relay_tokens")
    known = np.isfinite(relay)
    if not known.any():
        return float("nan")
    return ratio(float(relay[known].sum()), float(records.col("output_tokens")[known].sum()))


def relayed_share(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """Share of the records with pipeline information that were relayed."""
    informed = np.isfinite(records.col("relay_tokens")) | (records.cat["pipeline"].codes >= 0)
    if not informed.any():
        return float("nan")
    return ratio(float(np.count_nonzero(records.relayed)), float(np.count_nonzero(informed)))


def wan_bytes_total(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """Σ wan_bytes over the records that report it."""
    b = records.col("wan_bytes")
    known = np.isfinite(b)
    return float(b[known].sum()) if known.any() else float("nan")


def wan_bandwidth(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """8 × Σ wan_bytes (metric ``wan_bytes``) per second of the run window (``duration``)."""
    return ratio(8.0 * deps["wan_bytes"].value, deps["duration"].value)


def handoff_spike(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """Median max-ITL of relayed requests ÷ median max-ITL of direct requests."""
    return ratio(deps["handoff_itl_max"].get("p50"), deps["direct_itl_max"].get("p50"))
