"""E10, the equal-cost verdict: capacity per system on the virtual-time twin, then BCR, on
two workloads and three line rates.

Owns running ``pddbench capacity --backend virtual`` (the shared load ladder on the
twin, :mod:`pddbench.harness.jobs.ladder`; not reimplemented here) as a child process once
per (workload, line rate, system) into ``<out>/runs/twin-capacity-<workload>-<run>/``,
reading each ``capacity.json`` (:class:`~pddbench.harness.rundir.ladder.LadderVerdict`)
and each scenario's derived cost, and turning them into BCR = capacity goodput ÷ cost
(:func:`~pddbench.harness.analysis.verdict.bcr_verdict`: a load-bounded or refused ladder
has no BCR) and each cross-DC system's BCR ratio against same-DC PD per line rate.

The workloads: jan-feb (the main job's trace; ``--trace`` replaces it) and ``e10-64k1k``
(the PDD report's E10 setting, 64K in / 1K out, with jan-feb's hit-rate skew). The line
rates are the declaration's ``points`` of ``rate_mbit``, applied to the cross-DC scenarios
by E12's override (:func:`~pddbench.harness.experiments.run_sweep.point_scenario`).
same-dc-pd crosses no WAN: it is walked once per workload and its capacity stands at every
rate. Every figure is VIRTUAL TIME (the twin models the line; nothing is emulated).
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pddbench.errors import UserError
from pddbench.harness.analysis.verdict import BcrVerdict, bcr_verdict
from pddbench.harness.config.scenario import load_scenario, scenario_text
from pddbench.harness.config.sla import SLA
from pddbench.harness.experiments.model import (
    Experiment,
    Measurement,
    RunContext,
    Series,
    Value,
)
from pddbench.harness.experiments.run_replay import child
from pddbench.harness.experiments.run_sweep import point_scenario
from pddbench.harness.experiments.sweep import SweepPoint, base_link, plan_points, point_value
from pddbench.harness.report.tables import Table, TCell
from pddbench.harness.rundir.folder import CAPACITY
from pddbench.harness.rundir.ladder import LadderVerdict
from pddbench.harness.sizing.search import ladder_binding

BASELINE = "same-dc-pd"
CROSS_DC = ("cross-dc-pd", "pdd")  # compared with the baseline, per line rate
SYSTEMS = (BASELINE, *CROSS_DC)
WORKLOADS = ("jan-feb", "e10-64k1k")  # built-in profiles; --trace replaces jan-feb's
RATE = "rate_mbit"
TIME_LABEL = (
    "VIRTUAL TIME (twin): capacities from the virtual-time twin (`--backend virtual`), "
    "the WAN modelled from the scenarios' [network], not emulated"
)
# full: the capacity command's own ladder (the main job's) on the twin, with more step-downs
# (and so rungs: step-downs < rungs): a cross-DC system on a slow line can miss the first
# rung (~3.9 req/s on jan-feb) by far (cross-dc-pd at 10 Gbit/s: 36 % met at 0.47 req/s),
# and five halvings reach ~0.12
LADDER = ("--backend", "virtual", "--points", "6", "--descend", "5")
QUICK = (*LADDER, "--min-requests", "200", "--bisect", "1")  # shorter points, one bisection


def gbit(rate_mbit: float) -> float:
    return rate_mbit / 1000.0


def value_name(kind: str, workload: str, system: str, rate_gbit: float | None = None) -> str:
    """``"bcr_ratio:e10-64k1k:pdd:10G"``; without a rate (same-dc-pd, costs) no suffix."""
    tail = "" if rate_gbit is None else f":{rate_gbit:g}G"
    return f"{kind}:{workload}:{system}{tail}"


@dataclass(frozen=True)
class Cell:
    """One ladder: a system on a workload at a line rate (same-dc-pd: every rate)."""

    workload: str
    system: str
    rate_gbit: float | None  # None: no WAN (same-dc-pd)
    rel: str  # the ladder's folder, relative to the out root
    ladder: LadderVerdict
    bcr: BcrVerdict
    binding: str  # the resource the first missed point names (first_miss)
    missed: str  # what that point missed on, and the line's load there


def _workload_trace(workload: str, root: Path, ctx: RunContext) -> tuple[Path, str]:
    if workload == WORKLOADS[0] and ctx.trace is not None:
        return ctx.trace, f"{workload}: the given trace {Path(ctx.trace).name}"
    path = root / "runs" / f"{workload}.parquet"
    if not path.exists():
        ctx.progress(f"synthesising the {workload} profile")
        path.parent.mkdir(parents=True, exist_ok=True)
        child(["trace", "synth", "--profile", workload, "-o", str(path)], root)
    return (
        path,
        f"{workload}: the built-in profile, synthesised (`trace synth --profile {workload}`)",
    )


def _point_runs(folder: Path) -> dict[int, Path]:
    """The ladder's point run folders by point index (from each run's manifest)."""
    out = {}
    for d in sorted(p for p in folder.iterdir() if (p / "manifest.json").exists()):
        point = json.loads((d / "manifest.json").read_text(encoding="utf-8")).get("ladder_point")
        if point is not None:
            out[int(point["index"])] = d
    return out


def wan_utilisation(run: Path) -> float:
    """Mean utilisation of the busier WAN direction over a run (the twin's ``links.parquet``
    usage rows; NaN when the run crossed no WAN)."""
    path = run / "links.parquet"
    if not path.exists():
        return math.nan
    t = pq.read_table(path, columns=["kind", "direction", "utilisation"])
    t = t.filter(pc.equal(t.column("kind"), "usage"))
    if t.num_rows == 0:
        return math.nan
    direction = t.column("direction").to_numpy(zero_copy_only=False)
    util = t.column("utilisation").to_numpy(zero_copy_only=False).astype(np.float64)
    means = [float(np.nanmean(util[direction == d])) for d in np.unique(direction)]
    return max(means) if means else math.nan


def first_miss(ladder: LadderVerdict, folder: Path, sla: SLA) -> tuple[str, str]:
    """The binding resource read at the lowest-rate point that missed the target (the
    sizing search's reading: :func:`~pddbench.harness.sizing.search.ladder_binding`),
    with how busy the line was there. A reading of one point, not a proof."""
    runs = _point_runs(folder)
    resource, evidence = ladder_binding(ladder, runs, sla)
    missed = [
        p for p in ladder.points if p.excluded is None and p.attainment * 100 < ladder.target_pct
    ]
    if missed:
        p = min(missed, key=lambda q: q.planned_rps if q.planned_rps is not None else q.load_scale)
        util = wan_utilisation(runs[p.index]) if p.index in runs else math.nan
        if not math.isnan(util):
            evidence += f"; WAN busier direction {util:.0%} busy on average"
    return resource, evidence


def _ladder(
    ctx: RunContext, workload: str, trace: Path, scenario: str, name: str
) -> tuple[LadderVerdict, str, tuple[str, str]]:
    root = ctx.out.parent
    folder = root / "runs" / f"twin-capacity-{workload}-{Path(name).stem}"
    path = folder / CAPACITY
    if not path.exists():
        ctx.progress(f"{workload}: capacity of {Path(name).stem} on the twin (VIRTUAL TIME)")
        args = [
            "capacity",
            "--trace",
            str(trace),
            "--scenario",
            name,
            "--out",
            str(folder),
            *(QUICK if ctx.quick else LADDER),
        ]
        child(args, root, ok=(0, 1, 2))  # 2: a refused search, its verdict still written
        if not path.exists():
            raise UserError(
                f"`pddbench capacity` for {scenario} wrote no {CAPACITY}; "
                f"see {root / 'runs' / 'replay.log'}"
            )
    ladder = LadderVerdict.model_validate_json(path.read_text(encoding="utf-8"))
    sla = load_scenario(name).full_sla()
    return ladder, str(folder.relative_to(root)), first_miss(ladder, folder, sla)


def _plan(exp: Experiment, ctx: RunContext) -> tuple[dict[str, str], list[SweepPoint], dict]:
    texts = {s: scenario_text(s)[0] for s in CROSS_DC}
    base = base_link(tomllib.loads(texts[CROSS_DC[0]]))
    try:
        plan = plan_points({RATE: exp.sweep_points(ctx.quick)[RATE]}, base)
    except (KeyError, ValueError) as exc:
        raise UserError(f"{exp.id}: the line-rate points: {exc}") from None
    return texts, plan, base


def run_cells(exp: Experiment, ctx: RunContext) -> tuple[list[Cell], list[str]]:
    """Every ladder of E10 (walked when its folder lacks a verdict) and the workloads' notes."""
    texts, plan, base = _plan(exp, ctx)
    root = ctx.out.parent
    costs = {s: load_scenario(s).cost_model for s in SYSTEMS}
    cells, notes = [], []
    for workload in WORKLOADS:
        trace, note = _workload_trace(workload, root, ctx)
        notes.append(note)
        jobs: list[tuple[str, float | None, str]] = [(BASELINE, None, BASELINE)]
        for point in sorted(plan, key=lambda q: point_value(q, RATE, base)):
            rate = gbit(point_value(point, RATE, base))
            jobs += [(s, rate, point_scenario(ctx, s, texts[s], point)) for s in CROSS_DC]
        for system, rate, name in jobs:
            ladder, rel, (binding, missed) = _ladder(ctx, workload, trace, system, name)
            verdict = bcr_verdict(system, costs[system], ladder, math.nan)
            cells.append(Cell(workload, system, rate, rel, ladder, verdict, binding, missed))
    return cells, notes


def rates_of(cells: list[Cell]) -> list[float]:
    return sorted({c.rate_gbit for c in cells if c.rate_gbit is not None})


def bcr_ratio(cell: Cell, base: Cell) -> float:
    """BCR ÷ same-dc-pd's BCR (NaN unless both ladders found a capacity)."""
    if cell.bcr.bcr is None or base.bcr.bcr is None or base.bcr.bcr == 0:
        return math.nan
    return cell.bcr.bcr / base.bcr.bcr


def _capacity(c: Cell) -> Value:
    found = c.bcr.bcr is not None
    return Value(
        name=value_name("capacity", c.workload, c.system, c.rate_gbit),
        value=c.ladder.capacity_goodput
        if found and c.ladder.capacity_goodput is not None
        else math.nan,
        unit="req/s",
        low=c.ladder.capacity_low if found else None,
        high=c.ladder.capacity_high if found else None,
    )


def cell_values(cells: list[Cell]) -> list[Value]:
    """Capacity per ladder, cost and cost change per system, BCR ratio per cross-DC cell."""
    values = [_capacity(c) for c in cells]
    base = {c.workload: c for c in cells if c.system == BASELINE}
    costs = {c.system: c.bcr.cost for c in cells}
    c0 = costs.get(BASELINE)
    for s, cost in costs.items():
        values.append(
            Value(name=f"cost:{s}", value=cost if cost is not None else math.nan, unit="A-eq.")
        )
        if s != BASELINE:
            change = cost / c0 - 1 if cost is not None and c0 else math.nan
            values.append(Value(name=f"cost_change:{s}", value=change, unit="fraction"))
    for c in cells:
        if c.system != BASELINE:
            ratio = bcr_ratio(c, base[c.workload]) if c.workload in base else math.nan
            values.append(
                Value(
                    name=value_name("bcr_ratio", c.workload, c.system, c.rate_gbit),
                    value=ratio,
                    unit="x",
                )
            )
    return values


def ladder_text(c: Cell) -> str:
    """``"3.1 [0, 4.02] req/s"`` at a capacity; a load-bounded or refused ladder says so."""
    if c.bcr.bcr is not None:
        high = "open" if c.ladder.capacity_high is None else f"{c.ladder.capacity_high:.3g}"
        return f"{c.ladder.capacity_goodput:.3g} [{c.ladder.capacity_low or 0:.3g}, {high}] req/s"
    if c.bcr.basis == "load-bounded" and c.bcr.goodput is not None:
        return f"load-bounded >= {c.bcr.goodput:.3g} req/s (no BCR)"
    return f"{c.bcr.basis}: no capacity (no BCR)"


def _ladder_cell(
    m: Measurement, text: str, workload: str, system: str, rate: float | None
) -> TCell:
    """A table cell: ``text`` over the ladder's capacity and what bound it (no ``text``: the
    capacity itself)."""
    ladder = m.facts.get(value_name("ladder", workload, system, rate), "?")
    bound = m.facts.get(value_name("binding", workload, system, rate), "?")
    return TCell(text or ladder, sub=f"{ladder}; bound by {bound}" if text else f"bound by {bound}")


def bcr_table(m: Measurement) -> Table:
    """The BCR ratio against same-dc-pd per line rate (columns) per workload and system."""
    names = {v.name: v.value for v in m.values}
    rates = sorted({float(n.rsplit(":", 1)[1][:-1]) for n in names if n.startswith("bcr_ratio:")})
    rows = []
    for w in WORKLOADS:
        for s in CROSS_DC:
            cells = []
            for r in rates:
                ratio = names.get(value_name("bcr_ratio", w, s, r), math.nan)
                text = f"{ratio:.3f} ({ratio - 1:+.1%})" if math.isfinite(ratio) else "—"
                cells.append(_ladder_cell(m, text, w, s, r))
            rows.append((TCell(w), TCell(s), _ladder_cell(m, "", w, BASELINE, None), *cells))
    return Table(
        title="E10 — VIRTUAL TIME (twin): BCR ratio against same-dc-pd per inter-DC line rate",
        headers=(
            "workload",
            "system",
            "same-dc-pd capacity (no WAN: every rate)",
            *(f"{r:g} Gbit/s" for r in rates),
        ),
        rows=tuple(rows),
        note="BCR = SLA goodput at capacity ÷ cost (A-equivalents); ratio = the system's BCR "
        "÷ same-dc-pd's on the same workload, under it the system's capacity [interval]; — "
        "where a ladder was load-bounded or refused (no capacity, no BCR). Bound by: what the "
        "lowest-rate missed point of the ladder missed on (TPOT: decode; TTFT: the part of "
        "the late requests' TTFT they spent longest in: prefill, WAN, decode, router). "
        "Capacities from the virtual-time twin, not measured on servers.",
        numeric_from=2,
        id="e10-bcr",
    )


def _series(cells: list[Cell], values: list[Value]) -> list[Series]:
    by_name = {v.name: v.value for v in values}
    rates = rates_of(cells)
    return [
        Series(
            label=f"{s} / same-dc-pd, {w} (VIRTUAL TIME)",
            x=rates,
            y=[by_name.get(value_name("bcr_ratio", w, s, r), math.nan) for r in rates],
            x_name="inter-DC line rate (Gbit/s)",
            y_name="BCR ratio to same-dc-pd",
        )
        for w in WORKLOADS
        for s in CROSS_DC
    ]


def run_e10(exp: Experiment, ctx: RunContext) -> Measurement:
    cells, notes = run_cells(exp, ctx)
    values = cell_values(cells)
    m = exp.measured(
        ctx,
        values,
        series=_series(cells, values),
        runs=sorted({c.rel for c in cells}),
        wan_emulated=False,
        labels=[TIME_LABEL],
        facts={
            **{value_name("binding", c.workload, c.system, c.rate_gbit): c.binding for c in cells},
            **{
                value_name("ladder", c.workload, c.system, c.rate_gbit): ladder_text(c)
                for c in cells
            },
        },
        notes=[
            *notes,
            f"{BASELINE} crosses no WAN: its ladder ran once per workload and stands at every "
            "line rate; each scenario's cost (the line at its fixed line_cost) is the same at "
            "every rate",
            *(
                f"{c.workload} @ {'no WAN' if c.rate_gbit is None else f'{c.rate_gbit:g} Gbit/s'}"
                f": {c.ladder.describe()}; BCR {c.bcr.bcr_text()}; bound by {c.binding}: {c.missed}"
                for c in cells
            ),
        ],
    )
    from pddbench.harness.report.markdown import _table as markdown_table

    for line in markdown_table(bcr_table(m)).splitlines():
        ctx.progress(line)
    return m
