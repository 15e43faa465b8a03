"""Running a selection of experiments into one out folder, with progress and an ETA.

Owns the loop of ``pddbench experiment run``: for each selected declaration, run it (or
record why it cannot run), stamp its wall time, save its measurement into
``<out>/<id>/``, and say how far along the run is. The ETA is the declared cost of the
experiments still to run, scaled by how the finished ones compared with their
declarations. A failing experiment becomes a *not run* measurement with the failure as
its reason; it never loses the others' results.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pddbench.errors import UserError
from pddbench.harness.experiments.catalog import planned_costs, total_cost
from pddbench.harness.experiments.model import Experiment, Measurement, RunContext
from pddbench.harness.rundir.folder import RunPaths


def eta_s(
    remaining: list[Experiment], done: list[tuple[float, float]], quick: bool, replayed: set[str]
) -> float:
    """Seconds left: the declared cost of ``remaining`` (replays already in the folder free)
    × actual / declared of the finished ones (``done``: (declared, actual) pairs; >= 0.5)."""
    declared = sum(d for d, _ in done)
    actual = sum(t for _, t in done)
    scale = max(0.5, actual / declared) if declared > 0 else 1.0
    return scale * total_cost(remaining, quick, replayed)


def replayed_scenarios(out: Path) -> set[str]:
    """Scenarios with a finished replay in ``<out>/runs/`` (reused by the experiments)."""
    runs = out / "runs"
    if not runs.is_dir():
        return set()
    return {
        d.name
        for d in runs.iterdir()
        if d.is_dir() and any(RunPaths(r).manifest.exists() for r in d.iterdir() if r.is_dir())
    }


def _clock(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def run_experiments(
    exps: list[Experiment],
    out: Path,
    *,
    quick: bool,
    emulate: bool = False,
    trace: Path | None = None,
    echo: Callable[[str], None] = print,
) -> list[Measurement]:
    out.mkdir(parents=True, exist_ok=True)
    done: list[tuple[float, float]] = []
    results = []
    start = time.monotonic()
    for i, exp in enumerate(exps):
        replayed = replayed_scenarios(out)
        eta = eta_s(exps[i:], done, quick, replayed)
        declared = planned_costs([exp], quick, replayed)[0]
        echo(
            f"[{i + 1}/{len(exps)}] {exp.id} {exp.title} — elapsed "
            f"{_clock(time.monotonic() - start)}, ETA {_clock(eta)}"
        )
        folder = out / exp.id
        ctx = RunContext(
            out=folder,
            quick=quick,
            emulate=emulate,
            trace=trace,
            progress=lambda msg: echo(f"    {msg}"),
        )
        t0 = time.monotonic()
        if exp.run is None:
            m = Measurement(experiment=exp.id, quick=quick, not_run=exp.not_run_reason)
        else:
            try:
                m = exp.run(exp, ctx)
            except UserError as exc:
                m = Measurement(experiment=exp.id, quick=quick, not_run=f"failed: {exc}")
        m.elapsed_s = time.monotonic() - t0
        m.save(folder)
        verdict, _ = exp.judge(m)
        echo(f"    {exp.id}: {verdict.value} ({m.elapsed_s:.0f} s)")
        done.append((declared, m.elapsed_s))
        results.append(m)
    return results
