"""The sizing search: a system's best deployment at a budget, measured on the twin.

Prices every candidate of the scenario's template within the budget with the compute
model (:mod:`~pddbench.harness.sizing.rank`), walks the virtual-time twin's capacity
ladder (:func:`~pddbench.harness.jobs.ladder.run_ladder` with the virtual backend: the
same servers' decision code, the same steady points as an emulated walk) for the best
``top`` and for the scenario's own deployment, reads the binding resource at each walk's
lowest missed point (:mod:`~pddbench.harness.sizing.binding`) and chooses the highest
twin BCR. With ``seeds`` > 1 each candidate walks at that many deployment seeds and is
read at the median seed's walk (:func:`median_walk`), the capacities of all beside it.
Prints progress with an ETA; returns (and saves) a
:class:`~pddbench.harness.sizing.result.SizingResult`. Decides nothing the ladder, the
bounds or the ranking decide; chooses only among what they measured.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
import numpy as np

from pddbench.harness.analysis.rundir import load_run
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.scenario import Scenario
from pddbench.harness.config.sla import SLA
from pddbench.harness.jobs.equal_cost import capacity_fields
from pddbench.harness.jobs.ladder import ladder_origin, run_ladder
from pddbench.harness.jobs.run_system import RunSettings
from pddbench.harness.plan.ladder_points import LadderSettings, Schedule
from pddbench.harness.plan.steady import SteadyIndex
from pddbench.harness.rundir.ladder import LadderVerdict
from pddbench.harness.rundir.sections import TraceInfo
from pddbench.harness.sizing.binding import measured_binding
from pddbench.harness.sizing.bounds import Decoding, Workload
from pddbench.harness.sizing.rank import Ranked, shortlist
from pddbench.harness.sizing.result import SizedRow, SizingResult
from pddbench.harness.sizing.space import enumerate_candidates, template
from pddbench.workloads.traceio import Trace

Echo = Callable[[str], None]
WORKLOAD_WINDOW_S = 3600.0  # the trace time the bounds' means are taken over, from the origin


def workload(steady: SteadyIndex, origin_s: float) -> Workload:
    """The per-request means of the trace's hour from the ladder's origin."""
    inp, hit, out = steady.window_requests(origin_s, WORKLOAD_WINDOW_S)
    return Workload.of(inp, hit, out)


def decoding(scenario: Scenario, sla: SLA) -> Decoding:
    dep = scenario.deployment_config
    return Decoding(
        tpot_s=sla.tpot_s if sla.tpot_s is not None else 0.05,
        draft_tokens=dep.speculative.draft_tokens,
        acceptance=dep.speculative.acceptance,
        chunk_tokens=dep.scheduler.chunk_tokens,
        max_batch=dep.scheduler.max_batch,
        step_overhead_s=dep.scheduler.step_overhead_s,
        hbm_reserve_fraction=dep.scheduler.hbm_reserve_fraction,
    )


def size_system(
    scenario: Scenario,
    trace: Trace,
    options: ReplayOptions,
    settings: LadderSettings,
    sla: SLA,
    *,
    budget: float,
    top: int,
    trace_info: TraceInfo,
    run_settings: RunSettings,
    steady: SteadyIndex,
    schedule: Schedule | None = None,
    seeds: int = 1,
    echo: Echo = lambda s: click.echo(s, err=True),
) -> SizingResult:
    """Size ``scenario`` at ``budget`` (see the module docstring); ``seeds``: walk each
    candidate at deployment seeds 0..seeds-1 and read it at the median seed's walk."""
    began = time.monotonic()
    roles, line = template(scenario)
    w = workload(steady, ladder_origin(trace, options))
    ranked, own, priced = shortlist(
        scenario, enumerate_candidates(roles, line, budget), w, decoding(scenario, sla), top
    )
    todo: list[tuple[str, Ranked]] = [("sized", r) for r in ranked]
    if all(r.candidate.shape != own.candidate.shape for r in ranked):
        todo.append(("built-in", own))
    echo(
        f"pddbench: sizing {scenario.name} at {budget:g} A-eq.: {priced} candidates priced "
        f"({w.text()}); measuring {len(todo)} on the twin"
    )
    virtual = dataclasses.replace(run_settings, virtual=True)
    rows: list[SizedRow] = []

    def walk(candidate: Scenario, where: Path) -> Walk:
        return run_ladder(
            candidate, trace, options, settings, sla,
            trace_info=trace_info,
            run_settings=dataclasses.replace(virtual, out_root=where),
            schedule=schedule, steady=steady, echo=lambda s: None,
        )  # fmt: skip

    for k, (source, r) in enumerate(todo):
        t0 = time.monotonic()
        folder = Path(run_settings.out_root) / f"sizing-{scenario.name}" / f"{k}"
        seeded = walk_seeds(r.scenario, seeds, folder, walk)
        verdict, folders = seeded.median
        resource, detail = ladder_binding(verdict, by_index(verdict, folders), sla)
        row = SizedRow(
            **_bound_fields(source, r),
            **seeded.fields[seeded.mid],
            binding=resource,
            binding_detail=detail,
            wall_s=time.monotonic() - t0,
            seed_capacities=seeded.capacities,
        )
        rows.append(row)
        spent = time.monotonic() - began
        left = (len(todo) - k - 1) * spent / (k + 1)
        echo(
            f"pddbench: sizing {scenario.name}: {k + 1}/{len(todo)} {row.deployment} "
            f"(cost {row.cost:.4g}): twin {row.capacity_text()} req/s"
            + (f" (over {seeds} seeds {row.seeds_text()})" if seeds > 1 else "")
            + ", bound by "
            f"{row.binding}; {row.wall_s:.0f} s, ETA {left:.0f} s"
        )
    best = [i for i, row in enumerate(rows) if row.bcr is not None]
    chosen = max(best, key=lambda i: (rows[i].bcr, -rows[i].cost)) if best else None
    return SizingResult(
        system=scenario.name,
        budget=budget,
        workload=w.text(),
        priced=priced,
        rows=rows,
        chosen=chosen,
        reason="" if best else "no candidate reached a capacity on the twin",
        wall_s=time.monotonic() - began,
    )


