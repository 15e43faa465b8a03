"""Turning a trace into a replay plan: selection of whole sessions and their timing inputs.

Sans-IO: reads an Arrow trace table, returns :class:`PlannedRequest` objects for the
:class:`~pddbench.harness.plan.player.SessionPlayer`.

Selection always keeps **whole task groups**: a session together with its sub-agent
sessions (linked by ``parent_session_id``). A group's start is the arrival of its
earliest request.

* ``window=(start_s, duration_s)``: groups that start inside the window (their later
  turns are kept even when they run past its end — a replay follows a task to its end).
* ``sample``: a deterministic fraction of groups (stable hash of the group id and seed).
* ``max_requests``: groups in start order until adding the next would exceed the cap
  (at least one group is kept).
* ``speedup``: group start offsets (relative to the window start) are divided by it;
  think times between turns are real tool times and are *not* compressed.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from pddbench.harness.config.replay import Selection, ThinkPolicy
from pddbench.harness.plan.player import PlannedRequest
from pddbench.workloads.materialize import stable_hash64
from pddbench.workloads.schema import Col


def task_groups(table: pa.Table) -> np.ndarray:
    """The top-level session id of every row (sub-agent sessions map to their root)."""
    sessions = table.column(Col.SESSION_ID).to_pylist()
    parents = table.column(Col.PARENT_SESSION_ID).to_pylist()
    parent_of: dict[str, str] = {}
    for s, p in zip(sessions, parents, strict=True):
        if p is not None and p != s:
            parent_of[s] = p

    def root(s: str) -> str:
        seen = {s}
        while s in parent_of:
            s = parent_of[s]
            if s in seen:  # a cycle: treat the session as its own root
                break
            seen.add(s)
        return s

    roots = {s: root(s) for s in set(sessions)}
    return np.array([roots[s] for s in sessions], dtype=object)


def plan_requests(
    table: pa.Table, selection: Selection, *, think_policy: ThinkPolicy = ThinkPolicy.TRACE
) -> list[PlannedRequest]:
    """The selected requests with arrival offsets relative to the replay's start."""
    n = table.num_rows
    if n == 0:
        return []
    groups = task_groups(table)
    arrival = table.column(Col.ARRIVAL).to_numpy(zero_copy_only=False).astype(np.float64)
    unique_groups, group_idx = np.unique(groups.astype(str), return_inverse=True)
    group_start = np.full(unique_groups.size, np.inf)
    np.minimum.at(group_start, group_idx, arrival)
    group_size = np.bincount(group_idx, minlength=unique_groups.size)

    keep = np.ones(unique_groups.size, dtype=bool)
    origin = float(group_start.min())
    if selection.window_start_s is not None:
        origin = selection.window_start_s
        keep &= group_start >= origin
    if selection.window_duration_s is not None:
        keep &= group_start < origin + selection.window_duration_s
    if selection.sample < 1.0:
        threshold = selection.sample * 2.0**64
        draws = np.array(
            [stable_hash64(f"{selection.seed}:{g}") for g in unique_groups], dtype=np.float64
        )
        keep &= draws < threshold
    if selection.max_requests is not None:
        order = np.flatnonzero(keep)[np.argsort(group_start[keep], kind="stable")]
        total = np.cumsum(group_size[order])
        allowed = max(1, int(np.searchsorted(total, selection.max_requests, side="right")))
        keep[:] = False
        keep[order[:allowed]] = True

    rows = np.flatnonzero(keep[group_idx])
    ids = table.column(Col.REQUEST_ID).to_pylist()
    parent_ids = table.column(Col.PARENT_REQUEST_ID).to_pylist()
    think = table.column(Col.THINK_TIME).to_numpy(zero_copy_only=False).astype(np.float64)
    arrival_of = dict(zip(ids, arrival.tolist(), strict=True))
    sessions = table.column(Col.SESSION_ID).to_pylist()
    turns = table.column(Col.TURN_INDEX).to_numpy(zero_copy_only=False)
    input_length = table.column(Col.INPUT_LENGTH).to_numpy(zero_copy_only=False)
    output_length = table.column(Col.OUTPUT_LENGTH).to_numpy(zero_copy_only=False)
    agents = (
        table.column(Col.AGENT_TYPE).to_pylist()
        if Col.AGENT_TYPE in table.column_names
        else [None] * table.num_rows
    )

    planned: list[PlannedRequest] = []
    for row in rows.tolist():
        parent = parent_ids[row]
        g = group_idx[row]
        relative = (group_start[g] - origin) / selection.speedup + (arrival[row] - group_start[g])
        planned.append(
            PlannedRequest(
                request_id=ids[row],
                session_id=sessions[row],
                turn_index=int(turns[row]),
                row=row,
                parent_request_id=parent,
                arrival_s=float(relative),
                think_time_s=think_time(
                    think[row],
                    arrival[row],
                    arrival_of.get(parent) if parent else None,
                    think_policy,
                ),
                input_length=int(input_length[row]),
                output_length=int(output_length[row]),
                agent_type=agents[row],
            )
        )
    planned.sort(key=lambda r: (r.arrival_s, r.request_id))
    return planned


def think_time(
    trace_think: float, arrival: float, parent_arrival: float | None, policy: ThinkPolicy
) -> float:
    """A turn's wait after its parent completes, under ``policy`` (0 without a parent)."""
    if policy is ThinkPolicy.ZERO or parent_arrival is None:
        return 0.0
    if policy is ThinkPolicy.TRACE and np.isfinite(trace_think):
        return max(0.0, float(trace_think))
    return max(0.0, arrival - parent_arrival)
