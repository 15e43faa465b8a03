"""``pddbench capacity``: SLA goodput at capacity for one system, on the shared load ladder.

Deploys the scenario **once** and walks the ladder (:mod:`pddbench.harness.plan.ladder`):
each point replays its own slice of the trace (sessions no earlier point sent), at
``base speed-up × load``, for a warm-up plus a measured interval, in its own run folder;
the walk stops at the first point that misses the SLA attainment target. The same
settings give every system the same loads. Writes the verdict (``capacity.json``: every
point with its Wilson interval, the capacity, its interval and its basis) into the last
point's run folder and the ladder's folder, so ``pddbench report`` draws it. Parses the
options into the ladder's settings, the replay options and the SLA overrides and calls
:func:`pddbench.harness.jobs.capacity.capacity_job`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.cli.options import build_options, parse_duration, selection_options
from pddbench.harness.config.sla import parse_sla_overrides
from pddbench.harness.jobs.capacity import capacity_job
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
    overrides = parse_sla_overrides(sla_text) if sla_text else {}
    if target_pct is not None:
        overrides = {**overrides, "target_pct": target_pct}
    capacity_job(
        trace_path=trace_path,
        scenario_name=scenario_name,
        options=options,
        settings=settings,
        sla_overrides=overrides,
        out_root=out_root,
        argv=["pddbench", *sys.argv[1:]],
        emulate=not no_emulation,
    )
