"""``pddbench capacity``: the highest offered load at which a system still meets its SLA.

Deploys the scenario **once** and runs a short replay per load point (load scale = the
factor by which session arrivals are compressed on top of the base selection), each in
its own run folder; the search itself (bracketing, then interpolation) is the pure
:func:`~pddbench.harness.analysis.capacity.find_capacity`. Writes ``capacity.json`` (the
load/attainment/goodput curve) into the last run folder and next to the runs, so
``pddbench report`` draws it.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from pddbench.harness.analysis.capacity import CapacityPoint, find_capacity, to_curve
from pddbench.harness.analysis.rundir import load_run
from pddbench.harness.analysis.sla import parse_sla_overrides, sla_from_mapping, with_overrides
from pddbench.harness.analysis.summary import analyze_run
from pddbench.harness.cli.options import build_options, parse_duration, selection_options
from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.deploy.systems import deploy, enter_netns
from pddbench.harness.drive.live import LiveView
from pddbench.harness.drive.replay import prepare, run_replay
from pddbench.harness.pipeline import load_trace, scenario_options, trace_manifest
from pddbench.harness.rundir.folder import RunPaths, new_run
from pddbench.harness.rundir.manifest import RunManifest


@click.command("capacity")
@click.option("--trace", "trace_path", required=True, type=click.Path(path_type=Path))
@click.option("--scenario", "scenario_name", required=True, metavar="NAME|FILE")
@click.option("--target", "target_pct", type=float, default=None,
              help="SLA attainment target in percent (default: the scenario's SLA target).")
@click.option("--sla", "sla_text", default=None, help="SLA overrides, e.g. ttft=2,tpot=30ms.")
@click.option("--start", "start_load", type=float, default=1.0, show_default=True,
              help="First load scale to try.")
@click.option("--point-duration", default="60s", show_default=True,
              help="How long each load point sends requests.")
@click.option("--max-runs", type=int, default=6, show_default=True)
@click.option("--out", "out_root", type=click.Path(path_type=Path), default=Path("results"),
              show_default=True)
@click.option("--no-emulation", is_flag=True)
@selection_options
def capacity(trace_path: Path, scenario_name: str, target_pct: float | None, sla_text: str | None,
             start_load: float, point_duration: str, max_runs: int, out_root: Path,
             no_emulation: bool, **kw: object) -> None:
    """Find the highest load (arrival-rate scale) meeting the SLA attainment target."""
    options = build_options(**kw)  # type: ignore[arg-type]
    scenario = load_scenario(scenario_name)
    options = dataclasses.replace(
        scenario_options(options, scenario),
        max_duration_s=parse_duration(point_duration, "--point-duration"),
    )
    trace = load_trace(trace_path)
    base_speedup = options.selection.speedup
    declared = scenario.sla.model_dump(exclude_unset=True) if scenario.sla else None
    sla = with_overrides(sla_from_mapping(declared, where=f"scenario {scenario.name}"),
                         parse_sla_overrides(sla_text) if sla_text else {})
    target = target_pct if target_pct is not None else sla.target_pct
    argv = ["pddbench", *sys.argv[1:]]
    runs: list[Path] = []
    deploy_dir = new_run(out_root, f"{scenario.name}-capacity")
    with deploy(scenario, deploy_dir, emulate=not no_emulation) as (info, client_ns):

        def run_at(load: float) -> CapacityPoint:
            opts = dataclasses.replace(
                options, selection=dataclasses.replace(options.selection,
                                                       speedup=base_speedup * load))
            plan = prepare(trace, opts)
            paths = new_run(out_root, f"{scenario.name}-x{load:g}")
            manifest = RunManifest.begin(argv=argv, run_id=paths.run_id)
            manifest.scenario = scenario.manifest()
            manifest.trace = trace_manifest(trace, trace_path, plan)
            manifest.deployment = dataclasses.asdict(info)
            manifest.links = info.links
            manifest.load_scale = load
            with enter_netns(client_ns):
                outcome = run_replay(plan, opts, info.front_door, paths, manifest,
                                     live=LiveView(f"{scenario.name} x{load:g}"))
            if outcome.interrupted:
                raise KeyboardInterrupt
            runs.append(paths.root)
            analysis = analyze_run(load_run(paths.root), sla=sla)
            attainment = analysis.metrics.value("sla_attainment")
            point = CapacityPoint(
                load_scale=load,
                attainment=0.0 if attainment != attainment else float(attainment),
                goodput=analysis.metrics.value("goodput"),
                offered_rps=analysis.metrics.value("offered_rps"),
            )
            click.echo(f"load x{load:g}: attainment {point.attainment:.1%}, "
                       f"goodput {point.goodput:.2f} req/s", err=True)
            return point

        try:
            result = find_capacity(run_at, target_pct=target, start=start_load,
                                   max_runs=max_runs)
        except KeyboardInterrupt:
            raise click.exceptions.Exit(130) from None
    curve = to_curve(result, system=scenario.name, sla=sla.model_dump())
    text = curve.model_dump_json(indent=2)
    for folder in (runs[-1] if runs else deploy_dir.root, out_root):
        RunPaths(Path(folder)).capacity.write_text(text)
    if result.capacity is None:
        click.echo(f"{scenario.name}: no load tried met {target:g}% attainment")
    else:
        click.echo(f"{scenario.name}: capacity x{result.capacity:g} of the base arrival rate "
                   f"(estimate x{result.estimate:g}) at {target:g}% SLA attainment")
    click.echo(f"curve: {Path(out_root) / 'capacity.json'}")
