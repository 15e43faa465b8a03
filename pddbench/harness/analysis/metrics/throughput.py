"""Counts, the run window, offered and completed request rates, token throughput.

The run window is from the first intended send to the last end over all records (the
same window for every group of a breakdown, so group rates add up to the run's rate).
Rates are NaN when the window is undefined (no records, or nothing ended). The metrics
are declared in ``catalog.py``; this module holds their computations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.registry import Compute, Context, MetricResult
from pddbench.harness.analysis.stats import ratio


def count(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """How many records."""
    return float(records.n)


def window(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """The run window in seconds (NaN when undefined)."""
    return ctx.window_s(records)


def offered_rps(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """Records / (last intended send − first intended send): the schedule's rate."""
    t = records.col("intended_send_s")
    t = t[np.isfinite(t)]
    if t.size < 2:
        return float("nan")
    return ratio(float(t.size), float(t.max() - t.min()))


def per_window(amount: Callable[[RecordSet, Context], float]) -> Compute:
    """A rate: ``amount`` of the records per second of the run window (metric ``duration``)."""

    def rate(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return ratio(amount(records, ctx), deps["duration"].value)

    return rate


def column_sum(column: str) -> Callable[[RecordSet, Context], float]:
    """The sum of one records column."""
    return lambda records, ctx: float(records.col(column).sum())
