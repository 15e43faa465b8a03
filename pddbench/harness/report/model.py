"""What a comparison report says, independent of how it is rendered.

Owns :func:`build_report`: load run folders, pick the baseline and the one SLA all runs
are judged by, analyse every run, and derive the comparisons every renderer shows (the
headline table with deltas against the baseline, the cost/BCR table, the load curves, the
colours per system (:mod:`~.figstyle`'s) and the main job's verdict when the run folders
carry one). Draws nothing, writes nothing.

Deltas: for metrics whose unit is a fraction (attainment, error rate, shares) the delta
is a difference in percentage points; for every other metric it is the relative change
``value / baseline - 1``. A delta is *better* or *worse* by the metric's direction, and
*same* within ±1 % (±0.1 pp for fractions).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pddbench.errors import UserError
from pddbench.harness.analysis.breakdowns import Group
from pddbench.harness.analysis.capacity import CapacityCurve
from pddbench.harness.analysis.metrics.catalog import CORE_KEYS
from pddbench.harness.analysis.recordset import HIT_BIN_LABELS
from pddbench.harness.analysis.registry import Direction, MetricRegistry, default_registry
from pddbench.harness.analysis.rundir import common_main_verdict, load_run, read_capacity
from pddbench.harness.analysis.stats import DEFAULT_PERCENTILES, percentile_key
from pddbench.harness.analysis.summary import RunAnalysis, analyze_run
from pddbench.harness.analysis.units import Unit, fmt
from pddbench.harness.analysis.verdict import BcrVerdict, bcr_verdict
from pddbench.harness.config.cost import (
    SENSITIVITY_PRICES,
    CostItem,
    relative,
    relative_bcr,
)
from pddbench.harness.config.sla import DEFAULT_SLA, SLA, with_overrides
from pddbench.harness.report.figstyle import line_styles, system_colors
from pddbench.harness.rundir.emulation import EmulationStatus
from pddbench.harness.rundir.main_verdict import MainVerdict

HEADLINE_KEYS: tuple[str, ...] = (
    *CORE_KEYS,
    "session_sla_attainment",
    "task_completion.p50",
    "error_rate",
    "censored_rate",
    "rld_token_share",
    "wan_bandwidth",
    "bcr",
)
REQUIRED_PERCENTILES = (50.0, 90.0, 99.0)  # the tables and figures use these
SECTIONS: tuple[tuple[str, str], ...] = (
    ("headline", "Headline"),
    ("ttft-cdf", "TTFT distribution"),
    ("ttft-timeline", "TTFT over time and the WAN"),
    ("latency-percentiles", "Latency percentiles"),
    ("ttft-by-hit-bin", "TTFT by prefix hit rate"),
    ("load", "Goodput and SLA attainment vs offered load"),
    ("bcr", "Cost and BCR"),
    ("bathtub", "Bathtub: token service rate vs hit rate"),
    ("hit-bins-over-time", "Hit-rate bins over time"),
    ("handoff", "Handoff: token timeline and ITL spikes"),
    ("wan", "WAN traffic"),
    ("sessions", "Agent tasks (sessions)"),
    ("errors", "Errors"),
    ("breakdowns", "Breakdowns"),
    ("server", "The servers' own counters (/metrics)"),
    ("links", "Link probes"),
    ("manifests", "Run manifests"),
    ("definitions", "Metric definitions"),
)


@dataclass(frozen=True)
class Cell:
    """One value of the headline table with its delta against the baseline."""

    key: str
    value: float  # display unit
    text: str
    delta: float | None  # relative change, or percentage points for fractions
    delta_text: str
    verdict: str  # "better" | "worse" | "same" | "" (baseline or undefined)


@dataclass(frozen=True)
class CostRow:
    label: str
    cost: float | None
    cost_text: str
    goodput: float
    bcr: float
    cost_change: float | None
    goodput_change: float | None
    bcr_change: float | None
    breakdown: list[CostItem] = field(default_factory=list)
    verdict: BcrVerdict | None = None  # the BCR's basis: capacity or load-bounded

    @property
    def bcr_text(self) -> str:
        return self.verdict.bcr_text() if self.verdict else "-"


@dataclass(frozen=True)
class PriceRow:
    """One system's cost and relative BCR with one GPU type at another price."""

    label: str
    hardware: str
    price: float  # in the cost's currency (A-equivalents)
    cost: float
    cost_change: float | None
    bcr_change: float | None


@dataclass(frozen=True)
class LoadPoint:
    label: str
    offered_rps: float
    goodput: float
    attainment: float


