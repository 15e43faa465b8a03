"""The capacity job (``pddbench capacity``): one system's SLA goodput on the shared ladder.

Reads and checks the inputs (before anything is deployed), starts the walk from the
trace's busiest hour when nothing is selected, composes the SLA (the scenario's, then the
command line's overrides), walks the ladder (:func:`~pddbench.harness.jobs.ladder.
run_ladder`), writes the verdict beside the runs (``capacity.json`` in ``--out``) and
prints the points and the verdict. Must not parse the command line (``cli/capacity``
does) nor decide anything the ladder decides.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.config.preflight import load_trace
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.config.sla import with_overrides
from pddbench.harness.jobs.ladder import run_ladder
from pddbench.harness.jobs.main_job import points_table
from pddbench.harness.jobs.replay import trace_manifest
from pddbench.harness.jobs.run_system import RunSettings, scenario_options
from pddbench.harness.plan.default_window import default_selection
from pddbench.harness.plan.ladder_points import LadderSettings
from pddbench.harness.report.markdown import _table as markdown_table


def capacity_job(
    *,
    trace_path: Path,
    scenario_name: str,
    options: ReplayOptions,
    settings: LadderSettings,
    sla_overrides: dict[str, float],
    run_settings: RunSettings,
) -> None:
    """Walk the ladder for one scenario; :class:`UserError` when the search refused."""
    scenario = load_scenario(scenario_name)
    trace = load_trace(trace_path)
    run_settings.preflight([scenario], None, options)
    options, note = default_selection(trace.table, scenario_options(options, scenario), trace.epoch)
    if note:  # a long trace and no selection: walk on from its busiest hour, at x10
        start = options.selection.window_start_s or 0.0
        click.echo(
            f"pddbench: long trace: the ladder walks on from the busiest hour of "
            f"session starts (offset {start / 3600:.1f} h), base speed-up "
            f"x{options.selection.speedup:g}",
            err=True,
        )
    sla = with_overrides(scenario.full_sla(), sla_overrides)
    options = dataclasses.replace(options, max_duration_s=None)
    click.echo(
        f"pddbench: ladder of offered rates from what x{settings.start:g} offers at the "
        f"origin, x{settings.growth:g} a rung, {settings.max_points} rungs (+ <= "
        f"{settings.bisect_points} bisection points); {settings.warmup_s:g} s warm-up "
        f"+ {settings.point_s:g}-{settings.longest_point_s:g} s measured per point (until "
        f"the trace offers {settings.min_requests} requests), at most "
        f"{settings.budget_s / 60:.0f} min; SLA {sla.describe()}",
        err=True,
    )
    try:
        verdict, _ = run_ladder(
            scenario,
            trace,
            options,
            settings,
            sla,
            trace_info=trace_manifest(trace, trace_path, None),
            run_settings=run_settings,
        )
    except KeyboardInterrupt:
        raise click.exceptions.Exit(130) from None
    written = verdict.save(run_settings.out_root)
    click.echo(markdown_table(points_table([verdict])))
    click.echo(verdict.describe())
    click.echo(f"verdict: {written}")
    if verdict.basis == "refused":
        raise UserError(f"{scenario.name}: {verdict.reason}")
