"""PDD-specific metrics: RLD's share of output tokens, WAN traffic, handoff ITL spikes.

``relay_tokens``, ``wan_bytes`` and the pipeline come from the reference servers' ``pdd``
object and are null for servers that do not report them; the metrics then are NaN
("not reported"), never 0. A request is *relayed* when ``relay_tokens > 0`` or its
pipeline names RLD.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.registry import (
    Applies,
    Context,
    Direction,
    DistributionMetric,
    MetricResult,
    ScalarMetric,
)
from pddbench.harness.analysis.stats import ratio
from pddbench.harness.analysis.units import Unit


class RelayTokenShare(ScalarMetric):
    tag = "rld_token_share"
    header = "RLD share of output tokens"
    unit = Unit.FRACTION
    display_unit = Unit.PERCENT
    applies_to = Applies.OK
    description = "Σ relay_tokens / Σ output_tokens over ok requests that report relay_tokens"
    nan_means = "the server did not report relay_tokens (not a PDD deployment)"

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        relay = records.col("relay_tokens")
        known = np.isfinite(relay)
        if not known.any():
            return float("nan")
        return ratio(float(relay[known].sum()), float(records.col("output_tokens")[known].sum()))


class RelayedShare(ScalarMetric):
    tag = "relayed_share"
    header = "relayed requests"
    unit = Unit.FRACTION
    display_unit = Unit.PERCENT
    applies_to = Applies.OK
    description = "share of ok requests that took P→RLD→MD"
    nan_means = "no ok requests, or no pipeline information"

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        informed = np.isfinite(records.col("relay_tokens")) | (records.cat["pipeline"].codes >= 0)
        if not informed.any():
            return float("nan")
        return ratio(float(np.count_nonzero(records.relayed)), float(np.count_nonzero(informed)))


class WanBytesTotal(ScalarMetric):
    tag = "wan_bytes"
    header = "WAN bytes"
    unit = Unit.BYTES
    display_unit = Unit.GIGABYTES
    direction = Direction.LOWER
    description = "Σ wan_bytes over all records that report it (failed ones moved bytes too)"
    nan_means = "the server did not report wan_bytes"

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        b = records.col("wan_bytes")
        known = np.isfinite(b)
        return float(b[known].sum()) if known.any() else float("nan")


class WanBytesRequest(DistributionMetric):
    tag = "wan_bytes_req"
    header = "WAN bytes per request"
    unit = Unit.BYTES
    display_unit = Unit.GIGABYTES
    applies_to = Applies.OK
    direction = Direction.LOWER
    description = "wan_bytes of each ok request that reports it"
    nan_means = "the server did not report wan_bytes"
    column = "wan_bytes"


class WanBandwidth(ScalarMetric):
    tag = "wan_bandwidth"
    header = "effective WAN bandwidth"
    unit = Unit.BIT_PER_S
    display_unit = Unit.GBIT_PER_S
    requires = ("wan_bytes", "duration")
    description = "8 × Σ wan_bytes / run window: the average WAN rate the run needed"
    nan_means = "wan_bytes not reported, or the run window is undefined"

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return ratio(8.0 * deps["wan_bytes"].value, deps["duration"].value)


class HandoffITLMax(DistributionMetric):
    tag = "handoff_itl_max"
    header = "max ITL, relayed requests"
    unit = Unit.SECONDS
    display_unit = Unit.MILLISECONDS
    applies_to = Applies.OK_RELAYED
    direction = Direction.LOWER
    description = "per relayed ok request: its largest inter-token interval (the handoff seam)"
    nan_means = "no relayed ok requests"
    min_change = 0.001
    column = "itl_max_s"


class DirectITLMax(DistributionMetric):
    tag = "direct_itl_max"
    header = "max ITL, direct requests"
    unit = Unit.SECONDS
    display_unit = Unit.MILLISECONDS
    applies_to = Applies.OK_DIRECT
    direction = Direction.LOWER
    description = "per ok request not relayed: its largest inter-token interval"
    nan_means = "every ok request was relayed, or none is ok"
    min_change = 0.001
    column = "itl_max_s"


class HandoffSpike(ScalarMetric):
    tag = "handoff_spike"
    header = "handoff ITL spike"
    unit = Unit.RATIO
    direction = Direction.LOWER
    requires = ("handoff_itl_max", "direct_itl_max")
    description = "median max-ITL of relayed requests ÷ median max-ITL of direct requests"
    nan_means = "no relayed or no direct ok requests"

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return ratio(deps["handoff_itl_max"].get("p50"), deps["direct_itl_max"].get("p50"))
