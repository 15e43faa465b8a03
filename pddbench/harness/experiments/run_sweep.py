"""E12: the same workload replayed against PDD and naive cross-DC PD along WAN sweeps.

Owns running the planned sweep (:mod:`~pddbench.harness.experiments.sweep`): for each
point, a scenario file per system written into ``<out>/E12/scenarios/`` and replayed
through :func:`~pddbench.harness.experiments.run_replay.replay` into
``<out>/runs/<scenario>.<point>/`` (the base point is the unchanged scenario: the run
E4/E5 share), then TTFT P50/P90 per point per system with bootstrap intervals, SLA
goodput, and the PDD/naive ratio whose trend the check judges.

Needs the emulated WAN: without ``--emulate``, or where this machine cannot emulate
(:func:`~pddbench.harness.deploy.systems.emulation_problem`), it measures nothing and
says why (*not run*). A point whose replay fails is a note; its values are undefined.
"""

from __future__ import annotations

import tomllib

from pddbench.errors import UserError
from pddbench.harness.config.scenario import scenario_text
from pddbench.harness.experiments.model import Experiment, Measurement, RunContext, Series, Value
from pddbench.harness.experiments.run_replay import (
    ReplayRun,
    measurement,
    pct_value,
    replay,
    ttft,
)
from pddbench.harness.experiments.sweep import (
    DIMENSIONS,
    SweepPoint,
    base_link,
    dimension_points,
    plan_points,
    point_scenario_text,
    point_value,
    ratio_interval,
)

NEEDS_WAN = "not run: needs the emulated WAN"
QUANTILES = (50, 90)
TAGS = ("naive", "pdd")  # the declaration's scenarios, in order: baseline, then PDD
# Swept fields whose points record the link probes without enforcing them: the delay line
# keeps packets in order, so a wide jitter holds each packet behind the latest one before
# it and bulk TCP falls below the probe's goodput bar (70 % of the rate) by design. (The
# probe itself exempts lossy links from that bar; rate points keep the whole check.)
PROBES_RECORDED_ONLY = ("jitter_ms",)


def trend_label(dimension: str, q: int) -> str:
    """The series (and check) name of the PDD/naive TTFT P<q> ratio along ``dimension``."""
    return f"PDD/naive TTFT P{q}, {dimension} swept"


def _why_not(ctx: RunContext) -> str | None:
    if not ctx.emulate:
        return f"{NEEDS_WAN} (run it with --emulate: network namespaces, root)"
    from pddbench.harness.deploy.systems import emulation_problem

    problem = emulation_problem()
    return f"{NEEDS_WAN}: {problem}" if problem else None


def point_scenario(ctx: RunContext, scenario: str, text: str, point: SweepPoint) -> str:
    """What ``--scenario`` names at ``point``: the built-in ``scenario`` itself at the base
    point, else its overridden TOML (``text`` at ``point``) written into
    ``<experiment folder>/scenarios/<scenario>.<point>.toml`` (E10 and E12 alike)."""
    if point.dimension is None:
        return scenario
    path = ctx.out / "scenarios" / f"{point.run_name(scenario)}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(point_scenario_text(text, point), encoding="utf-8")
    return str(path)


def _point_run(ctx: RunContext, scenario: str, text: str, point: SweepPoint) -> ReplayRun:
    if point.dimension is None:
        return replay(scenario, ctx)
    path = point_scenario(ctx, scenario, text, point)
    extra = ("--no-probe-check",) if point.dimension in PROBES_RECORDED_ONLY else ()
    return replay(point.run_name(scenario), ctx, path, extra)


def run_e12(exp: Experiment, ctx: RunContext) -> Measurement:
    why = _why_not(ctx)
    if why is not None:
        return Measurement(experiment=exp.id, quick=ctx.quick, not_run=why)
    texts = {s: scenario_text(s)[0] for s in exp.scenarios}
    base = base_link(tomllib.loads(texts[exp.scenarios[0]]))
    try:
        plan = plan_points(exp.sweep_points(ctx.quick), base)
    except ValueError as exc:
        raise UserError(f"{exp.id}: {exc}") from None
    runs: dict[tuple[str, str], ReplayRun] = {}
    failed: list[str] = []
    for i, point in enumerate(plan):
        for tag, scenario in zip(TAGS, exp.scenarios, strict=True):
            ctx.progress(f"point {i + 1}/{len(plan)} {point.key}: {scenario}")
            try:
                runs[point.key, tag] = _point_run(ctx, scenario, texts[scenario], point)
            except UserError as exc:
                failed.append(f"{point.run_name(scenario)} failed: {exc}")
    if not runs:
        return Measurement(
            experiment=exp.id, quick=ctx.quick, not_run="; ".join(failed) or "no point ran"
        )
    values: list[Value] = []
    for point in plan:
        values += _point_values(point, runs)
    series = [
        _trend(plan, dim, q, base, values) for dim in exp.sweep_points(ctx.quick) for q in QUANTILES
    ]
    notes = [
        "each point changes one link field, the others at the scenarios' own line "
        f"({', '.join(f'{d} {point_value(plan[0], d, base):g}' for d in DIMENSIONS)}); "
        "a rate point also sets the PDD router's configured line rate (its prior)",
        "intervals: bootstrap over ok requests (ratios: the two replays resampled apart)",
        f"link probes recorded, not enforced, at the {', '.join(PROBES_RECORDED_ONLY)} points"
        " (in-order jitter lowers bulk TCP goodput below the probe's bar by design)",
        *failed,
    ]
    return measurement(exp, ctx, list(runs.values()), values, series, notes)


def _point_values(point: SweepPoint, runs: dict[tuple[str, str], ReplayRun]) -> list[Value]:
    out: list[Value] = []
    got = {tag: runs.get((point.key, tag)) for tag in TAGS}
    for tag, r in got.items():
        if r is None:
            continue
        out += [pct_value(f"{tag}_{point.key}_p{q}", ttft(r), q) for q in QUANTILES]
        if "goodput" in r.analysis.metrics:
            out.append(Value(name=f"{tag}_{point.key}_goodput", value=r.metric("goodput"),
                             unit="req/s"))  # fmt: skip
    naive, pdd = got["naive"], got["pdd"]
    for q in QUANTILES:
        if naive is None or pdd is None:
            v = lo = hi = float("nan")
        else:
            v, lo, hi = ratio_interval(ttft(pdd), ttft(naive), q)
        out.append(Value(name=f"ratio_{point.key}_p{q}", value=v, unit="x", low=lo, high=hi))
    return out


def _trend(plan: list[SweepPoint], dim: str, q: int, base: dict, values: list[Value]) -> Series:
    by_name = {v.name: v.value for v in values}
    pts = dimension_points(plan, dim)
    return Series(
        label=trend_label(dim, q),
        x=[point_value(p, dim, base) for p in pts],
        y=[by_name.get(f"ratio_{p.key}_p{q}", float("nan")) for p in pts],
        x_name=DIMENSIONS[dim][1],
        y_name="PDD / naive cross-DC TTFT",
        log_y=True,
    )
