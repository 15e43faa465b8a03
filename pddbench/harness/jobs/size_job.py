"""The sizing job (``pddbench size``): each system's best deployment at a budget.

Reads and checks the inputs, bounds a long trace to the ladder's default window (the
busiest hour, as ``capacity`` does), sizes every scenario
(:func:`~pddbench.harness.jobs.size.size_all`) and prints what each chose. Must not parse
the command line (``cli/size`` does) nor decide what the search decides.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.config.preflight import load_trace
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.jobs.replay import trace_manifest
from pddbench.harness.jobs.run_system import RunSettings
from pddbench.harness.jobs.size import size_all
from pddbench.harness.plan.default_window import default_selection
from pddbench.harness.plan.ladder_points import LadderSettings
from pddbench.harness.sizing.result import SizingResult


def size_job(
    *,
    trace_path: Path,
    scenario_names: list[str],
    options: ReplayOptions,
    settings: LadderSettings,
    budget: float | None,
    top: int,
    run_settings: RunSettings,
    seeds: int = 1,
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
        seeds=seeds,
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
