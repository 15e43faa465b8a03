"""``pddbench capacity``: SLA goodput at capacity for one system, on the shared load ladder.

Deploys the scenario **once** and walks the ladder (:mod:`pddbench.harness.plan.ladder`):
each point replays its own slice of the trace (sessions no earlier point sent), at
``base speed-up × load``, for a warm-up plus a measured interval, in its own run folder;
the walk stops at the first point that misses the SLA attainment target. The same
settings give every system the same loads. Writes the verdict (``capacity.json``: every
point with its Wilson interval, the capacity, its interval and its basis) into the last
point's run folder and the ladder's folder, so ``pddbench report`` draws it. The I/O is
:func:`pddbench.harness.capacity_run.run_ladder`, shared with the main job.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.analysis.sla import parse_sla_overrides, sla_from_mapping, with_overrides
from pddbench.harness.capacity_run import VERDICT_FILE, run_ladder
from pddbench.harness.cli.options import build_options, parse_duration, selection_options
from pddbench.harness.config.preflight import check_out_folder, load_trace
from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.pipeline import require_emulation, scenario_options, trace_manifest
from pddbench.harness.plan.default_window import default_selection
from pddbench.harness.plan.ladder_points import DEFAULT_LADDER, LadderSettings


@click.command("capacity")
@click.option("--trace", "trace_path", required=True, type=click.Path(path_type=Path))
@click.option("--scenario", "scenario_name", required=True, metavar="NAME|FILE")
@click.option(
    "--target",
    "target_pct",
    type=float,
    default=None,
    help="SLA attainment target in percent (default: the scenario's SLA target).",
)
@click.option("--sla", "sla_text", default=None, help="SLA overrides, e.g. ttft=2,tpot=30ms.")
@click.option(
    "--start",
    "start_load",
    type=float,
    default=DEFAULT_LADDER.start,
    show_default=True,
    help="First load scale of the ladder (x the base arrival rate); what it "
    "offers at the walk's origin is the first rung's rate.",
)
@click.option(
    "--growth",
    type=float,
    default=DEFAULT_LADDER.growth,
    show_default=True,
    help="Offered-rate factor between ladder rungs (each point's load scale is "
    "chosen from the trace's schedule to offer its rung's rate).",
)
@click.option(
    "--points",
    "max_points",
    type=int,
    default=DEFAULT_LADDER.max_points,
    show_default=True,
    help="Ladder length (the search is bounded in points).",
)
@click.option(
    "--point-duration",
    default=f"{DEFAULT_LADDER.point_s:g}s",
    show_default=True,
    help="Measured time per point (after the warm-up); the minimum when points "
    "are powered (--min-requests).",
)
@click.option(
    "--max-point-duration",
    default=f"{DEFAULT_LADDER.longest_point_s:g}s",
    show_default=True,
    help="The longest a powered point measures.",
)
@click.option(
    "--min-requests",
    type=int,
    default=DEFAULT_LADDER.min_requests,
    show_default=True,
    help="A point measures until the trace's schedule has "
    "offered this many requests after its warm-up (0: every point --point-duration).",
)
@click.option(
    "--bisect",
    "bisect_points",
    type=int,
    default=DEFAULT_LADDER.bisect_points,
    show_default=True,
    help="Bisection points after the first miss (fresh trace).",
)
@click.option(
    "--descend",
    "descend_points",
    type=int,
    default=DEFAULT_LADDER.descend_points,
    show_default=True,
    help="Step-down points (each the previous rate / --growth) when the first rung already "
    "misses, before the search refuses.",
)
@click.option(
    "--budget",
    default=None,
    help="Wall-time bound on the whole walk (sending + draining), e.g. 10m.",
)
@click.option(
    "--warmup",
    default="10s",
    show_default=True,
    help="Excluded at the start of every point (recorded).",
)
@click.option(
    "--max-lag",
    "max_lag",
    default="0.5s",
    show_default=True,
    help="A point whose schedule lag P99 exceeds this is recorded but excluded.",
)
@click.option(
    "--request-limit",
    "request_limit",
    default="45s",
    show_default=True,
    help="A point's requests are cut this long after they were sent; a cut one "
    "whose SLA bound lies beyond it is censored (excluded, counted).",
)
@click.option(
    "--out", "out_root", type=click.Path(path_type=Path), default=Path("results"), show_default=True
)
@click.option("--no-emulation", is_flag=True)
@selection_options
def capacity(
    trace_path: Path,
    scenario_name: str,
    target_pct: float | None,
    sla_text: str | None,
    start_load: float,
    growth: float,
    max_points: int,
    point_duration: str,
    max_point_duration: str,
    min_requests: int,
    bisect_points: int,
    descend_points: int,
    budget: str | None,
    warmup: str,
    max_lag: str,
    request_limit: str,
    out_root: Path,
    no_emulation: bool,
    **kw: object,
) -> None:
    """SLA goodput at capacity: walk the shared load ladder until the SLA target is missed."""
    options = build_options(**kw)  # type: ignore[arg-type]
    scenario = load_scenario(scenario_name)
    try:
        settings = LadderSettings(
            start=start_load,
            growth=growth,
            max_points=max_points,
            point_s=parse_duration(point_duration, "--point-duration"),
            max_point_s=max(
                parse_duration(point_duration, "--point-duration"),
                parse_duration(max_point_duration, "--max-point-duration"),
            ),
            min_requests=min_requests,
            bisect_points=bisect_points,
            descend_points=max(0, min(descend_points, max_points - 1)),
            time_budget_s=parse_duration(budget, "--budget") if budget else None,
            warmup_s=parse_duration(warmup, "--warmup"),
            max_lag_p99_s=parse_duration(max_lag, "--max-lag"),
            request_limit_s=parse_duration(request_limit, "--request-limit"),
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    trace = load_trace(trace_path)
    check_out_folder(out_root)
    # the inputs are good: only now the emulation probe (a scratch namespace) may run
    require_emulation([scenario], not no_emulation)
    options, note = default_selection(trace.table, scenario_options(options, scenario), trace.epoch)
    if note:  # a long trace and no selection: walk on from its busiest hour, at x10
        start = options.selection.window_start_s or 0.0
        click.echo(
            f"pddbench: long trace: the ladder walks on from the busiest hour of "
            f"session starts (offset {start / 3600:.1f} h), base speed-up "
            f"x{options.selection.speedup:g}",
            err=True,
        )
    declared = scenario.sla.model_dump(exclude_unset=True) if scenario.sla else None
    sla = with_overrides(
        sla_from_mapping(declared, where=f"scenario {scenario.name}"),
        parse_sla_overrides(sla_text) if sla_text else {},
    )
    if target_pct is not None:
        sla = with_overrides(sla, {"target_pct": target_pct})
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
            out_root=out_root,
            argv=["pddbench", *sys.argv[1:]],
            trace_info=trace_manifest(trace, trace_path, None),
            emulate=not no_emulation,
        )
    except KeyboardInterrupt:
        raise click.exceptions.Exit(130) from None
    (out_root / VERDICT_FILE).write_text(verdict.model_dump_json(indent=2))
    from pddbench.harness.main_job import points_table
    from pddbench.harness.report.markdown import _table as markdown_table

    click.echo(markdown_table(points_table([verdict])))
    click.echo(verdict.describe())
    click.echo(f"verdict: {out_root / VERDICT_FILE}")
    if verdict.basis == "refused":
        raise UserError(f"{scenario.name}: {verdict.reason}")
