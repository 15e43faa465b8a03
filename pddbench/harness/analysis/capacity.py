"""Capacity: reading what the shared load ladder measured.

Owns :func:`measure_point` — what one load point of the ladder
(:mod:`pddbench.harness.plan.ladder`, the one capacity search) measured, warm-up
excluded: per-criterion attainment, schedule lag, the servers' lost scheduler time — and
the curve a report draws (:class:`CapacityCurve`, also the form of capacity files written
before the ladder). Pure: records and tables in, figures out.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.sla import SLA, check
from pddbench.harness.plan.ladder import PointHealth, PointMeasure
from pddbench.harness.plan.ladder_points import LadderSettings, PointWindow
from pddbench.harness.plan.ladder_verdict import LadderVerdict

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


def measure_point(
    records: RecordSet,
    sla: SLA,
    window: PointWindow,
    settings: LadderSettings,
    *,
    lost_s: float = 0.0,
    emulated: bool,
    probes_on: bool,
) -> PointMeasure:
    """One ladder point's figures: requests intended in ``[warmup, warmup + measured)``
    (the window's own measured time: powered points differ in length)."""
    n = records.num
    intended = n["intended_send_s"]
    start, end = window.warmup_s, window.send_s
    sent = records.sent
    in_window = sent & (intended >= start) & (intended < end)
    warm = sent & (intended < start)
    sc = check(sla, records)
    bound = sla.e2e_bound(n["expected_output_tokens"])
    could_still_meet = (
        np.ones(records.n, dtype=bool)
        if bound is None
        else np.asarray(bound >= settings.request_limit_s) & np.ones(records.n, dtype=bool)
    )
    # cut by the request limit (run folders before the censored status recorded such a
    # cut as a timeout, so a timeout that could still have met its bound counts too)
    cut = records.censored | records.cat["status"].equals("timeout")
    censored = in_window & cut & could_still_meet
    measured = in_window & ~censored
    lag = records.schedule_lag_s[measured]
    lag = lag[np.isfinite(lag)]
    count = int(measured.sum())
    return PointMeasure(
        window=window,
        requests=count,
        met=int((sc.met & measured).sum()),
        met_by={
            "ttft": int((sc.ttft_ok & measured).sum()),
            "tpot": int((sc.tpot_ok & measured).sum()),
            "e2e": int((sc.e2e_ok & measured).sum()),
        },
        warmup_excluded=int(warm.sum()),
        censored=int(censored.sum()),
        measured_s=window.measure_s,
        offered_rps=count / window.measure_s,
        health=PointHealth(
            schedule_lag_p99_s=float(np.percentile(lag, 99)) if lag.size else None,
            scheduler_lost_s=lost_s,
            emulated=emulated,
            probes_on=probes_on,
        ),
    )
