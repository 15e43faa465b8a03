"""The nightly check: tonight's runs against the history, one verdict per scenario × metric.

Owns the orchestration of ``pddbench regress``: find the history's nights and tonight's
runs, measure the requested metrics of every run (one SLA per scenario: ``--sla`` over
tonight's scenario SLA, applied to the whole history so attainment stays comparable),
group values by scenario and night, and ask ``verdict.judge`` for each metric. Tonight's
own night folder, if it lies inside the history, is left out of the history; a history
run that cannot be read (e.g. a crashed run without ``requests.parquet``) is skipped with
a note, while an unreadable run tonight is an error (exit 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pddbench.errors import UserError
from pddbench.harness.analysis.metrics.catalog import CORE_KEYS
from pddbench.harness.analysis.registry import Direction, default_registry, split_key
from pddbench.harness.analysis.rundir import read_manifest
from pddbench.harness.config.sla import SLA
from pddbench.harness.regress.history import (
    RunValues,
    measure,
    nights,
    run_folders,
    scenario_sla,
)
from pddbench.harness.regress.verdict import MetricVerdict, RegressConfig, Verdict, judge

DEFAULT_KEYS: tuple[str, ...] = (*CORE_KEYS, "error_rate")


@dataclass
class ScenarioResult:
    scenario: str
    sla: SLA
    current_runs: list[str]
    verdicts: list[MetricVerdict]


@dataclass
class RegressResult:
    history: Path
    nights: list[str]
    scenarios: list[ScenarioResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def all(self) -> list[tuple[str, MetricVerdict]]:
        return [(s.scenario, v) for s in self.scenarios for v in s.verdicts]

    @property
    def regressions(self) -> list[tuple[str, MetricVerdict]]:
        return [(s, v) for s, v in self.all() if v.verdict is Verdict.REGRESSION]

    @property
    def exit_code(self) -> int:
        return 1 if self.regressions else 0


def check_keys(keys: Sequence[str]) -> list[tuple[str, Direction, float]]:
    """(key, direction, min change) of each key; UserError for an unknown metric."""
    registry = default_registry()
    out = []
    for key in keys:
        tag, stat = split_key(key)
        if tag not in registry:
            raise UserError(f"--metric {key}: unknown metric {tag!r}")
        metric = registry[tag]
        if stat is not None and metric.kind != "distribution":
            raise UserError(f"--metric {key}: {tag} is a single number, drop {'.' + stat!r}")
        if stat is None and metric.kind == "distribution":
            raise UserError(f"--metric {key}: name a statistic, e.g. {tag}.p99")
        out.append((key, metric.direction, metric.min_change))
    return out


def regress(
    history: str | Path,
    current: Sequence[str | Path],
    *,
    keys: Sequence[str] = DEFAULT_KEYS,
    config: RegressConfig | None = None,
    sla_overrides: dict[str, float] | None = None,
) -> RegressResult:
    """Judge tonight's runs (``current``: run folders or folders of run folders)."""
    cfg = config or RegressConfig()
    specs = check_keys(keys)
    history = Path(history)
    current_runs: list[Path] = []
    for c in current:
        found = run_folders(Path(c))
        if not found:
            raise UserError(f"--current {c}: not a run folder and holds none")
        current_runs.extend(found)
    cur_resolved = {p.resolve() for p in current_runs}
    all_nights = nights(history)
    kept = []
    for name, runs in all_nights:
        if any(r.resolve() in cur_resolved for r in runs):
            continue  # tonight's own folder
        kept.append((name, runs))
    registry = default_registry()
    key_list = [k for k, _, _ in specs]
    slas: dict[str, SLA] = {}
    tonight: list[RunValues] = []
    for folder in current_runs:
        scenario = read_manifest(folder).scenario_name
        if scenario not in slas:
            slas[scenario] = scenario_sla(folder, sla_overrides or {})
        tonight.append(measure(folder, "tonight", key_list, registry, slas))
    past: list[RunValues] = []
    skipped: list[str] = []
    for name, runs in kept:
        for folder in runs:
            try:  # a crashed night's run must not block every later night
                past.append(measure(folder, name, key_list, registry, slas))
            except UserError as exc:
                skipped.append(f"skipped history run {exc}")
    result = RegressResult(history, [n for n, _ in kept], notes=skipped)
    for scenario in dict.fromkeys(r.scenario for r in tonight):
        mine = [r for r in tonight if r.scenario == scenario]
        hist = [r for r in past if r.scenario == scenario]
        night_names = list(dict.fromkeys(r.night for r in hist))
        verdicts = []
        for key, direction, min_change in specs:
            per_night = [[r.values[key] for r in hist if r.night == n] for n in night_names]
            verdicts.append(
                judge(
                    key,
                    night_names,
                    per_night,
                    [r.values[key] for r in mine],
                    direction=direction,
                    min_change=min_change,
                    config=cfg,
                )
            )
        result.scenarios.append(
            ScenarioResult(scenario, slas[scenario], [r.run_id for r in mine], verdicts)
        )
        if not hist:
            result.notes.append(f"{scenario}: no history for this scenario yet")
    return result
