"""Session (agent task) metrics: task completion time and per-session SLA goodput.

A session is complete when every one of its records is ok. Its *task completion time*
is ``last end − first intended send`` over its records, so it includes think and tool
time between turns and any lateness of the first send. A session *meets the SLA* when
every one of its requests does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.registry import (
    Context,
    Direction,
    DistributionMetric,
    MetricResult,
    ScalarMetric,
)
from pddbench.harness.analysis.sla import check
from pddbench.harness.analysis.stats import ratio
from pddbench.harness.analysis.units import Unit


@dataclass(frozen=True)
class SessionGroups:
    """Records sorted by session: ``order`` (row order) and ``starts`` of each session."""

    order: np.ndarray
    starts: np.ndarray

    @property
    def count(self) -> int:
        return int(self.starts.size)

    def all(self, mask: np.ndarray) -> np.ndarray:
        """Per session: is ``mask`` true for every record?"""
        return (
            np.logical_and.reduceat(mask[self.order], self.starts)
            if self.count
            else np.zeros(0, dtype=bool)
        )

    def min(self, values: np.ndarray) -> np.ndarray:
        return np.fmin.reduceat(values[self.order], self.starts) if self.count else np.empty(0)

    def max(self, values: np.ndarray) -> np.ndarray:
        return np.fmax.reduceat(values[self.order], self.starts) if self.count else np.empty(0)


def session_groups(records: RecordSet) -> SessionGroups:
    codes = records.cat["session_id"].codes
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = (
        np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
        if codes.size
        else np.empty(0, dtype=np.int64)
    )
    return SessionGroups(order, starts)


class Sessions(ScalarMetric):
    tag = "sessions"
    header = "sessions"
    unit = Unit.SESSIONS
    description = "distinct session ids among the records"
    nan_means = "never NaN"

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        return float(session_groups(records).count)


class TaskCompletion(DistributionMetric):
    tag = "task_completion"
    header = "task completion time"
    unit = Unit.SECONDS
    direction = Direction.LOWER
    description = (
        "per complete session (every request ok): last end − first intended send, "
        "tool/think time included"
    )
    nan_means = "no complete session"
    min_change = 0.1

    def values(self, records: RecordSet, ctx: Context) -> np.ndarray:
        g = session_groups(records)
        complete = g.all(records.ok)
        span = g.max(records.col("end_s")) - g.min(records.col("intended_send_s"))
        return span[complete]


class SessionSlaAttainment(ScalarMetric):
    tag = "session_sla_attainment"
    header = "sessions meeting SLA"
    unit = Unit.FRACTION
    display_unit = Unit.PERCENT
    direction = Direction.HIGHER
    description = "share of sessions whose every request met every SLA target"
    nan_means = "no sessions"
    min_change = 0.005

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        g = session_groups(records)
        return ratio(float(np.count_nonzero(g.all(check(ctx.sla, records).met))), float(g.count))


class SessionGoodput(ScalarMetric):
    tag = "session_goodput"
    header = "session goodput"
    unit = Unit.SESSIONS_PER_S
    direction = Direction.HIGHER
    requires = ("duration",)
    description = "sessions whose every request met the SLA, per second of the run window"
    nan_means = "the run window is undefined (empty run)"
    min_change = 0.001

    def compute(self, records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
        g = session_groups(records)
        met = float(np.count_nonzero(g.all(check(ctx.sla, records).met)))
        return ratio(met, deps["duration"].value)
