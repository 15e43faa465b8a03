"""``pddbench nightly CONFIG --out DIR``: run a matrix of replays for the nightly history.

The matrix is scenarios × traces × seeds, each point repeated (repeats give
``pddbench regress`` its run-to-run noise; 3 is recommended). Traces are files or
synthetic profiles generated once per night into ``DIR/_traces``. Every run folder lands
directly in ``DIR`` (the history layout is ``HISTORY/<date>/<run folders>``). Exit status:
0 when every point ran, 1 when some failed, 130 when interrupted.

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

import sys
import tomllib
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pddbench.errors import UserError
from pddbench.harness.cli.options import build_options
from pddbench.harness.config.preflight import check_out_folder, load_trace
from pddbench.harness.drive.replay import prepare
from pddbench.harness.pipeline import replay_scenarios, trace_manifest


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TraceSpec(_Strict):
    path: str | None = None
    synth: str | None = None  # a synthetic profile name or file
    requests: int | None = Field(None, gt=0)
    sessions: int | None = Field(None, gt=0)
    days: float | None = Field(None, gt=0)
    seed: int = 0

    @model_validator(mode="after")
    def _one(self) -> TraceSpec:
        if (self.path is None) == (self.synth is None):
            raise ValueError("a trace needs exactly one of path or synth")
        return self

    @property
    def label(self) -> str:
        return Path(self.path).stem if self.path else f"{Path(self.synth or '').stem}-s{self.seed}"


class ReplaySettings(_Strict):
    window: str | None = None
    sample: float = 1.0
    speedup: float = 1.0
    max_requests: int | None = None
    duration: str | None = None
    think_policy: str = "trace"
    on_error: str = "continue"
    max_concurrency: int | None = None
    timeout: str = "15m"
    stall_timeout: str = "120s"


class NightlyConfig(_Strict):
    scenarios: list[str] = Field(min_length=1)
    traces: list[TraceSpec] = Field(min_length=1)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    repeats: int = Field(3, ge=1, le=20)
    replay: ReplaySettings = ReplaySettings()
    emulate: bool = True


def load_config(path: Path) -> NightlyConfig:
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML: {exc}") from None
    try:
        return NightlyConfig.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise UserError(f"{path}: {loc}: {str(err['msg']).removeprefix('Value error, ')}") from None


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


@click.command("nightly")
@click.argument("config_path", type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    required=True,
    help="Tonight's folder, e.g. nightly/2026-11-30 (run folders land here).",
)
def nightly(config_path: Path, out_dir: Path) -> None:
    """Run the nightly matrix in CONFIG_PATH into --out."""
    cfg = load_config(config_path)
    check_out_folder(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    traces_dir = out_dir / "_traces"
    traces_dir.mkdir(exist_ok=True)
    argv = ["pddbench", *sys.argv[1:]]
    failed = 0
    for spec in cfg.traces:
        trace_path = materialise_trace(spec, traces_dir, config_path.parent)
        trace = load_trace(trace_path)
        for seed in cfg.seeds:
            settings: dict[str, Any] = cfg.replay.model_dump()
            options = build_options(
                seed=seed, api="openai", model=None, token_times=False, **settings
            )
            plan = prepare(trace, options)
            info = trace_manifest(trace, trace_path, plan)
            for repeat in range(cfg.repeats):
                click.echo(
                    f"nightly: {spec.label} seed {seed} repeat {repeat + 1}/{cfg.repeats}", err=True
                )
                _runs, interrupted, bad = replay_scenarios(
                    tuple(cfg.scenarios),
                    plan=plan,
                    options=options,
                    out_root=out_dir,
                    argv=argv,
                    trace_info={**info, "repeat": repeat},
                    emulate=cfg.emulate,
                    check_probes=True,
                )
                failed += bad
                if interrupted:
                    raise click.exceptions.Exit(130)
    click.echo(f"nightly: done, {failed} failed point(s); runs in {out_dir}")
    if failed:
        raise click.exceptions.Exit(1)
