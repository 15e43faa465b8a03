"""The main job's verdict: ``pddbench replay --trace T`` with no selection on a long trace.

Every system walks the same load ladder (:mod:`pddbench.harness.plan.ladder`, through
:func:`~pddbench.harness.jobs.ladder.run_ladder`), starting from the trace's busiest
hour. Its first point is the same trace window at the same load for every system: the
**common offered load** at which latency is compared. The walk then gives SLA goodput at
capacity with its interval; with the cost derived from the deployment, BCR = capacity
goodput ÷ cost — or, when no point missed the target (or the harness fell behind),
a **load-bounded** ratio that is never shown as the BCR. The report over the
common-load runs carries each system's verdict (HTML, Markdown, JSON); the verdict table
is printed last. Decides nothing the ladder or :mod:`pddbench.harness.analysis.verdict`
does not; owns the main job's ladder settings and the printed table.

Before the walks, every system is sized at the baseline's cost on the virtual-time twin
(:mod:`pddbench.harness.jobs.equal_cost`): each walks its chosen deployment, its first
rung placed below the twin's capacity, and the job ends with the equal-cost verdict
(``main_verdict.json`` in every reported run folder: the report's first screen).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.analysis.rundir import load_run
from pddbench.harness.analysis.summary import analyze_run
from pddbench.harness.analysis.verdict import BcrVerdict, bcr_verdict
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.scenario import Scenario
from pddbench.harness.jobs.equal_cost import (
    PLACE_BELOW,
    PLACED_GROWTH,
    chosen_scenario,
    compose,
    placed_ladder,
)
from pddbench.harness.jobs.ladder import ladder_origin, run_ladder, trace_schedule
from pddbench.harness.jobs.main_steps import (
    TwinWalk,
    check_walk,
    one_scale,
    size,
    system_row,
    twin_walk,
)
from pddbench.harness.jobs.run_system import RunSettings, scenario_options
from pddbench.harness.plan.ladder_points import (
    DEFAULT_LADDER,
    QUICK_LADDER,
    LadderSettings,
)
from pddbench.harness.plan.ladder_rate import plan_point
from pddbench.harness.plan.steady import SteadyIndex
from pddbench.harness.report.markdown import _table as markdown_table
from pddbench.harness.report.summary import print_comparison
from pddbench.harness.report.tables import Table, TCell
from pddbench.harness.report.verdict_view import verdict_table as main_verdict_table
from pddbench.harness.report.write import Format, write_report
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.ladder import (
    MIX_BIN_LABELS,
    LadderPoint,
    LadderVerdict,
    RequestMix,
)
from pddbench.harness.rundir.main_verdict import BcrSource, SystemVerdict
from pddbench.harness.rundir.sections import TraceInfo
from pddbench.workloads.traceio import Trace

# The main job's time plan. Every system gets the same ladder settings (equal rate rungs on the
# ladder, equal power) and an equal share of the job's time: what one system leaves
# unused is not handed to the next (that would give later systems bigger samples).
JOB_BUDGET_S = 30 * 60.0
QUICK_JOB_BUDGET_S = 15 * 60.0
DEPLOY_ALLOWANCE_S = 40.0  # per system: deployment, link probes, teardown (planned)
# the twin's walk on each system's placed ladder runs at this many deployment seeds (its
# capacity the median seed's, the range beside it: one seed's capacity moves +-9-15 % with
# the seed for the decode-bound systems); --quick walks one. Each walk is planned at
# TWIN_WALK_ALLOWANCE_S (measured 9-12 s a walk on this machine) out of the system's share.
# The check's twin (the hardware's plus this host's per-hop costs, fitted on the emulated
# walk's first point) walks the same ladder at CHECK_SEEDS seeds, after the emulated walk.
TWIN_SEEDS = 5
QUICK_TWIN_SEEDS = 1
CHECK_SEEDS = 3
TWIN_WALK_ALLOWANCE_S = 12.0
REPORT_RESERVE_S = 60.0  # the report over the common-load runs, the verdict table


def main_ladder(
    systems: int, *, quick: bool = False, spent_s: float = 0.0, twin_walks: int = 0
) -> LadderSettings:
    """The ladder every system walks, with its share of the job's time as its budget
    (``spent_s``: what the job spent before the walks, the sizing; ``twin_walks``: the
    twin's walks per system on its placed ladder, planned out of its share)."""
    base = QUICK_LADDER if quick else DEFAULT_LADDER
    total = (QUICK_JOB_BUDGET_S if quick else JOB_BUDGET_S) - spent_s
    twin_s = TWIN_WALK_ALLOWANCE_S * twin_walks
    share = (total - REPORT_RESERVE_S) / max(1, systems) - DEPLOY_ALLOWANCE_S - twin_s
    floor = base.point_cost_s(base.point_s)  # a budget must hold one point
    return dataclasses.replace(base, time_budget_s=max(floor, share))


def twin_seeds(quick: bool, virtual: bool) -> tuple[int, int]:
    """The deployment seeds of the twin's walks on each placed ladder: the hardware's
    twin's and the check's (none when the job itself runs on the twin: its walk is the
    twin's; --quick: one each)."""
    if virtual:
        return 0, 0
    return (QUICK_TWIN_SEEDS, QUICK_TWIN_SEEDS) if quick else (TWIN_SEEDS, CHECK_SEEDS)


def plan_text(
    settings: LadderSettings,
    systems: int,
    quick: bool = False,
    origin_rps: float | None = None,
    twin_walks: int = 0,
    check_walks: int = 0,
) -> str:
    """The plan printed before the first system: points × seconds × systems, and the total
    (``origin_rps``: the first rate rung, what the start scale offers at the origin)."""
    s = settings
    twin_s = TWIN_WALK_ALLOWANCE_S * (twin_walks + check_walks)
    total = systems * (DEPLOY_ALLOWANCE_S + twin_s + s.budget_s) + REPORT_RESERVE_S
    twin = ""
    if twin_walks:
        check = f" + the check's at {check_walks} with this host's costs" if check_walks else ""
        twin = f"the twin's walk at {twin_walks} seed(s){check} <= {twin_s:g} s, "
    return (
        f"{systems} systems x ({twin}deployment + probes <= {DEPLOY_ALLOWANCE_S:g} s, then "
        f"{s.describe_walk(origin_rps)}; "
        f"each point {s.warmup_s:g} s warm-up + {s.point_s:g}-{s.longest_point_s:g} s "
        f"measured (until the trace offers {s.min_requests} requests) + <= "
        f"{s.request_limit_s:g} s draining + {s.point_overhead_s:g} s reading; <= "
        f"{s.budget_s / 60:.1f} min of points per "
        f"system) + report <= {REPORT_RESERVE_S:g} s: planned <= {total / 60:.1f} min"
        + (" [--quick]" if quick else "")
    )


def main_verdict(
    scenarios: list[Scenario],
    *,
    trace: Trace,
    options: ReplayOptions,
    trace_info: TraceInfo,
    run_settings: RunSettings,
    quick: bool = False,
) -> int:
    """Run the ladder for every system, report the common-load runs, print the verdict."""
    seeds, check_seeds = twin_seeds(quick, run_settings.virtual)
    # the verdict's BCR: the twin's capacity, the emulated walk its check; a run on the
    # twin itself reads its own walk
    source: BcrSource = "emulated" if run_settings.virtual else "twin"
    settings = main_ladder(len(scenarios), quick=quick, twin_walks=seeds + check_seeds)
    twin_s = TWIN_WALK_ALLOWANCE_S * (seeds + check_seeds)
    began = time.monotonic()
    steady = (
        SteadyIndex(trace.table, options.selection, warmup_s=settings.warmup_s)
        if settings.steady
        else None
    )
    schedule = trace_schedule(trace, options, steady)  # one for all: every system the same
    first = plan_point(settings, schedule, ladder_origin(trace, options), settings.start)
    origin_rps = first.planned_rps if first.planned_requests else None
    click.echo(
        f"pddbench: main job: "
        f"{plan_text(settings, len(scenarios), quick, origin_rps, seeds, check_seeds)}",
        err=True,
    )
    click.echo(
        f"pddbench: main job: every system is sized on the twin first (its time comes out of "
        f"the walks'); each walk then starts at {PLACE_BELOW:g} x its twin capacity rate, "
        f"x{PLACED_GROWTH:g} a rung, in place of the rungs above",
        err=True,
    )
    sizing = size(scenarios, trace, options, trace_info, run_settings, steady, quick)
    settings = main_ladder(
        len(scenarios),
        quick=quick,
        spent_s=time.monotonic() - began,
        twin_walks=seeds + check_seeds,
    )
    common: list[RunPaths] = []
    rows: list[tuple[BcrVerdict, LadderVerdict | None, RunPaths | None]] = []
    equal: list[SystemVerdict] = []
    chosen = [
        chosen_scenario(sizing[k], t) if sizing is not None else (t, None)
        for k, t in enumerate(scenarios)
    ]
    chosen = one_scale(chosen, run_settings)
    for template, (scenario, twin) in zip(scenarios, chosen, strict=True):
        sla = template.full_sla()
        twin_rps = (twin.capacity_rps or twin.capacity) if twin is not None else None
        walk_settings = placed_ladder(settings, origin_rps, twin_rps)
        if twin is not None:
            click.echo(
                f"pddbench: {scenario.name}: walking {twin.deployment} ({twin.source}), "
                f"its first rung at {PLACE_BELOW:g} x the twin's capacity rate "
                f"({twin_rps or 0:.3g} req/s), x{walk_settings.growth:g} a rung",
                err=True,
            )
        hardware: TwinWalk | None = None
        on_ladder: Callable[..., TwinWalk] | None = None
        if twin is not None and not run_settings.virtual:  # the twin on the placed ladder
            on_ladder = functools.partial(
                twin_walk, scenario, twin, trace, options, walk_settings, sla, trace_info,
                run_settings, steady, schedule,
            )  # fmt: skip
            hardware = on_ladder(seeds=seeds)
            twin = hardware.row
        runs: list[Path] = []
        try:
            ladder, runs = run_ladder(
                scenario,
                trace,
                scenario_options(options, scenario),
                walk_settings,
                sla,
                trace_info=trace_info,
                run_settings=run_settings,
                schedule=schedule,
                steady=steady,
            )
        except UserError as exc:  # deploy or probes failed: a failed row, the rest still run
            click.echo(f"pddbench: {scenario.name}: FAILED: {exc}", err=True)
            failed = BcrVerdict(
                system=scenario.name,
                basis="failed",
                goodput=None,
                cost=scenario.cost_model.total if scenario.cost_model else None,
                cost_text=scenario.cost_model.describe() if scenario.cost_model else "",
                reason=str(exc),
            )
            rows.append((failed, None, None))
            equal.append(
                system_row(scenario, twin, None, runs, sla, reason=str(exc), bcr_source=source)
            )
            continue
        first = RunPaths(runs[0]) if runs else None
        if first is not None:
            ladder.save(first.root)
            common.append(first)
        verdict = bcr_verdict(scenario.name, scenario.cost_model, ladder, float("nan"))
        rows.append((verdict, ladder, first))
        check = (None, None)
        if hardware is not None and on_ladder is not None:
            check = check_walk(scenario, hardware, runs, check_seeds, on_ladder, run_settings)
        equal.append(system_row(scenario, twin, ladder, runs, sla, bcr_source=source, check=check))
        left = len(scenarios) - len(rows)
        click.echo(
            f"pddbench: {len(rows)}/{len(scenarios)} systems done in "
            f"{(time.monotonic() - began) / 60:.1f} min, ETA <= "
            f"{left * (DEPLOY_ALLOWANCE_S + twin_s + settings.budget_s) / 60:.1f} min + "
            "the report",
            err=True,
        )
    main = compose(
        equal,
        budget=sizing[0].budget if sizing else equal[0].cost,
        sla_text=scenarios[0].full_sla().describe(),
        emulation=(
            "VIRTUAL TIME (the twin)"
            if run_settings.virtual
            else "emulated WAN"
            if run_settings.emulate
            else "WAN NOT EMULATED"
        ),
        quick=quick,
        wall_s=time.monotonic() - began,
    )
    for run in common:
        main.save(run.root)
    html = print_comparison(common, run_settings.out_root)
    if html is not None:  # the verdicts, machine-readable (basis, interval, cost, BCR)
        json_out = html.with_suffix(".json")
        write_report([r.root for r in common], json_out, fmt=Format.JSON)
        click.echo(f"report JSON: {json_out}")
    click.echo(markdown_table(points_table([lad for _, lad, _ in rows if lad is not None])))
    click.echo(markdown_table(verdict_table(rows)))
    click.echo(markdown_table(main_verdict_table(main)))
    click.echo(main.sentence())
    click.echo(f"main job: {(time.monotonic() - began) / 60:.1f} min wall time")
    bad = [v.system for v, _, _ in rows if v.basis in ("failed", "refused")]
    if bad:
        click.echo(f"pddbench: no capacity verdict for {', '.join(bad)} (see above)", err=True)
        return 1
    return 0


def verdict_table(
    results: list[tuple[BcrVerdict, LadderVerdict | None, RunPaths | None]],
) -> Table:
    """Per system: latency at the common load, capacity goodput [interval], cost, BCR."""
    rows = []
    for v, lad, run in results:
        m = analyze_run(load_run(run.root, token_times=False)).metrics if run else None
        first = lad.points[0] if lad and lad.points else None
        lo = "-" if v.goodput_low is None else f"{v.goodput_low:.3g}"
        hi = "open" if v.goodput_high is None else f"{v.goodput_high:.3g}"
        good = "-" if v.goodput is None else f"{v.goodput:.3g}"
        rows.append(
            (
                TCell(v.system),
                TCell(f"{first.label()}: {first.offered_rps:.3g} req/s measured" if first else "-"),
                TCell(f"{m.shown('ttft.p50'):.3g} / {m.shown('ttft.p99'):.3g}" if m else "-"),
                TCell(f"{m.shown('tpot.p50'):.3g}" if m else "-"),
                TCell(
                    f"{good} [{lo}, {hi}]"
                    if v.basis == "capacity"
                    else f"{v.basis}: {good if v.goodput is not None else v.reason}"
                ),
                TCell(v.cost_text),
                TCell(v.bcr_text()),
                TCell(f"{lad.measured_requests}" if lad else "0"),
            )
        )
    return Table(
        "Verdict at equal cost and one SLA",
        (
            "system",
            "common offered load",
            "TTFT P50 / P99 (ms) there",
            "TPOT P50 (ms) there",
            "SLA goodput at capacity (req/s) [interval]",
            "cost",
            "BCR",
            "measured requests",
        ),
        tuple(rows),
        "Capacity: where the ladder's SLA attainment, fitted non-increasing in offered rate, "
        "crosses the target (the goodput: the target's share of that rate); interval: "
        "percentile bootstrap of binomial redraws of every point. "
        "load-bounded: no point missed (or the harness fell behind), so the goodput is a "
        "lower bound and its ratio to cost is not the BCR.",
    )


def _settled(p: LadderPoint) -> str:
    if p.backlog:
        return f"NOT SUSTAINED: {p.backlog}"
    if p.settled:
        return p.settled
    return "-" if p.settle_s is None else f"idle after {p.settle_s:.1f} s"


def points_table(ladders: list[LadderVerdict]) -> Table:
    """Every point of every system's walk: its rung (planned offered rate and load scale),
    time, planned and measured offered rate and requests, attainment with its interval,
    and why a point was excluded."""
    rows = []
    for lad in ladders:
        for p in lad.points:
            kind = " (bisect)" if p.bisect else " (step down)" if p.descend else ""
            planned = "-" if p.planned_rps is None else f"{p.planned_rps:.3g}"
            target = "" if p.target_rps is None else f" (rung {p.target_rps:.3g})"
            rows.append(
                (
                    TCell(lad.system),
                    TCell(p.label() + kind),
                    TCell("-" if p.measure_s is None else f"{p.measure_s:g}"),
                    TCell("-" if p.wall_s is None else f"{p.wall_s:.0f}"),
                    TCell(planned + target),
                    TCell(f"{p.offered_rps:.3g}"),
                    TCell(
                        f"{p.requests}"
                        + ("" if p.planned_requests is None else f" / {p.planned_requests}")
                    ),
                    TCell(f"{p.attainment:.1%} [{p.attainment_low:.1%}, {p.attainment_high:.1%}]"),
                    TCell(p.excluded or "no"),
                    TCell(_settled(p)),
                    TCell(_turn0(p)),
                    TCell(_bins(p)),
                )
            )
    return Table(
        "Ladder points",
        (
            "system",
            "point",
            "measured s",
            "wall s",
            "planned offered req/s",
            "measured offered req/s",
            "measured / planned requests",
            "SLA attainment [interval]",
            "excluded",
            "servers after the point",
            "turn 0: planned / measured / window",
            f"hit bins % ({' / '.join(MIX_BIN_LABELS)}): planned | measured | window | served",
        ),
        tuple(rows),
        "Each point replays its own stretch of the trace; its warm-up is excluded; its "
        "load scale is chosen so that the trace's schedule plans the rung's offered rate "
        "(closed-loop sessions: the measured offered rate follows the system's pace); "
        "interval: Wilson, the ladder's confidence. Servers after the point: how long they "
        "took to finish its work once its last answer was in; NOT SUSTAINED: still busy "
        "when the wait ended (a relay answers while WAN transfers pile up), a miss whatever "
        "the attainment, and the next point gets a fresh deployment. Steady-state points "
        "replay every request of their trace window (sessions in progress continue, caches "
        "primed from the trace's history): turn-0 share and hit-rate bins of the requests "
        "the point planned in its measured time and of those it measured (a slow system "
        "delays later turns past the point's end), with their hit rates in the trace, "
        "beside the window's own; served: the hit rates the servers reported.",
    )


def _mixes(p: LadderPoint) -> list[RequestMix] | None:
    """A steady point's planned, measured and trace-window mixes (None: a cold point)."""
    mixes = [p.planned_mix, p.mix, p.trace_mix]
    return None if any(m is None for m in mixes) else [m for m in mixes if m is not None]


def _turn0(p: LadderPoint) -> str:
    mixes = _mixes(p)
    return "-" if mixes is None else " / ".join(f"{m.turn0_share:.1%}" for m in mixes)


def _bins(p: LadderPoint) -> str:
    def fmt(shares: list[float] | None) -> str:
        return "-" if shares is None else " / ".join(f"{100 * x:.1f}" for x in shares)

    mixes = _mixes(p)
    if mixes is None:
        return "-"
    return " | ".join([*(fmt(m.hit_bins) for m in mixes), fmt(p.served_hit_bins)])