Walk = tuple[LadderVerdict, list[Path]]  # a ladder's verdict and its points' run folders


@dataclasses.dataclass(frozen=True)
class SeededWalks:
    """One deployment's walks at deployment seeds 0..N-1, read at the median seed's."""

    walks: list[Walk]
    fields: list[dict[str, Any]]  # each walk's capacity fields (:func:`capacity_fields`)
    mid: int  # the median walk's index (:func:`median_walk`)

    @property
    def median(self) -> Walk:
        return self.walks[self.mid]

    @property
    def capacities(self) -> list[float | None]:
        """Every seed's capacity when there are several; empty for one walk."""
        return [f["capacity"] for f in self.fields] if len(self.walks) > 1 else []


def walk_seeds(
    scenario: Scenario, seeds: int, folder: Path, walk: Callable[[Scenario, Path], Walk]
) -> SeededWalks:
    """``walk(scenario, folder)`` once (``seeds`` 1: the scenario's own seed), or at
    deployment seeds 0..seeds-1 into ``folder/seed<k>``; each walk's capacity read once."""
    walks: list[Walk] = []
    for seed in range(seeds):
        where = folder / f"seed{seed}" if seeds > 1 else folder
        where.mkdir(parents=True, exist_ok=True)
        walks.append(walk(scenario if seeds == 1 else scenario.with_seed(seed), where))
    fields = [capacity_fields(v) for v, _ in walks]
    return SeededWalks(walks, fields, median_walk([f["capacity"] for f in fields]))


def median_walk(capacities: Sequence[float | None]) -> int:
    """The index of the median walk by capacity (a walk without one ranks lowest; of an
    even count, the lower middle: the conservative one)."""
    order = sorted(
        range(len(capacities)),
        key=lambda i: (capacities[i] is not None, capacities[i] or 0.0, -i),
    )
    return order[(len(order) - 1) // 2]


def _bound_fields(source: str, r: Ranked) -> dict[str, Any]:
    """A candidate's row fields before the twin: deployment, cost, the model's bound."""
    b = r.binding
    return {
        "deployment": r.text(),
        "source": source,
        "cost": r.cost,
        "bound_rps": b.req_per_s,
        "bound_resource": b.resource,
        "bound_detail": f"{b.role}: {b.detail}",
        "scenario": r.scenario.model_dump(exclude_unset=True, mode="json"),
    }


def ladder_binding(verdict: LadderVerdict, runs: Mapping[int, Path], sla: SLA) -> tuple[str, str]:
    """The binding resource at the walk's lowest missed point (``runs``: each point's run
    folder by its index), and how it was read."""
    target = verdict.target_pct / 100.0
    missed = [
        p
        for p in verdict.points
        if p.excluded is None and p.attainment < target and p.index in runs
    ]
    if not missed:
        return "none reached", f"no point missed the SLA ({verdict.basis})"
    p = min(missed, key=lambda q: q.planned_rps or q.offered_rps)
    records = load_run(runs[p.index], token_times=False).records
    intended = records.num["intended_send_s"]
    end = verdict.warmup_s + (p.measure_s or verdict.point_s)
    measured = records.sent & ~records.censored & (intended >= verdict.warmup_s) & (intended < end)
    resource, detail = measured_binding(records, sla, np.asarray(measured))
    return resource, f"at {p.label()}: {detail}"


def by_index(verdict: LadderVerdict, folders: list[Path]) -> dict[int, Path]:
    """A walk's run folders by point index (``run_ladder`` returns them in point order)."""
    return {p.index: f for p, f in zip(verdict.points, folders, strict=False)}