@dataclass
class Report:
    title: str
    runs: list[RunAnalysis]
    baseline: RunAnalysis
    sla: SLA
    sla_source: str
    percentiles: tuple[float, ...]
    headline_keys: tuple[str, ...]
    headline: dict[str, list[Cell]]  # label -> cells in headline_keys order
    costs: list[CostRow]
    verdicts: dict[str, BcrVerdict]  # run label -> BCR verdict (basis, interval, cost)
    prices: list[PriceRow]  # the B:A price sensitivity of the cost verdict
    load: dict[str, list[LoadPoint]]  # scenario -> points sorted by offered load
    capacity: list[CapacityCurve]
    colors: dict[str, str]  # run label -> hex colour
    dashes: dict[str, str]  # run label -> line style (runs of one scenario differ)
    registry: MetricRegistry
    generated_at: str = field(
        default_factory=lambda: datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    )
    notes: list[str] = field(default_factory=list)
    emulation: dict[str, EmulationStatus] = field(default_factory=dict)  # run label -> status
    virtual: list[str] = field(default_factory=list)  # labels of runs replayed by the twin
    main_verdict: MainVerdict | None = None  # the main job's, saved into the run folders

    @property
    def unemulated(self) -> list[str]:
        """Labels of runs whose scenario has WAN links that were not emulated."""
        return [label for label, st in self.emulation.items() if st.missing]

    def wan_banner(self) -> str | None:
        """The warning every renderer puts on its first screen, or None when all is well."""
        labels = self.unemulated
        if not labels:
            return None
        status = self.emulation[labels[0]]
        which = "all runs" if len(labels) == len(self.runs) else ", ".join(labels)
        return f"{status.banner()} ({which})."

    def faults(self) -> list[tuple[str, dict[str, Any]]]:
        """(run label, fault) for every ``[[faults]]`` entry that happened, with ``t_s``
        (seconds from the run's clock origin, the records' time axis)."""
        out = []
        for run in self.runs:
            m = run.manifest
            if m is None or m.deployment is None:
                continue
            origin = m.clock.origin_monotonic_s
            for f in m.deployment.faults:
                t = f.get("t_mono")
                t_s = float(t) - origin if t is not None and origin is not None else None
                out.append((run.label, {**f, "t_s": t_s}))
        return out

    def fault_banner(self) -> str | None:
        """The first-screen line of a run with injected faults (None: none injected)."""
        faults = self.faults()
        if not faults:
            return None
        said = "; ".join(
            f"{label}: {f.get('kind', 'kill')} {f.get('instance')} at "
            + (f"{f['t_s']:.1f} s" if f.get("t_s") is not None else "?")
            + (f" ({f['error']})" if f.get("error") else "")
            for label, f in faults
        )
        return f"FAULTS INJECTED ([[faults]]): {said}. Requests around them fail by design."

    def time_banner(self) -> str | None:
        """The label every renderer puts on its first screen when a run was replayed in
        virtual time (manifest ``replay.backend == "virtual"``), or None."""
        if not self.virtual:
            return None
        which = "all runs" if len(self.virtual) == len(self.runs) else ", ".join(self.virtual)
        return (
            "VIRTUAL TIME: replayed through the twin (a model of the reference servers and"
            " their links on a virtual clock), not by deployed servers; the emulated run is"
            f" the check of these numbers ({which})."
        )

    def header_of(self, key: str) -> str:
        tag, _, stat = key.partition(".")
        metric = self.registry[tag]
        unit = metric.shown_in
        if not stat:
            name = metric.header
        elif stat == "count":
            return f"{metric.header}: count"
        else:
            name = f"{metric.header} {stat if stat in ('mean', 'min', 'max') else stat.upper()}"
        return f"{name} ({unit})"


def _delta(
    value: float, base: float, unit: Unit, direction: Direction
) -> tuple[float | None, str, str]:
    if math.isnan(value) or math.isnan(base):
        return None, "", ""
    if unit is Unit.FRACTION:
        d = (value - base) * 100.0
        text, same = f"{d:+.1f} pp", abs(d) < 0.1
    else:
        if base == 0:
            return None, "", ""
        d = value / base - 1.0
        text, same = f"{d * 100:+.1f} %", abs(d) < 0.01
    if same or direction is Direction.NONE:
        verdict = "same" if same else ""
    else:
        up = d > 0
        verdict = "better" if up == (direction is Direction.HIGHER) else "worse"
    return d, text, verdict


def headline_cells(
    run: RunAnalysis, base: RunAnalysis, keys: Sequence[str], registry: MetricRegistry
) -> list[Cell]:
    cells = []
    for key in keys:
        tag = key.partition(".")[0]
        metric = registry[tag]
        value = run.metrics.shown(key)
        stat = key.partition(".")[2]
        text = fmt(value) if stat != "count" else f"{value:,.0f}"
        if run is base:
            cells.append(Cell(key, value, text, None, "baseline", ""))
            continue
        d, dtext, verdict = _delta(
            run.metrics.value(key), base.metrics.value(key), metric.unit, metric.direction
        )
        cells.append(Cell(key, value, text, d, dtext, verdict))
    return cells


