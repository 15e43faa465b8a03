"""The sizing job (``pddbench size``): each system's best deployment at a budget.

Reads and checks the inputs, bounds a long trace to the ladder's default window (the
busiest hour, as ``capacity`` does), composes the SLA, indexes the steady points once for
every system and calls :func:`~pddbench.harness.sizing.search.size_system` per scenario;
prints each system's table and writes ``sizing.json`` per system under ``--out``. Must
not parse the command line (``cli/size`` does) nor decide what the search decides.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.config.preflight import load_trace
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.scenario import Scenario, load_scenario
from pddbench.harness.config.sla import SLA, sla_from_mapping
from pddbench.harness.jobs.ladder import trace_schedule
from pddbench.harness.jobs.replay import trace_manifest
from pddbench.harness.jobs.run_system import RunSettings, scenario_options
from pddbench.harness.plan.default_window import default_selection
from pddbench.harness.plan.ladder_points import LadderSettings
from pddbench.harness.plan.steady import SteadyIndex
from pddbench.harness.report.markdown import _table as markdown_table
from pddbench.harness.rundir.sections import TraceInfo
from pddbench.harness.sizing.result import SizingResult
from pddbench.harness.sizing.search import size_system
from pddbench.workloads.traceio import Trace


def scenario_sla(scenario: Scenario) -> SLA:
    declared = scenario.sla.model_dump(exclude_unset=True) if scenario.sla else None
    return sla_from_mapping(declared, where=f"scenario {scenario.name}")


def size_all(
    scenarios: list[Scenario],
    trace: Trace,
    options: ReplayOptions,
    settings: LadderSettings,
    *,
    budget: float,
    top: int,
    trace_info: TraceInfo,
    run_settings: RunSettings,
    steady: SteadyIndex | None = None,
) -> list[SizingResult]:
    """Every system sized at ``budget`` on one steady index and one schedule."""
    if not settings.steady:
        raise UserError("sizing measures steady-state points (the twin primes its caches)")
    steady = steady or SteadyIndex(trace.table, options.selection, warmup_s=settings.warmup_s)
    schedule = trace_schedule(trace, options, steady)
    out = []
    for scenario in scenarios:
        result = size_system(
            scenario,
            trace,
            scenario_options(options, scenario),
            settings,
            scenario_sla(scenario),
            budget=budget,
            top=top,
            trace_info=trace_info,
            run_settings=run_settings,
            steady=steady,
            schedule=schedule,
        )
        folder = Path(run_settings.out_root) / f"sizing-{scenario.name}"
        folder.mkdir(parents=True, exist_ok=True)
        result.save(folder)
        click.echo(markdown_table(result.table()))
        out.append(result)
    return out


def size_job(
    *,
    trace_path: Path,
    scenario_names: list[str],
    options: ReplayOptions,
    settings: LadderSettings,
    budget: float | None,
    top: int,
    run_settings: RunSettings,
) -> list[SizingResult]:
    """Size each scenario at ``budget`` (None: the first scenario's own cost)."""
    scenarios = [load_scenario(n) for n in scenario_names]
    trace = load_trace(trace_path)
    run_settings = dataclasses.replace(run_settings, virtual=True)
    run_settings.preflight(scenarios, None, options)
    if budget is None:
        cost = scenarios[0].cost_model
        if cost is None:
            raise UserError(f"{scenarios[0].name} has no [cost]: give --budget")
        budget = cost.total
    options, note = default_selection(trace.table, options, trace.epoch)
    if note:
        click.echo(
            f"pddbench: long trace: sizing measures from the busiest hour (offset "
            f"{(options.selection.window_start_s or 0) / 3600:.1f} h), base speed-up "
            f"x{options.selection.speedup:g}",
            err=True,
        )
    options = dataclasses.replace(options, max_duration_s=None)
    results = size_all(
        scenarios,
        trace,
        options,
        settings,
        budget=budget,
        top=top,
        trace_info=trace_manifest(trace, trace_path, None),
        run_settings=run_settings,
    )
    for r in results:
        row = r.chosen_row
        click.echo(
            f"{r.system}: "
            + (
                f"chosen {row.deployment} (cost {row.cost:.4g}), twin capacity "
                f"{row.capacity_text()} req/s, bound by {row.binding}"
                if row
                else f"nothing chosen: {r.reason}"
            )
            + f" ({r.wall_s:.0f} s)"
        )
    return results
