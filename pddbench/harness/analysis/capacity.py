"""Capacity: reading what the shared load ladder measured.

Owns the curve a report draws from a ladder verdict (:class:`CapacityCurve`, also the
form of capacity files written before the ladder) and the servers' lost scheduler time
(:func:`scheduler_lost_s`). What one point measured, in the search's terms, is the ladder
job's (:func:`pddbench.harness.jobs.ladder.measure_point`). Pure: tables in, figures out.
"""

from __future__ import annotations

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from pddbench.harness.rundir.ladder import LadderVerdict

LOST_METRIC = "pdd_scheduler_lost_seconds_total"


class CapacityPoint(BaseModel):
    """One measured run: its load and what it achieved (attainment as a fraction)."""

    model_config = ConfigDict(frozen=True)

    load_scale: float = Field(gt=0)
    attainment: float = Field(ge=0, le=1)
    goodput: float | None = None  # req/s meeting the SLA, when measured
    offered_rps: float | None = None


class CapacityCurve(BaseModel):
    """The file form of a capacity search (``capacity.json`` in a run folder)."""

    model_config = ConfigDict(extra="forbid")

    system: str
    target_pct: float = Field(gt=0, le=100)
    sla: dict[str, float | None] = {}
    points: list[CapacityPoint]
    capacity_load_scale: float | None = None
    estimate_load_scale: float | None = None


def curve_from_verdict(verdict: LadderVerdict) -> CapacityCurve:
    """The curve a report draws from a ladder verdict (every point; excluded ones too)."""
    return CapacityCurve(
        system=verdict.system,
        target_pct=verdict.target_pct,
        points=[
            CapacityPoint(
                load_scale=p.load_scale,
                attainment=p.attainment,
                goodput=p.goodput,
                offered_rps=p.offered_rps,
            )
            for p in verdict.points
        ],
        capacity_load_scale=verdict.capacity_load_scale if verdict.basis == "capacity" else None,
    )


def scheduler_lost_s(server_metrics: pa.Table | None) -> float:
    """Modelled time the servers' schedulers lost (summed over instances; last sample)."""
    if server_metrics is None or server_metrics.num_rows == 0:
        return 0.0
    names = server_metrics.column("raw_name").to_pylist()
    rows = [i for i, n in enumerate(names) if n == LOST_METRIC]
    if not rows:
        return 0.0
    inst = server_metrics.column("instance").to_pylist()
    vals = server_metrics.column("value").to_pylist()
    last: dict[str, float] = {}
    for i in rows:  # rows are in time order: the last one per instance is the total
        last[inst[i]] = float(vals[i])
    return float(sum(last.values()))
