"""One run's full analysis: every metric, every breakdown, the figure curves.

Owns :func:`analyze_run` (a loaded :class:`RunData` -> :class:`RunAnalysis`) and
:func:`analyze_records` (the same from a bare :class:`RecordSet`, for benches and tests),
and nothing else: it chooses no SLA (the caller passes one, see ``sla``), draws nothing
and writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pddbench.harness.analysis.breakdowns import (
    BREAKDOWN_TAGS,
    Breakdown,
    ErrorRow,
    available_dimensions,
    breakdown,
    error_table,
)
from pddbench.harness.analysis.capacity import CapacityCurve
from pddbench.harness.analysis.metrics.session import task_completion_times
from pddbench.harness.analysis.recordset import RecordSet
from pddbench.harness.analysis.registry import Context, MetricRegistry, MetricSet, default_registry
from pddbench.harness.analysis.rundir import RunData
from pddbench.harness.analysis.series import (
    Bathtub,
    Curve,
    HandoffTimeline,
    HitShares,
    bathtub,
    curve_of,
    handoff_timeline,
    hit_shares,
    ttft_cdf,
    ttft_timeline,
)
from pddbench.harness.analysis.server import ServerCounters, server_counters
from pddbench.harness.analysis.stats import DEFAULT_PERCENTILES
from pddbench.harness.config.cost import CostModel
from pddbench.harness.config.sla import DEFAULT_SLA, SLA
from pddbench.harness.rundir.ladder import LadderVerdict
from pddbench.harness.rundir.manifest import RunManifest


@dataclass
class RunSeries:
    ttft_cdf: Curve
    task_cdf: Curve
    hit_shares: HitShares
    bathtub: Bathtub
    handoff: HandoffTimeline | None
    ttft_timeline: Curve | None = None  # x: send time (s), y: TTFT (s), ok requests


@dataclass
class RunAnalysis:
    """Everything the reports show about one run."""

    run_id: str
    label: str
    scenario: str
    sla: SLA
    cost: CostModel | None
    metrics: MetricSet
    breakdowns: dict[str, Breakdown]
    errors: tuple[ErrorRow, ...]
    series: RunSeries
    token_times: bool
    path: Path | None = None
    own_sla: SLA | None = None  # the run's scenario SLA, when it differs from `sla`
    manifest: RunManifest | None = None  # None: analysed from records alone
    links: list[dict[str, Any]] = field(default_factory=list)  # link probes
    # the WAN schedule's state changes (links.parquet kind = "change"), with ``t_s``: seconds
    # from the run's clock origin, the time axis of the records
    link_changes: list[dict[str, Any]] = field(default_factory=list)
    capacity: CapacityCurve | None = None
    ladder: LadderVerdict | None = None  # SLA goodput at capacity, when a search ran
    server: ServerCounters | None = None  # the servers' own counters (server_metrics)


def analyze_records(
    records: RecordSet,
    *,
    sla: SLA = DEFAULT_SLA,
    cost: CostModel | None = None,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
    registry: MetricRegistry | None = None,
    breakdown_tags: tuple[str, ...] = BREAKDOWN_TAGS,
    run_id: str = "run",
    label: str | None = None,
    scenario: str | None = None,
) -> RunAnalysis:
    """All metrics, breakdowns and curves of ``records``."""
    registry = registry or default_registry()
    ctx = Context(percentiles=percentiles, sla=sla, cost=cost, duration_s=records.duration_s)
    metrics = registry.compute(records, ctx)
    dims = {
        d: breakdown(records, d, registry, ctx, breakdown_tags)
        for d in available_dimensions(records)
    }
    series = RunSeries(
        ttft_cdf=ttft_cdf(records),
        task_cdf=curve_of(task_completion_times(records, ctx)),
        hit_shares=hit_shares(records),
        bathtub=bathtub(records),
        handoff=handoff_timeline(records),
        ttft_timeline=ttft_timeline(records),
    )
    return RunAnalysis(
        run_id=run_id,
        label=label or run_id,
        scenario=scenario or run_id,
        sla=sla,
        cost=cost,
        metrics=metrics,
        breakdowns=dims,
        errors=error_table(records),
        series=series,
        token_times=records.token_times is not None,
    )


def _links(run: RunData) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    if run.links is not None:
        rows.extend(r for r in run.links.to_pylist() if r.get("kind", "probe") == "probe")
    else:
        rows.extend(x if isinstance(x, dict) else {"link": x} for x in run.manifest.links)
    return rows


def _link_changes(run: RunData) -> list[dict[str, Any]]:
    if run.links is None or "kind" not in run.links.column_names:
        return []
    origin = run.manifest.clock.origin_monotonic_s
    if origin is None:
        return []
    rows = [r for r in run.links.to_pylist() if r.get("kind") == "change"]
    return [{**r, "t_s": float(r["t_mono"]) - float(origin)} for r in rows]


def analyze_run(
    run: RunData,
    *,
    sla: SLA | None = None,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
    registry: MetricRegistry | None = None,
    label: str | None = None,
) -> RunAnalysis:
    """Analyse a loaded run; ``sla`` None = the run's own scenario SLA (else the default)."""
    own = run.sla()
    used = sla or own or DEFAULT_SLA
    result = analyze_records(
        run.records,
        sla=used,
        cost=run.cost(),
        percentiles=percentiles,
        registry=registry,
        run_id=run.run_id,
        label=label or run.run_id,
        scenario=run.scenario_name,
    )
    result.path = run.path
    result.own_sla = own if own is not None and own != used else None
    result.manifest = run.manifest
    result.links = _links(run)
    result.link_changes = _link_changes(run)
    result.capacity = run.capacity
    result.ladder = run.ladder
    result.server = server_counters(run.server_metrics)
    return result
