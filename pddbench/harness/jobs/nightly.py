"""The nightly job (``pddbench nightly CONFIG --out DIR``): a matrix of replays for the history.

The matrix is scenarios × traces × seeds, each point repeated (repeats give
``pddbench regress`` its run-to-run noise; 3 is recommended). Traces are files or
synthetic profiles generated once per night into ``DIR/_traces``. Every run folder lands
directly in ``DIR`` (the history layout is ``HISTORY/<date>/<run folders>``). Exit status:
0 when every point ran, 1 when some failed, 130 when interrupted. The configuration is
:class:`~pddbench.harness.config.nightly.NightlyConfig`; every point is one
:func:`~pddbench.harness.jobs.replay.replay_scenarios`.

Config (TOML)::

    scenarios = ["same-dc-pd", "cross-dc-pd", "pdd"]
    seeds = [0]
    repeats = 3
    [[traces]]
    synth = "jan-feb"      # or: path = "traces/mine.parquet"
    requests = 20000
    [replay]               # the replay options, as on the command line
    window = "3d/1h"
    speedup = 10.0
    duration = "120s"
"""

from __future__ import annotations

from pathlib import Path

import click

from pddbench.harness.config.nightly import NightlyConfig, TraceSpec
from pddbench.harness.config.preflight import check_out_folder, load_trace
from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.drive.backends import AsyncioBackend
from pddbench.harness.drive.replay import prepare
from pddbench.harness.jobs.replay import replay_scenarios, trace_manifest
from pddbench.harness.jobs.run_system import RunSettings


def materialise_trace(spec: TraceSpec, folder: Path, base: Path) -> Path:
    """The trace file of ``spec`` (synthetic ones are generated into ``folder``)."""
    if spec.path is not None:
        path = Path(spec.path)
        return path if path.is_absolute() else (base / path)
    from pddbench.workloads.synth import SynthOptions, synthesise
    from pddbench.workloads.synth_profile import load_profile
    from pddbench.workloads.traceio import write_trace

    out = folder / f"{spec.label}.parquet"
    if not out.exists():
        trace = synthesise(
            load_profile(spec.synth or ""),
            SynthOptions(
                requests=spec.requests, sessions=spec.sessions, days=spec.days, seed=spec.seed
            ),
        )
        write_trace(trace.table, out, source=trace.source, epoch=trace.epoch)
    return out


def nightly_job(cfg: NightlyConfig, config_path: Path, out_dir: Path, argv: list[str]) -> int:
    """Run the matrix of ``cfg`` (read from ``config_path``) into ``out_dir``; the exit
    status (0, 1 when some point failed, 130 when interrupted)."""
    check_out_folder(out_dir)  # before the folder is made: --out naming a file says so
    out_dir.mkdir(parents=True, exist_ok=True)
    traces_dir = out_dir / "_traces"
    traces_dir.mkdir(exist_ok=True)
    scenarios = [load_scenario(n) for n in cfg.scenarios]
    runs = RunSettings(out_dir, argv, emulate=cfg.emulate)
    failed = 0
    for spec in cfg.traces:
        trace_path = materialise_trace(spec, traces_dir, config_path.parent)
        trace = load_trace(trace_path)
        for seed in cfg.seeds:
            options = cfg.options(seed)
            plan = prepare(trace, options)
            runs.preflight(scenarios, plan, options)
            info = trace_manifest(trace, trace_path, plan)
            for repeat in range(cfg.repeats):
                click.echo(
                    f"nightly: {spec.label} seed {seed} repeat {repeat + 1}/{cfg.repeats}", err=True
                )
                _runs, interrupted, bad = replay_scenarios(
                    scenarios,
                    plan=plan,
                    options=options,
                    trace_info=info.model_copy(update={"repeat": repeat}),
                    settings=runs,
                    backend=AsyncioBackend(),
                )
                failed += bad
                if interrupted:
                    return 130
    click.echo(f"nightly: done, {failed} failed point(s); runs in {out_dir}")
    return 1 if failed else 0