def hit_bin_groups(runs: Sequence[RunAnalysis]) -> Iterator[tuple[RunAnalysis, Group]]:
    """Each run's ``hit_bin`` breakdown groups whose label is a known bin, in run order."""
    for run in runs:
        bd = run.breakdowns.get("hit_bin")
        if bd is None:
            continue
        for g in bd.groups:
            if g.label in HIT_BIN_LABELS:
                yield run, g


def run_verdicts(runs: Sequence[RunAnalysis]) -> dict[str, BcrVerdict]:
    """Each run's BCR verdict: from its capacity search, else load-bounded."""
    return {
        r.label: bcr_verdict(r.scenario, r.cost, r.ladder, r.metrics.value("goodput")) for r in runs
    }


def _num_or_nan(v: float | None) -> float:
    return math.nan if v is None else v


def cost_rows(
    runs: Sequence[RunAnalysis], base: RunAnalysis, verdicts: dict[str, BcrVerdict]
) -> list[CostRow]:
    """Goodput and BCR from each run's verdict; Δ only between verdicts of one basis."""
    rows = []
    base_v = verdicts[base.label]
    base_cost = base.cost.total if base.cost else math.nan
    base_good = _num_or_nan(base_v.goodput)
    for run in runs:
        v = verdicts[run.label]
        cost = run.cost.total if run.cost else math.nan
        good = _num_or_nan(v.goodput)
        c = relative(cost, base_cost)
        g = relative(good, base_good) if v.basis == base_v.basis else math.nan
        rows.append(
            CostRow(
                label=run.label,
                cost=None if math.isnan(cost) else cost,
                cost_text=run.cost.describe() if run.cost else "no cost model in the scenario",
                goodput=good,
                bcr=_num_or_nan(v.bcr if v.bcr is not None else v.load_bounded_bcr),
                cost_change=None if math.isnan(c) else c,
                goodput_change=None if math.isnan(g) else g,
                bcr_change=None if math.isnan(c) or math.isnan(g) else relative_bcr(g, c),
                breakdown=list(run.cost.breakdown) if run.cost else [],
                verdict=v,
            )
        )
    return rows


def price_rows(
    runs: Sequence[RunAnalysis], base: RunAnalysis, verdicts: dict[str, BcrVerdict]
) -> list[PriceRow]:
    """Each run's cost and ΔBCR with every non-unit GPU type at each sensitivity price.

    The currency is the price of GPU A; the types priced otherwise (B) are repriced one at a
    time, in the baseline and in every run alike, with goodput unchanged."""
    types = sorted({t for r in runs if r.cost for t in r.cost.priced_types()})
    base_v = verdicts[base.label]
    base_good = _num_or_nan(base_v.goodput)
    rows = []
    for hw in types:
        for price in SENSITIVITY_PRICES:
            base_cost = base.cost.repriced(hw, price).total if base.cost else math.nan
            for run in runs:
                if run.cost is None:
                    continue
                cost = run.cost.repriced(hw, price).total
                c = relative(cost, base_cost)
                v = verdicts[run.label]
                g = relative(_num_or_nan(v.goodput), base_good)
                g = g if v.basis == base_v.basis else math.nan
                rows.append(
                    PriceRow(
                        label=run.label,
                        hardware=hw,
                        price=price,
                        cost=cost,
                        cost_change=None if math.isnan(c) else c,
                        bcr_change=None if math.isnan(c) or math.isnan(g) else relative_bcr(g, c),
                    )
                )
    return rows


def load_curves(runs: Sequence[RunAnalysis]) -> dict[str, list[LoadPoint]]:
    """Per scenario with two or more runs: (offered load, goodput, attainment) points."""
    by_scenario: dict[str, list[RunAnalysis]] = {}
    for run in runs:
        by_scenario.setdefault(run.scenario, []).append(run)
    out: dict[str, list[LoadPoint]] = {}
    for scenario, group in by_scenario.items():
        if len(group) < 2:
            continue
        pts = [
            LoadPoint(
                r.label,
                r.metrics.value("offered_rps"),
                r.metrics.value("goodput"),
                r.metrics.value("sla_attainment"),
            )
            for r in group
        ]
        out[scenario] = sorted(pts, key=lambda p: (math.isnan(p.offered_rps), p.offered_rps))
    return out


