"""Session (agent task) metrics: task completion time and per-session SLA goodput.

A session is complete when every one of its records is ok. Its *task completion time*
is ``last end − first intended send`` over its records, so it includes think and tool
time between turns and any lateness of the first send. A session *meets the SLA* when
every one of its requests does. The metrics are declared in ``catalog.py``; this module
holds their computations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.registry import Context, MetricResult
from pddbench.harness.analysis.sla import check
from pddbench.harness.analysis.stats import ratio


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


def session_count(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """Distinct session ids among the records."""
    return float(session_groups(records).count)


def task_completion_times(records: RecordSet, ctx: Context | None = None) -> np.ndarray:
    """Per complete session (every record ok): last end − first intended send."""
    g = session_groups(records)
    complete = g.all(records.ok)
    span = g.max(records.col("end_s")) - g.min(records.col("intended_send_s"))
    return span[complete]


def sessions_met(records: RecordSet, ctx: Context) -> float:
    """How many sessions had every request meet every SLA target."""
    return float(np.count_nonzero(session_groups(records).all(check(ctx.sla, records).met)))


def session_attainment(records: RecordSet, ctx: Context, deps: Mapping[str, MetricResult]) -> float:
    """Share of sessions whose every request met every SLA target."""
    return ratio(sessions_met(records, ctx), float(session_groups(records).count))
