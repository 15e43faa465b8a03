"""Counts, the run window, offered and completed request rates, token throughput.

The run window is from the first intended send to the last end over all records (the
same window for every group of a breakdown, so group rates add up to the run's rate).
Rates are NaN when the window is undefined (no records, or nothing ended).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.registry import (
    Applies,
    Context,
    Direction,
    MetricResult,
    ScalarMetric,
)
from pddbench.harness.analysis.stats import ratio
from pddbench.harness.analysis.units import Unit


class Requests(ScalarMetric):
    tag = "requests"
    header = "requests"
    unit = Unit.REQUESTS
    description = "records of any status (skipped ones included)"
    nan_means = "never NaN (0 for an empty run)"

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return float(records.n)


class OkRequests(ScalarMetric):
    tag = "ok_requests"
    header = "ok requests"
    unit = Unit.REQUESTS
    applies_to = Applies.OK
    description = "records with status ok"
    nan_means = "never NaN"

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return float(records.n)


class Duration(ScalarMetric):
    tag = "duration"
    header = "run window"
    unit = Unit.SECONDS
    description = "first intended send to last end, over all records"
    nan_means = "no records, or none ended"

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return ctx.window_s(records)


class OfferedRPS(ScalarMetric):
    tag = "offered_rps"
    header = "offered load"
    unit = Unit.REQ_PER_S
    description = "records / (last intended send − first intended send): the schedule's rate"
    nan_means = "fewer than two records, or all intended at the same instant"

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        t = records.col("intended_send_s")
        t = t[np.isfinite(t)]
        if t.size < 2:
            return float("nan")
        return ratio(float(t.size), float(t.max() - t.min()))


class CompletedRPS(ScalarMetric):
    tag = "completed_rps"
    header = "completed RPS"
    unit = Unit.REQ_PER_S
    applies_to = Applies.OK
    direction = Direction.HIGHER
    requires = ("duration",)
    description = "ok requests per second of the run window"
    nan_means = "the run window is undefined (empty run)"
    min_change = 0.01

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return ratio(float(records.n), deps["duration"].value)


class OutputTokenThroughput(ScalarMetric):
    tag = "output_tps"
    header = "output token throughput"
    unit = Unit.TOK_PER_S
    applies_to = Applies.OK
    direction = Direction.HIGHER
    requires = ("duration",)
    description = "output tokens of ok requests per second of the run window"
    nan_means = "the run window is undefined (empty run)"
    min_change = 1.0

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return ratio(float(records.col("output_tokens").sum()), deps["duration"].value)


class InputTokenThroughput(ScalarMetric):
    tag = "input_tps"
    header = "input token throughput"
    unit = Unit.TOK_PER_S
    applies_to = Applies.OK
    direction = Direction.HIGHER
    requires = ("duration",)
    description = "prompt tokens (cached ones included) of ok requests per second of the window"
    nan_means = "the run window is undefined (empty run)"
    min_change = 1.0

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return ratio(float(records.col("input_tokens").sum()), deps["duration"].value)
