"""Sizing every system of a job at one budget (``pddbench size`` and the main job).

Composes each system's SLA, indexes the steady points once for every system and calls
:func:`~pddbench.harness.sizing.search.size_system` per scenario; prints each system's
table and writes ``sizing.json`` per system under the job's out folder. The command's
job (inputs, default window) is :mod:`~pddbench.harness.jobs.size_job`.
"""

from __future__ import annotations

from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.scenario import Scenario
from pddbench.harness.jobs.ladder import trace_schedule
from pddbench.harness.jobs.run_system import RunSettings, scenario_options
from pddbench.harness.plan.ladder_points import LadderSettings
from pddbench.harness.plan.steady import SteadyIndex
from pddbench.harness.report.markdown import _table as markdown_table
from pddbench.harness.rundir.sections import TraceInfo
from pddbench.harness.sizing.result import SizingResult
from pddbench.harness.sizing.search import size_system
from pddbench.workloads.traceio import Trace


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
    seeds: int = 1,
) -> list[SizingResult]:
    """Every system sized at ``budget`` on one steady index and one schedule (``seeds``:
    deployment seeds each candidate is walked at)."""
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
            scenario.full_sla(),
            budget=budget,
            top=top,
            trace_info=trace_info,
            run_settings=run_settings,
            steady=steady,
            schedule=schedule,
            seeds=seeds,
        )
        folder = Path(run_settings.out_root) / f"sizing-{scenario.name}"
        folder.mkdir(parents=True, exist_ok=True)
        result.save(folder)
        click.echo(markdown_table(result.table()))
        out.append(result)
    return out
