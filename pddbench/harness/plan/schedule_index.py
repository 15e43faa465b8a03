"""The trace's planned send schedule, indexed once (sans-IO).

A ladder point is sized and aimed from the trace itself: how many requests a point at
load scale ``x`` starting at trace time ``t`` would send in ``send_s`` wall seconds, and
when (:data:`~pddbench.harness.plan.ladder_points.Schedule`). The ladder asks this many
times per point (it searches for the load scale that offers a rung's rate), and
:func:`~pddbench.harness.plan.sessions.plan_requests` walks the whole table each call, so
:class:`ScheduleIndex` does the per-trace work once (task groups, group starts, the
sample) and answers each query with a binary search over the groups' starts. Its offsets
are the ``arrival_s`` that ``plan_requests`` gives the same window (same selection rules:
whole task groups that start in the window, the sample, the request cap; starts
compressed ``speedup``, think times real). No I/O.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pddbench.harness.config.replay import Selection
from pddbench.harness.plan.sessions import task_groups
from pddbench.workloads.materialize import stable_hash64
from pddbench.workloads.schema import Col


class ScheduleIndex:
    """Planned send offsets of any trace window at any speed-up, for one base selection
    (its ``sample``, ``seed`` and ``max_requests``; its window and speed-up are the query's)."""

    def __init__(self, table: pa.Table, selection: Selection) -> None:
        self.max_requests = selection.max_requests
        if table.num_rows == 0:
            self._start = self._delta = np.zeros(0)
            self._group = np.zeros(0, dtype=np.int64)
            return
        groups = task_groups(table).astype(str)
        arrival = table.column(Col.ARRIVAL).to_numpy(zero_copy_only=False).astype(np.float64)
        unique, idx = np.unique(groups, return_inverse=True)
        start = np.full(unique.size, np.inf)
        np.minimum.at(start, idx, arrival)
        keep = np.ones(unique.size, dtype=bool)
        if selection.sample < 1.0:
            threshold = selection.sample * 2.0**64
            draws = np.array([stable_hash64(f"{selection.seed}:{g}") for g in unique])
            keep &= draws.astype(np.float64) < threshold
        rows = np.flatnonzero(keep[idx])
        # rows in the order plan_requests keeps groups: by start, ties by group id
        order = np.lexsort((idx[rows], start[idx[rows]]))
        rows = rows[order]
        self._group = idx[rows]
        self._start = start[self._group]
        self._delta = arrival[rows] - self._start

    def offsets(
        self, start_s: float, speedup: float, duration_s: float, send_s: float
    ) -> list[float]:
        """Sorted planned send offsets (< ``send_s``) of the groups starting in
        ``[start_s, start_s + duration_s)`` with their starts compressed ``speedup``."""
        lo, hi = np.searchsorted(self._start, [start_s, start_s + duration_s], side="left")
        group, gstart, delta = self._group[lo:hi], self._start[lo:hi], self._delta[lo:hi]
        if self.max_requests is not None and group.size:
            firsts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
            sizes = np.diff(np.r_[firsts, group.size])
            allowed = max(1, int(np.searchsorted(np.cumsum(sizes), self.max_requests, "right")))
            cut = group.size if allowed >= firsts.size else firsts[allowed]
            gstart, delta = gstart[:cut], delta[:cut]
        rel = (gstart - start_s) / speedup + delta
        return np.sort(rel[rel < send_s]).tolist()
