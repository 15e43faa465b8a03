"""The twelve declared experiments of PDD.md's table, and the registry that holds them.

Owns the declarations: their words and numbers live in ``experiments.toml`` (title,
PDD.md's own wording — ``expected`` is the table's cell verbatim, ``published`` the
figures from "Published results" / "Handoff" / "The workload" —, workload, scenarios,
sweep, metrics, the check in words, the declared cost), validated by
:class:`ExperimentSpec`; the shape check of each is one small function here
(:data:`CHECKS`), its runner one in a ``run_*`` module (:data:`RUNNERS`). Adding an
experiment is one TOML table, one check and (if it runs here) one runner.

Bands are read from PDD.md's words ("≈", "a few %", "about"): "≈ x" is taken as x/2 .. 2x
unless the text gives a range. No band was chosen by looking at a measured value.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field

from pddbench.errors import UserError
from pddbench.harness.experiments import checks as c
from pddbench.harness.experiments.model import (
    CheckResult,
    Cost,
    Experiment,
    Measurement,
    Runner,
)
from pddbench.harness.experiments.run_capacity import CROSS_DC, WORKLOADS, run_e10, value_name
from pddbench.harness.experiments.run_model import run_e2, run_e7_model
from pddbench.harness.experiments.run_replay import (
    run_e4,
    run_e5,
    run_e6,
    run_e8,
    run_e9,
    run_e11,
)
from pddbench.harness.experiments.run_sweep import run_e12, trend_label
from pddbench.harness.experiments.run_trace import run_e1, run_e3


def _e1(m: Measurement) -> CheckResult:
    return c.all_of(
        c.in_band(">=95% hit share", m.get("share_ge_95"), 0.70, 0.80),
        c.in_band("<50% hit share", m.get("share_lt_50"), 0.005, 0.10),
        c.in_band("mean hit", m.get("mean_hit"), 0.85, 0.95),
    )


def _e2(m: Measurement) -> CheckResult:
    u = m.line("uncached tokens/s")
    rev = m.line("revenue, cached at 10%")
    return c.all_of(
        c.dips_near(u.x, u.y, (0.20, 0.40, 0.70), 0.03, need=2),
        c.bathtub(rev.x, rev.y),
    )


def _e3(m: Measurement) -> CheckResult:
    return c.in_band("WAN need without / with DRC", m.get("reduction"), 5.0, 20.0, "x")


def _e4(m: Measurement) -> CheckResult:
    return c.all_of(
        c.in_band("P50 gap cross - same", m.get("p50_gap"), 1.25, 5.0, "s"),
        c.direction(
            "cross P99", m.get("cross_p99"), "3 x cross P50", 3 * m.get("cross_p50"), less=False
        ),
    )


def _e5(m: Measurement) -> CheckResult:
    return c.all_of(
        c.in_band("PDD/naive TTFT P50 - 1", m.get("p50_change"), -0.75, -0.25),
        c.direction("PDD P99", m.get("pdd_p99"), "naive P99 / 2", m.get("cross_p99") / 2),
    )


def _e6(m: Measurement) -> CheckResult:
    return c.in_band("RLD share of output tokens", m.get("rld_share"), 0.03, 0.12)


def _e7(m: Measurement) -> CheckResult:
    parts = [
        c.in_band("KV handoff bytes", m.get("kv_bytes") / 1e6, 2.3, 9.3, "MB"),
        c.in_band("Extend-Decode bytes", m.get("ed_bytes") / 1e3, 0.75, 3.0, "KB"),
        c.direction(
            "Extend-Decode mean", m.get("ed_mean_ms"), "KV mean", m.get("kv_mean_ms"), less=False
        ),
    ]
    if m.wan_emulated:  # the KV peak comes from WAN jitter and queueing: only measured there
        parts.append(
            c.direction("Extend-Decode std", m.get("ed_std_ms"), "KV std", m.get("kv_std_ms"))
        )
    return c.all_of(*parts)


def _e8(m: Measurement) -> CheckResult:
    return c.all_of(
        c.direction(
            "one-shot RLD tokens",
            m.get("one_shot_rld_tokens"),
            "catch-up RLD tokens",
            m.get("catch_up_rld_tokens"),
        ),
        c.direction(
            "one-shot handoff ITL max",
            m.get("one_shot_handoff_itl_max"),
            "catch-up handoff ITL max",
            m.get("catch_up_handoff_itl_max"),
            less=False,
        ),
    )


def _e9(m: Measurement) -> CheckResult:
    return c.all_of(
        c.direction(
            "rld-only relayed share, 2nd half",
            m.get("rld_only_relayed_second"),
            "1st half",
            m.get("rld_only_relayed_first"),
            less=False,
        ),
        c.direction(
            "rld-only MD hit, 2nd half",
            m.get("rld_only_md_hit_second"),
            "pdd MD hit, 2nd half",
            m.get("pdd_md_hit_second"),
        ),
    )


def _e11(m: Measurement) -> CheckResult:
    return c.all_of(
        c.direction("DRC on TTFT P50", m.get("on_p50"), "off", m.get("off_p50")),
        c.direction(
            "DRC on WAN bytes", m.get("on_wan_bytes"), "off / 3", m.get("off_wan_bytes") / 3
        ),
    )


# the line rates E10 must report (Gbit/s): its declared rate_mbit points, full and quick
E10_RATES_GBIT = (10.0, 25.0, 100.0)


def _e10(m: Measurement) -> CheckResult:
    names = {v.name: v.value for v in m.values}

    def get(name: str) -> float:  # absent: not measured, as undefined as a missing capacity
        return names.get(name, math.nan)

    wanted = [(w, s, r) for w in WORKLOADS for s in CROSS_DC for r in E10_RATES_GBIT]
    missing = [f"{s} on {w} at {r:g} Gbit/s" for w, s, r in wanted
               if not math.isfinite(get(value_name("bcr_ratio", w, s, r)))]  # fmt: skip
    complete = CheckResult(
        not missing,
        f"BCR ratio at {len(wanted) - len(missing)} of {len(wanted)} (workload, system, rate)",
        f"no BCR ratio (load-bounded, refused or not measured): {', '.join(missing)}",
    )
    published = [get(value_name("bcr_ratio", WORKLOADS[1], "pdd", r)) for r in E10_RATES_GBIT]
    best = max((r for r in published if math.isfinite(r)), default=math.nan)
    return c.all_of(
        complete,
        c.in_band("pdd cost change", get("cost_change:pdd"), -0.142, -0.0175),
        c.in_band(f"pdd best BCR change on {WORKLOADS[1]}", best - 1, 0.1875, 0.75),
    )


# E12 judges the two dimensions of PDD.md's "expected" cell; loss is measured, not judged.
E12_JUDGED = ("rate_mbit", "jitter_ms")
E12_STEP_TOLERANCE = 0.10  # a step may go back by 10 % of the first ratio (noise), not more


def _e12(m: Measurement) -> CheckResult:
    return c.all_of(
        *(
            c.monotone(
                trend_label(dim, 50),
                m.line(trend_label(dim, 50)).y,
                increasing=False,
                tolerance=E12_STEP_TOLERANCE,
            )
            for dim in E12_JUDGED
        )
    )


CHECKS: dict[str, Callable[[Measurement], CheckResult]] = {
    "E1": _e1, "E2": _e2, "E3": _e3, "E4": _e4, "E5": _e5, "E6": _e6, "E7": _e7, "E8": _e8,
    "E9": _e9, "E10": _e10, "E11": _e11, "E12": _e12,
}  # fmt: skip
RUNNERS: dict[str, Runner] = {
    "E1": run_e1, "E2": run_e2, "E3": run_e3, "E4": run_e4, "E5": run_e5, "E6": run_e6,
    "E7": run_e7_model, "E8": run_e8, "E9": run_e9, "E10": run_e10, "E11": run_e11,
    "E12": run_e12,
}  # fmt: skip


class CostSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    quick_s: float = Field(ge=0)
    full_s: float = Field(ge=0)


class ExperimentSpec(BaseModel):
    """One ``[E<n>]`` table of experiments.toml (validated; unknown keys refused)."""

    model_config = ConfigDict(extra="forbid")

    title: str
    expected: str
    published: str
    workload: str
    scenarios: list[str] = Field(default_factory=list)
    sweep: str = ""
    metrics: list[str] = Field(default_factory=list)
    check: str
    cost: CostSpec
    needs_wan: bool = False
    replayed: bool = False
    figure: str = ""
    not_run: str = ""
    notes: list[str] = Field(default_factory=list)
    points: dict[str, list[float]] = Field(default_factory=dict)
    quick_points: dict[str, list[float]] = Field(default_factory=dict)

    def declare(self, exp_id: str) -> Experiment:
        run = RUNNERS.get(exp_id)
        if run is None and not self.not_run:
            raise AssertionError(f"experiment {exp_id} has no runner and no reason")
        return Experiment(
            id=exp_id, title=self.title, expected=self.expected, published=self.published,
            workload=self.workload, scenarios=tuple(self.scenarios), sweep=self.sweep,
            metrics=tuple(self.metrics), check=CHECKS[exp_id], check_text=self.check,
            cost=Cost(self.cost.quick_s, self.cost.full_s), run=run, needs_wan=self.needs_wan,
            replayed=self.replayed, not_run_reason=self.not_run, figure=self.figure,
            notes=tuple(self.notes),
            points={k: tuple(v) for k, v in self.points.items()},
            quick_points={k: tuple(v) for k, v in self.quick_points.items()},
        )  # fmt: skip


def load_catalog() -> tuple[Experiment, ...]:
    """The declarations of experiments.toml, in its order (ids E1, E2, ...)."""
    text = (resources.files("pddbench.harness.experiments") / "experiments.toml").read_text(
        encoding="utf-8"
    )
    data = tomllib.loads(text)
    return tuple(ExperimentSpec.model_validate(v).declare(k) for k, v in data.items())


EXPERIMENTS: tuple[Experiment, ...] = load_catalog()


def by_id() -> dict[str, Experiment]:
    """The declarations by id; duplicate ids are a programming error."""
    out: dict[str, Experiment] = {}
    for e in EXPERIMENTS:
        if e.id in out:
            raise AssertionError(f"experiment {e.id} declared twice")
        out[e.id] = e
    return out


def select(names: tuple[str, ...]) -> list[Experiment]:
    """Experiments named on the command line (``all`` = every one), in table order."""
    table = by_id()
    wanted = set()
    for n in names:
        key = n.upper()
        if key == "ALL":
            wanted |= set(table)
        elif key in table:
            wanted.add(key)
        else:
            raise UserError(f"unknown experiment {n!r} (known: {', '.join(table)}, all)")
    return [e for e in EXPERIMENTS if e.id in wanted]


# one replay of one scenario (smoke profile, 60 requests at speedup 4, --no-emulation):
# measured 125-130 s on the 2-core machine; full (400 requests) assumed 4x
REPLAY_COST = Cost(quick_s=130, full_s=520)


def planned_costs(exps: list[Experiment], quick: bool, replayed: set[str]) -> list[float]:
    """Each experiment's declared seconds, a scenario's replay charged to its first user only."""
    seen = set(replayed)
    out = []
    for e in exps:
        new = [s for s in e.scenarios if s not in seen] if e.replayed and e.run else []
        seen.update(new)
        own = e.cost.of(quick) if e.run else 0.0  # not runnable: recorded as not run at once
        out.append(own + REPLAY_COST.of(quick) * len(new))
    return out


def total_cost(exps: list[Experiment], quick: bool, replayed: set[str] | None = None) -> float:
    return math.fsum(planned_costs(exps, quick, replayed or set()))
