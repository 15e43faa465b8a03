"""Resuming an interrupted run: what is settled, and the plan of what is left (sans-IO).

A run folder's journal says which requests reached an outcome before the run stopped
(Ctrl-C, SIGTERM, SIGKILL, a crash). ``pddbench replay --resume RUN`` rebuilds the same
plan from the same trace and options, keeps the settled requests as they are and sends
the rest, on the run's own timeline: the resumed clock starts where the journal ends
(``ResumePoint.elapsed_s``), so the gap while nothing ran is cut out rather than shown
as schedule lag.

* **Settled**: a record with status ok, error, timeout or skipped. A *cancelled* record
  (in flight when the run stopped) is not settled: that request is sent again, and
  finalising keeps the newer record (see :func:`pddbench.harness.rundir.records.read_journal`).
* A remaining request whose parent settled becomes due at
  ``max(resume point, parent end + think time)``; a remaining root at
  ``max(resume point, arrival)``; a remaining request whose parent also remains keeps
  waiting for it, as in any run.
* Under ``--on-error abort-session``, the remaining descendants of a parent that settled
  with a failure are returned as skipped.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pddbench.harness.config.replay import OnError
from pddbench.harness.plan.player import PlannedRequest
from pddbench.harness.rundir.records import Status

SETTLED = frozenset(
    {Status.OK, Status.ERROR, Status.TIMEOUT, Status.CENSORED, Status.SKIPPED}
)


@dataclass(frozen=True)
class Settled:
    end_s: float | None
    ok: bool


@dataclass(frozen=True)
class ResumePoint:
    """Where an interrupted run stopped, read from its journal rows."""

    elapsed_s: float  # the run's clock when its last record ended
    settled: Mapping[str, Settled]
    cancelled: int  # records superseded by this resume
    sent: int = 0  # records of requests that were sent (the count a killed run never wrote)

    @classmethod
    def from_rows(cls, rows: Iterable[Mapping[str, object]]) -> ResumePoint:
        settled: dict[str, Settled] = {}
        cancelled = 0
        sent = 0
        elapsed = 0.0
        for row in rows:
            send = row.get("actual_send_s")
            sent += isinstance(send, int | float) and math.isfinite(send)
            end = row.get("end_s")
            if isinstance(end, int | float) and math.isfinite(end):
                elapsed = max(elapsed, float(end))
            rid = str(row.get("request_id"))
            if row.get("status") in SETTLED:
                end_s = float(end) if isinstance(end, int | float) else None
                settled[rid] = Settled(end_s=end_s, ok=row.get("status") == Status.OK)
            else:
                cancelled += 1
                settled.pop(rid, None)
        return cls(elapsed_s=elapsed, settled=settled, cancelled=cancelled, sent=sent)


def remaining_plan(
    requests: Iterable[PlannedRequest],
    point: ResumePoint,
    *,
    on_error: OnError = OnError.CONTINUE,
) -> tuple[list[PlannedRequest], list[PlannedRequest]]:
    """(requests to send, requests to record as skipped) after ``point``."""
    planned = list(requests)
    by_id = {r.request_id: r for r in planned}
    remaining: list[PlannedRequest] = []
    skipped: list[PlannedRequest] = []
    failed_roots = {rid for rid, s in point.settled.items() if not s.ok}
    for req in planned:
        if req.request_id in point.settled:
            continue
        if on_error is OnError.ABORT_SESSION and _descends_from(req, by_id, failed_roots):
            skipped.append(req)
            continue
        parent = req.parent_request_id
        if parent is not None and parent in by_id and parent not in point.settled:
            remaining.append(req)  # still waits for its parent, which is sent again
            continue
        if parent is not None and parent in point.settled:
            end = point.settled[parent].end_s
            due = (end if end is not None else point.elapsed_s) + max(req.think_time_s, 0.0)
        else:
            due = req.arrival_s
        remaining.append(dataclasses.replace(req, arrival_s=max(due, point.elapsed_s)))
    return remaining, skipped


def _descends_from(
    req: PlannedRequest, by_id: Mapping[str, PlannedRequest], failed: set[str]
) -> bool:
    parent = req.parent_request_id
    seen: set[str] = set()
    while parent is not None and parent not in seen:
        if parent in failed:
            return True
        seen.add(parent)
        nxt = by_id.get(parent)
        parent = nxt.parent_request_id if nxt is not None else None
    return False
