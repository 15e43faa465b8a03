"""What the Locust master knows about its workers, and its verdict on a run (pure).

Owns :class:`WorkerState` (per worker: clock samples and estimate, shard, records
received, liveness, CPU readings) and :func:`judge_run`, which says whether a run is
*incomplete* (a worker lost with work in hand, a shard cut short, records missing) or
*suspect* (a worker's or the master's CPU saturated, so its times describe the client).

Must not: send messages, read clocks, or print (the master's coordinator does that).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from pddbench.harness.drive.locust.clock_sync import ClockEstimate, ClockSample
from pddbench.harness.drive.locust.cpu import SATURATION_THRESHOLD, cpu_verdict
from pddbench.harness.drive.locust.sharding import ShardSummary


@dataclass
class WorkerState:
    """What the master knows about one worker."""

    client_id: str
    index: int
    samples: list[ClockSample] = field(default_factory=list)
    clock: ClockEstimate | None = None
    origin_worker_s: float | None = None  # the worker's monotonic reading at the run origin
    shard: ShardSummary | None = None
    host: str | None = None
    pid: int | None = None
    ready: bool = False
    started: bool = False
    done: bool = False
    cancelled: bool = False
    lost: str | None = None
    records: int = 0
    reported_records: int | None = None
    last_seen: float = 0.0  # master monotonic time of its latest message
    cpu: list[float] = field(default_factory=list)
    stopped_at_s: float | None = None  # duration cap reached (master run clock)
    cpu_s: float | None = None  # process CPU seconds while driving the shard
    wall_s: float | None = None
    sent: int = 0
    completed: int = 0
    errors: int = 0
    in_flight: int = 0

    @property
    def active(self) -> bool:
        return not self.done and self.lost is None

    def report(self) -> dict[str, object]:
        verdict = cpu_verdict(self.cpu)
        return {
            "id": self.client_id,
            "index": self.index,
            "host": self.host,
            "pid": self.pid,
            "shard": None if self.shard is None else self.shard.__dict__,
            "records": self.records,
            "reported_records": self.reported_records,
            "sent": self.sent,
            "stopped_at_s": self.stopped_at_s,
            "done": self.done,
            "cancelled": self.cancelled,
            "lost": self.lost,
            "clock": None if self.clock is None else self.clock.as_dict(),
            "origin_worker_monotonic_s": self.origin_worker_s,
            "cpu": verdict.as_dict(),
            "cpu_s": self.cpu_s,
            "wall_s": self.wall_s,
        }


@dataclass(frozen=True)
class RunVerdicts:
    incomplete: list[str]
    suspect: list[str]
    notes: list[str]


def cap_hit(workers: Iterable[WorkerState]) -> float | None:
    """When the duration cap stopped new sends (the latest worker), None if it did not."""
    hits = [w.stopped_at_s for w in workers if w.stopped_at_s is not None]
    return max(hits) if hits else None


def judge_run(
    workers: Sequence[WorkerState],
    *,
    planned: int,
    master_cpu: Sequence[float],
    interrupted: bool,
    failure: str | None,
    cpu_threshold: float = SATURATION_THRESHOLD,
) -> RunVerdicts:
    """Why a run is incomplete or suspect (empty lists: neither)."""
    incomplete: list[str] = []
    suspect: list[str] = []
    notes: list[str] = []
    for w in workers:
        name = f"worker {w.index} ({w.host or w.client_id})"
        if w.lost and w.shard is None:  # lost before it was given work: nothing missing
            notes.append(f"{name} left out: {w.lost}")
        elif w.lost:
            incomplete.append(f"{name} lost: {w.lost}")
        elif w.cancelled and not interrupted:
            incomplete.append(f"{name} stopped before finishing its shard")
        if w.reported_records is not None and w.reported_records != w.records:
            incomplete.append(
                f"{name} shipped {w.reported_records} records, master received {w.records}"
            )
        verdict = cpu_verdict(w.cpu, threshold=cpu_threshold)
        if verdict.saturated:
            suspect.append(
                f"{name} client CPU saturated in {verdict.saturated_intervals} of "
                f"{verdict.intervals} s (max {verdict.max_fraction:.0%} of a core)"
            )
    master = cpu_verdict(master_cpu, threshold=cpu_threshold)
    if master.saturated:
        suspect.append(f"master CPU saturated (max {master.max_fraction:.0%} of a core)")
    received = sum(w.records for w in workers)
    if received < planned and not interrupted and cap_hit(workers) is None:
        incomplete.append(f"{planned - received} planned requests have no record")
    if failure:
        incomplete.append(failure)
    return RunVerdicts(incomplete, suspect, notes)