def _unique_labels(runs: list[RunAnalysis]) -> None:
    """Label runs by scenario name when those are distinct, else by run id (disambiguated)."""
    scenarios = [r.scenario for r in runs]
    if len(set(scenarios)) == len(scenarios):
        for run in runs:
            run.label = run.scenario
        return
    seen: dict[str, int] = {}
    for run in runs:
        seen[run.label] = seen.get(run.label, 0) + 1
    for run in runs:
        if seen[run.label] > 1 and run.path is not None:
            run.label = f"{run.label} ({run.path.name})"
    labels = [r.label for r in runs]
    if len(set(labels)) != len(labels):
        for i, run in enumerate(runs):
            run.label = f"{run.label} #{i + 1}"


def baseline_index(names: Sequence[tuple[str, str]], name: str | None) -> int:
    """Index of the baseline among runs named (run id, scenario): first run by default."""
    if name is None:
        return 0
    for field_index in (0, 1):
        for i, names_of_run in enumerate(names):
            if names_of_run[field_index] == name:
                return i
    if name.isdigit() and 1 <= int(name) <= len(names):
        return int(name) - 1
    raise UserError(
        f"--baseline {name!r} matches no run (give a run id, scenario name or 1-based index)"
    )


def build_report(
    run_dirs: Sequence[str | Path],
    *,
    baseline: str | None = None,
    sla_overrides: dict[str, float] | None = None,
    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES,
    capacity_files: Sequence[str | Path] = (),
    title: str | None = None,
) -> Report:
    """Load and analyse ``run_dirs`` and compare them against the baseline."""
    if not run_dirs:
        raise UserError("no run folders given")
    percentiles = tuple(sorted(set(percentiles) | set(REQUIRED_PERCENTILES)))
    registry = default_registry()
    loaded = [load_run(d) for d in run_dirs]
    # the baseline's scenario SLA (or the default), overridden by --sla
    base_idx = baseline_index([(r.run_id, r.scenario_name) for r in loaded], baseline)
    base_sla = loaded[base_idx].sla()
    source = f"scenario of {loaded[base_idx].run_id}" if base_sla else "pddbench default"
    sla = base_sla or DEFAULT_SLA
    if sla_overrides:
        sla = with_overrides(sla, sla_overrides)
        source = f"--sla over the {source}"
    runs = [analyze_run(r, sla=sla, percentiles=percentiles, registry=registry) for r in loaded]
    _unique_labels(runs)
    base = runs[base_idx]
    keys = tuple(k for k in HEADLINE_KEYS if _key_ok(k, percentiles))
    notes = [
        f"{r.label}: its scenario's SLA ({r.own_sla.describe()}) differs; judged by the common "
        "SLA of this report"
        for r in runs
        if r.own_sla is not None
    ]
    curves = [c for r in runs if r.capacity is not None for c in [r.capacity]]
    curves.extend(read_capacity(Path(p)) for p in capacity_files)
    verdicts = run_verdicts(runs)
    return Report(
        title=title or f"pddbench report: {', '.join(r.label for r in runs)}",
        runs=runs,
        baseline=base,
        sla=sla,
        sla_source=source,
        percentiles=percentiles,
        headline_keys=keys,
        headline={
            r.label: _label_bcr(
                headline_cells(r, base, keys, registry), verdicts[r.label], verdicts[base.label]
            )
            for r in runs
        },
        costs=cost_rows(runs, base, verdicts),
        verdicts=verdicts,
        prices=price_rows(runs, base, verdicts),
        load=load_curves(runs),
        capacity=curves,
        colors=system_colors(runs),
        dashes=line_styles(runs),
        registry=registry,
        notes=notes,
        emulation={
            r.label: st
            for r in runs
            for st in [r.manifest.emulation if r.manifest else None]
            if st is not None
        },
        virtual=[
            r.label
            for r in runs
            if r.manifest and r.manifest.replay and r.manifest.replay.backend == "virtual"
        ],
        main_verdict=common_main_verdict(loaded),
    )


def _label_bcr(cells: list[Cell], verdict: BcrVerdict, base: BcrVerdict) -> list[Cell]:
    """The headline's BCR cell says its basis; a load-bounded one is never the BCR, and a
    delta is shown only between two capacity BCRs."""
    out = []
    for c in cells:
        if c.key == "bcr":
            d = None
            if verdict.bcr is not None and base.bcr and verdict is not base:
                d = verdict.bcr / base.bcr - 1.0
            value = verdict.bcr if verdict.bcr is not None else verdict.load_bounded_bcr
            c = Cell(
                c.key,
                _num_or_nan(value),
                verdict.bcr_text(),
                d,
                "" if d is None else f"{d * 100:+.1f} %",
                "" if d is None else ("same" if abs(d) < 0.01 else "better" if d > 0 else "worse"),
            )
        out.append(c)
    return out


def _key_ok(key: str, percentiles: tuple[float, ...]) -> bool:
    stat = key.partition(".")[2]
    if not stat or not stat.startswith("p"):
        return True
    return stat in {percentile_key(p) for p in percentiles}
