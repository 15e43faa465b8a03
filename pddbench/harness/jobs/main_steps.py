"""The main job's steps around its walks: sizing every system at the baseline's cost,
one emulation scale for all, the twin on each walk's ladder, and a system's verdict
row.

Owns :func:`size`, :func:`one_scale`, :func:`twin_walk` and :func:`system_row`; the job's
order, its time plan and its printed tables are :mod:`~pddbench.harness.jobs.main_job`'s,
the verdict's arithmetic :mod:`~pddbench.harness.jobs.equal_cost`'s.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.scenario import Scenario
from pddbench.harness.config.sla import SLA
from pddbench.harness.jobs.equal_cost import MAIN_TOP, capacity_fields, system_verdict
from pddbench.harness.jobs.ladder import run_ladder
from pddbench.harness.jobs.run_system import RunSettings, scenario_options
from pddbench.harness.jobs.size import size_all
from pddbench.harness.plan.ladder_points import (
    DEFAULT_LADDER,
    QUICK_LADDER,
    LadderSettings,
    Schedule,
)
from pddbench.harness.plan.steady import SteadyIndex
from pddbench.harness.rundir.ladder import LadderVerdict
from pddbench.harness.rundir.main_verdict import SystemVerdict
from pddbench.harness.rundir.sections import TraceInfo
from pddbench.harness.sizing.result import SizedRow, SizingResult
from pddbench.harness.sizing.search import by_index, ladder_binding
from pddbench.harness.sizing.space import describe
from pddbench.workloads.traceio import Trace


def size(
    scenarios: list[Scenario],
    trace: Trace,
    options: ReplayOptions,
    trace_info: TraceInfo,
    run_settings: RunSettings,
    steady: SteadyIndex | None,
    quick: bool,
) -> list[SizingResult] | None:
    """Every system sized at the baseline's cost on the twin (None: it could not be:
    said in one line; the systems walk their own deployments)."""
    cost = scenarios[0].cost_model
    if cost is None or steady is None or any(not s.is_reference for s in scenarios):
        click.echo(
            "pddbench: main job: no sizing (needs reference scenarios with [cost] and "
            "steady points)",
            err=True,
        )
        return None
    click.echo(
        f"pddbench: main job: sizing every system at {scenarios[0].name}'s cost "
        f"({cost.total:g} A-eq.) on the virtual-time twin",
        err=True,
    )
    try:
        return size_all(
            scenarios,
            trace,
            options,
            QUICK_LADDER if quick else DEFAULT_LADDER,
            budget=cost.total,
            top=MAIN_TOP,
            trace_info=trace_info,
            run_settings=run_settings,
            steady=steady,
        )
    except UserError as exc:
        click.echo(f"pddbench: main job: no sizing: {exc}", err=True)
        return None


def one_scale(
    chosen: list[tuple[Scenario, SizedRow | None]], run_settings: RunSettings
) -> list[tuple[Scenario, SizedRow | None]]:
    """Every system at one emulation scale, the largest any of them needs here (each
    probed as a walk alone would be): a comparison between systems emulated at 1/20 and
    1/100 would compare the emulator too."""
    if run_settings.virtual or not run_settings.emulate:
        return chosen
    fixed = [(run_settings.fixed(s), row) for s, row in chosen]
    scales = {s.name: float(s.emulation_scale) for s, _ in fixed}
    top = max(scales.values())
    said = ", ".join(f"{n} 1/{v:g}" for n, v in scales.items())
    click.echo(f"pddbench: main job: every system at emulation scale 1/{top:g} ({said})", err=True)
    return [
        (
            s.model_copy(
                update={
                    "emulation_scale": top,
                    "scale_source": f"one scale for every system of the main job, the "
                    f"largest of theirs ({said})",
                }
            ),
            row,
        )
        for s, row in fixed
    ]


def twin_walk(
    scenario: Scenario,
    twin: SizedRow,
    trace: Trace,
    options: ReplayOptions,
    settings: LadderSettings,
    sla: SLA,
    trace_info: TraceInfo,
    run_settings: RunSettings,
    steady: SteadyIndex | None,
    schedule: Schedule,
) -> SizedRow:
    """The twin's capacity on the emulated walk's ladder (its placed rungs: the first point
    is the emulated walk's first, the same rate and trace window; later points follow the
    twin's own outcomes), so that the emulated capacity is checked against the twin on
    the same stretch of the trace rather than on the sizing walk's."""
    folder = Path(run_settings.out_root) / f"twin-{scenario.name}"
    folder.mkdir(parents=True, exist_ok=True)
    virtual = dataclasses.replace(run_settings, virtual=True, out_root=folder)
    walk, _ = run_ladder(
        scenario, trace, scenario_options(options, scenario), settings, sla,
        trace_info=trace_info, run_settings=virtual, schedule=schedule, steady=steady,
        echo=lambda s: None,
    )  # fmt: skip
    row = twin.model_copy(update=capacity_fields(walk))
    click.echo(
        f"pddbench: {scenario.name}: the twin on this walk's ladder: {row.capacity_text()} "
        f"req/s (sizing walk: {twin.capacity_text()})",
        err=True,
    )
    return row


def system_row(
    scenario: Scenario,
    twin: SizedRow | None,
    ladder: LadderVerdict | None,
    runs: list[Path],
    sla: SLA,
    reason: str = "",
) -> SystemVerdict:
    """One system's verdict row: the binding resource from its walk's lowest missed
    point, else the twin's."""
    binding = ("unknown", "")
    if ladder is not None and runs:
        binding = ladder_binding(ladder, by_index(ladder, runs), sla)
    if binding[0] in ("unknown", "none reached") and twin is not None:
        binding = (twin.binding, f"twin: {twin.binding_detail}")
    cost = scenario.cost_model
    return system_verdict(
        scenario.name,
        twin.deployment if twin is not None else describe(scenario),
        twin.source if twin is not None else "built-in",
        cost.total if cost else math.nan,
        cost.describe() if cost else "",
        twin,
        ladder,
        binding,
        reason=reason,
    )
