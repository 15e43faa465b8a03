"""The main job's steps around its walks: sizing every system at the baseline's cost,
one emulation scale for all, the twin on each walk's ladder, and a system's verdict
row.

Owns :func:`size`, :func:`one_scale`, :func:`twin_walk` (the hardware's twin, and with
:func:`host_costs` fitted on the emulated walk's first point, :func:`check_walk`: the
emulated deployment's twin, the check's) and :func:`system_row`; the job's
order, its time plan and its printed tables are :mod:`~pddbench.harness.jobs.main_job`'s,
the verdict's arithmetic :mod:`~pddbench.harness.jobs.equal_cost`'s.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.scenario import Scenario
from pddbench.harness.config.sla import SLA
from pddbench.harness.jobs.equal_cost import MAIN_TOP, system_verdict
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
from pddbench.harness.rundir.main_verdict import BcrSource, SystemVerdict
from pddbench.harness.rundir.sections import TraceInfo
from pddbench.harness.sizing.result import SizedRow, SizingResult
from pddbench.harness.sizing.search import Walk, by_index, ladder_binding, walk_seeds
from pddbench.harness.sizing.space import describe
from pddbench.twin.calibrate import LinkModelSource
from pddbench.twin.host import HOPS, HostCosts
from pddbench.twin.host_fit import fit_points, host_only_file, wan_is_hosts
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
    seeds: int = 1,
    host: LinkModelSource | None = None,
    first_only: str = "",
) -> TwinWalk:
    """The twin's capacity on the emulated walk's ladder (its placed rungs: the first point
    is the emulated walk's first, the same rate and trace window; later points follow the
    twin's own outcomes), so that the emulated capacity is checked against the twin on
    the same stretch of the trace rather than on the sizing walk's. With ``seeds`` > 1 the
    twin walks at deployment seeds 0..seeds-1 and is read at the median seed's walk, every
    seed's capacity beside it (``seed_capacities``): near a pool's saturation one seed is
    one draw of the servers' randomness, and the range is the twin's honest width. With
    ``host`` (a link-model file holding this host's fitted costs) it is the twin of the
    emulated deployment, not of the hardware (in ``twin-host-<system>``). With
    ``first_only`` (a folder name) only the walk's first point runs, in
    ``twin-host-<system>/<first_only>`` (a host fit's round)."""
    kind = "twin-host" if host is not None else "twin"
    folder = Path(run_settings.out_root) / f"{kind}-{scenario.name}"
    if first_only:
        folder = folder / first_only
        settings = dataclasses.replace(settings, max_points=1, bisect_points=0, descend_points=0)
    virtual = dataclasses.replace(run_settings, virtual=True)
    if host is not None:
        virtual = dataclasses.replace(virtual, link_model=host)
    # no time budget: a walk's budget is spent in wall seconds, and the twin's figures must
    # not depend on how fast this machine ran it (its points are few and cheap)
    settings = dataclasses.replace(settings, time_budget_s=None)

    def walk(seeded: Scenario, where: Path) -> Walk:
        return run_ladder(
            seeded, trace, scenario_options(options, seeded), settings, sla,
            trace_info=trace_info,
            run_settings=dataclasses.replace(virtual, out_root=where),
            schedule=schedule, steady=steady, echo=lambda s: None,
        )  # fmt: skip

    got = walk_seeds(scenario, seeds, folder, walk)
    row = twin.model_copy(update={**got.fields[got.mid], "seed_capacities": got.capacities})
    seeds_text = f", over {seeds} seeds {row.seeds_text()}" if seeds > 1 else ""
    what = "with this host's costs" if host is not None else "on this walk's ladder"
    if not first_only:
        click.echo(
            f"pddbench: {scenario.name}: the twin {what}: {row.capacity_text()} "
            f"req/s{seeds_text} (sizing walk: {twin.capacity_text()})",
            err=True,
        )
    first = got.walks[0][1]
    return TwinWalk(row, first[0] if first else None)


@dataclasses.dataclass(frozen=True)
class TwinWalk:
    row: SizedRow  # the twin's capacity on the placed ladder (the median seed's)
    first_point: Path | None  # seed 0's first point: the emulated walk's first, in the twin


def host_costs(
    scenario: Scenario,
    emulated_first: Path,
    hardware: TwinWalk,
    walk: Callable[..., TwinWalk],
    run_settings: RunSettings,
) -> LinkModelSource:
    """This host's per-hop costs, fitted on the emulated walk's first point against the
    twin's runs of it (:func:`~pddbench.twin.host_fit.fit_points`: the hardware twin's,
    then ``walk``'s first point re-run with each round's costs), as a link-model file
    beside the runs (``twin-host-<system>/host-costs.json``; the links as ``--link-model``
    gave them, else as configured)."""
    assert hardware.first_point is not None
    given = run_settings.link_model
    base = given.model if given is not None else host_only_file(emulated_first, scenario)
    folder = Path(run_settings.out_root) / f"twin-host-{scenario.name}"
    folder.mkdir(parents=True, exist_ok=True)

    def source(costs: HostCosts, name: str) -> LinkModelSource:
        path = folder / name
        model = base.model_copy(update={"host": costs})
        path.write_text(model.model_dump_json(indent=2))
        return LinkModelSource(path, model)

    rounds = itertools.count(1)

    def rerun(costs: HostCosts) -> Path:
        k = next(rounds)
        done = walk(seeds=1, host=source(costs, f"host-round{k}.json"), first_only=f"round{k}")
        assert done.first_point is not None
        return done.first_point

    fit = fit_points(emulated_first, hardware.first_point, rerun, wan=wan_is_hosts(base))
    costs = fit[-1].costs
    left = sum(abs(f.median_s) for f in fit[-1].residuals)
    hops = ", ".join(f"{h} {getattr(costs, h) * 1e3:.0f} ms" for h in HOPS if getattr(costs, h))
    click.echo(
        f"pddbench: {scenario.name}: this host's costs, fitted on the first point "
        f"({costs.requests} requests paired, {len(fit) - 1} rounds, {left * 1e3:.0f} ms "
        f"left): {costs.total_s * 1e3:.0f} ms a request ({hops or 'none'})",
        err=True,
    )
    return source(costs, "host-costs.json")


def check_walk(
    scenario: Scenario,
    hardware: TwinWalk,
    runs: list[Path],
    seeds: int,
    walk: Callable[..., TwinWalk],
    run_settings: RunSettings,
) -> tuple[SizedRow | None, float | None]:
    """The check's twin: this host's costs fitted on the emulated walk's first point
    (``runs[0]``) against the hardware twin's (:func:`host_costs`), then ``walk`` (the
    hardware twin's :func:`twin_walk`, all but ``seeds`` and ``host`` bound) with them.
    Its row and the costs a request; (None, None) without a first point on either side,
    or when the fit failed (said in one line: the agreement is then read against the
    hardware's twin)."""
    if not runs or hardware.first_point is None or seeds < 1:
        return None, None
    try:
        host = host_costs(scenario, runs[0], hardware, walk, run_settings)
    except UserError as exc:
        click.echo(f"pddbench: {scenario.name}: no host costs ({exc})", err=True)
        return None, None
    return walk(seeds=seeds, host=host).row, host.model.host.total_s


def system_row(
    scenario: Scenario,
    twin: SizedRow | None,
    ladder: LadderVerdict | None,
    runs: list[Path],
    sla: SLA,
    reason: str = "",
    bcr_source: BcrSource = "twin",
    check: tuple[SizedRow | None, float | None] = (None, None),
) -> SystemVerdict:
    """One system's verdict row: the binding resource from its walk's lowest missed
    point, else the twin's (``bcr_source``, ``check``: :func:`system_verdict`'s)."""
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
        bcr_source=bcr_source,
        check=check[0],
        host_s=check[1],
    )
