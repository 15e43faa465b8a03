"""The nightly history on disk, and the metric values of its runs.

Layout (one folder per night, named so that names sort in time order — ISO dates)::

    DIR/
      2026-03-01/
        <run folder>/      requests.parquet + manifest.json (any folder name)
        <run folder>/      a repeat of a scenario, or another scenario
      2026-03-02/
        ...

Runs are matched across nights by scenario name (``manifest["scenario"]["name"]``);
several runs of one scenario in one night are repeats (their spread is the repeated-run
noise). A night folder may also hold run folders one level deeper (e.g.
``2026-03-01/matrix/<run>``). Owns finding and reading these folders and computing the
requested metric keys per run through the metrics registry; decides nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pddbench.errors import UserError
from pddbench.harness.analysis.registry import Context, MetricRegistry, split_key
from pddbench.harness.analysis.rundir import load_run, read_manifest
from pddbench.harness.analysis.rundir import scenario_sla as declared_sla
from pddbench.harness.analysis.stats import DEFAULT_PERCENTILES
from pddbench.harness.config.sla import DEFAULT_SLA, SLA, with_overrides
from pddbench.harness.rundir.folder import RunPaths


@dataclass(frozen=True)
class RunValues:
    """The metric values (base units) of one run."""

    path: Path
    night: str
    scenario: str
    run_id: str
    values: dict[str, float]


def run_folders(path: Path, depth: int = 2) -> list[Path]:
    """``path`` itself if it is a run folder, else the run folders below it (sorted)."""
    if RunPaths(path).manifest.is_file():
        return [path]
    if depth == 0 or not path.is_dir():
        return []
    out: list[Path] = []
    for child in sorted(p for p in path.iterdir() if p.is_dir()):
        out.extend(run_folders(child, depth - 1))
    return out


def nights(history: Path) -> list[tuple[str, list[Path]]]:
    """(night name, run folders) for every night folder of ``history``, oldest first."""
    if not history.is_dir():
        raise UserError(f"--history {history}: no such folder")
    out = []
    for night in sorted(p for p in history.iterdir() if p.is_dir()):
        runs = run_folders(night)
        if runs:
            out.append((night.name, runs))
    return out


def scenario_sla(folder: Path, overrides: dict[str, float]) -> SLA:
    """The SLA to judge a scenario by: ``--sla`` over the run's own scenario SLA."""
    manifest = read_manifest(folder)
    base = declared_sla(manifest, RunPaths(folder).manifest) or DEFAULT_SLA
    return with_overrides(base, overrides) if overrides else base


def percentiles_for(keys: Sequence[str]) -> tuple[float, ...]:
    """The default percentiles plus any ``pNN`` the keys ask for."""
    wanted = set(DEFAULT_PERCENTILES)
    for key in keys:
        stat = split_key(key)[1]
        if stat and stat.startswith("p"):
            try:
                wanted.add(float(stat[1:]))
            except ValueError:
                raise UserError(f"--metric {key}: {stat!r} is not a statistic") from None
    return tuple(sorted(wanted))


def measure(
    folder: Path,
    night: str,
    keys: Sequence[str],
    registry: MetricRegistry,
    sla_by_scenario: dict[str, SLA],
) -> RunValues:
    """The metric ``keys`` of one run folder."""
    run = load_run(folder, token_times=any(split_key(k)[0] == "itl" for k in keys))
    sla = sla_by_scenario.get(run.scenario_name) or run.sla() or DEFAULT_SLA
    tags = {split_key(k)[0] for k in keys}
    ctx = Context(percentiles=percentiles_for(keys), sla=sla, cost=run.cost())
    ms = registry.compute(run.records, ctx, tags)
    return RunValues(folder, night, run.scenario_name, run.run_id, {k: ms.value(k) for k in keys})
