"""``pddbench capacity``: SLA goodput at capacity for one system, on the shared load ladder.

Deploys the scenario **once** and walks the ladder (:mod:`pddbench.harness.plan.ladder`):
each point replays its own window of the trace in steady state (every request in it, as
``base speed-up × load`` concurrent slices, caches primed from the trace's history:
:mod:`pddbench.harness.plan.steady`; ``--cold``: the sessions that start in it), for a
warm-up plus a measured interval, in its own run folder;
the walk stops at the first point that misses the SLA attainment target. The same
settings give every system the same loads. Writes the verdict (``capacity.json``: every
point with its Wilson interval, the capacity, its interval and its basis) into the last
point's run folder and the ladder's folder, so ``pddbench report`` draws it. Parses the
options into the ladder's settings, the replay options and the SLA overrides and calls
:func:`pddbench.harness.jobs.capacity.capacity_job`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from pddbench.errors import UserError
from pddbench.harness.cli.options import backend_option, run_settings, selection_options
from pddbench.harness.config.replay_text import build_options, parse_duration
from pddbench.harness.config.sla import parse_sla_overrides
from pddbench.harness.jobs.capacity import capacity_job
from pddbench.harness.plan.ladder_points import DEFAULT_LADDER, LadderSettings

DURATION = "duration"  # a flag whose text is a duration (parse_duration), not a number
L = DEFAULT_LADDER
# every ladder flag once: (flag, LadderSettings field, kind, default, help)
LADDER_FLAGS: tuple[tuple[str, str, type | str, object, str], ...] = (
    ("--start", "start", float, L.start, "First load scale of the ladder (x the base "
     "arrival rate); what it offers at the walk's origin is the first rung's rate."),
    ("--growth", "growth", float, L.growth, "Offered-rate factor between ladder rungs (each "
     "point's load scale is chosen from the trace's schedule to offer its rung's rate)."),
    ("--points", "max_points", int, L.max_points,
     "Ladder length (the search is bounded in points)."),
    ("--point-duration", "point_s", DURATION, f"{L.point_s:g}s", "Measured time per point "
     "(after the warm-up); the minimum when points are powered (--min-requests)."),
    ("--max-point-duration", "max_point_s", DURATION, f"{L.longest_point_s:g}s",
     "The longest a powered point measures."),
    ("--min-requests", "min_requests", int, L.min_requests, "A point measures until the "
     "trace's schedule has offered this many requests after its warm-up (0: every point "
     "--point-duration)."),
    ("--bisect", "bisect_points", int, L.bisect_points,
     "Bisection points after the first miss (fresh trace)."),
    ("--descend", "descend_points", int, L.descend_points, "Step-down points (each the "
     "previous rate / --growth) when the first rung already misses, before the search "
     "refuses."),
    ("--budget", "time_budget_s", DURATION, None,
     "Wall-time bound on the whole walk (sending + draining), e.g. 10m."),
    ("--warmup", "warmup_s", DURATION, "10s", "Excluded at the start of every point (recorded)."),
    ("--max-lag", "max_lag_p99_s", DURATION, "0.5s",
     "A point whose schedule lag P99 exceeds this is recorded but excluded."),
    ("--request-limit", "request_limit_s", DURATION, "45s", "A point's requests are cut this "
     "long after they were sent; a cut one whose SLA bound lies beyond it is censored "
     "(excluded, counted)."),
    ("--steady/--cold", "steady", bool, L.steady, "Steady-state points (every request of a "
     "point's trace window, sessions in progress continuing, caches primed from the trace's "
     "history) or cold ones (the sessions that start in the window, from turn 0, caches "
     "empty; give a higher --start, e.g. 4)."),
)  # fmt: skip


def ladder_options(f: Callable[..., None]) -> Callable[..., None]:
    """The ladder's flags (:data:`LADDER_FLAGS`) on a command."""
    for flag, field, kind, default, help in reversed(LADDER_FLAGS):
        f = click.option(
            flag,
            field,
            type=str if kind == DURATION else kind,
            default=default,
            show_default=default is not None,
            help=help,
        )(f)
    return f


def ladder_settings(values: dict[str, object]) -> LadderSettings:
    """The ladder flags' values (taken out of ``values``) → :class:`LadderSettings`; a
    powered point measures at least --point-duration, a walk steps down at most
    --points - 1 times."""
    fields: dict[str, Any] = {}
    for flag, field, kind, _, _ in LADDER_FLAGS:
        raw = values.pop(field)
        fields[field] = parse_duration(str(raw), flag) if kind == DURATION and raw else raw
    fields["max_point_s"] = max(fields["point_s"], fields["max_point_s"])
    fields["descend_points"] = max(0, min(fields["descend_points"], fields["max_points"] - 1))
    try:
        return LadderSettings(**fields)
    except ValueError as exc:
        raise UserError(str(exc)) from None


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
@ladder_options
@click.option(
    "--out", "out_root", type=click.Path(path_type=Path), default=Path("results"), show_default=True
)
@click.option("--no-emulation", is_flag=True)
@backend_option
@selection_options
def capacity(
    trace_path: Path,
    scenario_name: str,
    target_pct: float | None,
    sla_text: str | None,
    out_root: Path,
    no_emulation: bool,
    backend: str,
    link_model: Path | None,
    **kw: object,
) -> None:
    """SLA goodput at capacity: walk the shared load ladder until the SLA target is missed."""
    settings = ladder_settings(kw)
    options = build_options(**kw)  # type: ignore[arg-type]
    overrides = parse_sla_overrides(sla_text) if sla_text else {}
    if target_pct is not None:
        overrides = {**overrides, "target_pct": target_pct}
    capacity_job(
        trace_path=trace_path,
        scenario_name=scenario_name,
        options=options,
        settings=settings,
        sla_overrides=overrides,
        run_settings=run_settings(
            out_root, no_emulation=no_emulation, backend=backend, link_model=link_model
        ),
    )
