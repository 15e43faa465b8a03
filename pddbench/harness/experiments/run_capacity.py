"""E10, the equal-cost verdict: issue 14's capacity ladder per system, then BCR.

Owns running ``pddbench capacity`` (the shared load ladder, :mod:`pddbench.harness.plan.
ladder`; not reimplemented here) as a child process once per system into
``<out>/runs/capacity-<scenario>/``, reading each ``capacity.json``
(:class:`~pddbench.harness.plan.ladder.LadderVerdict`) and each scenario's derived cost
(:attr:`Scenario.cost_model`), and turning them into the cost, goodput-at-capacity and BCR
changes of PDD against same-DC PD. Without ``--emulate`` the ladders run with
``--no-emulation`` and the verdict is inconclusive.
"""

from __future__ import annotations

from pathlib import Path

from pddbench.errors import UserError
from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.experiments.model import Experiment, Measurement, RunContext, Value
from pddbench.harness.experiments.run_replay import child, replay_trace
from pddbench.harness.rundir.folder import CAPACITY
from pddbench.harness.rundir.ladder import LadderVerdict

SYSTEMS = ("same-dc-pd", "pdd")
QUICK = (
    "--points",
    "3",
    "--start",
    "1",
    "--growth",
    "2",
    "--point-duration",
    "20s",
    "--warmup",
    "5s",
    "--min-requests",  # quick: fixed 20 s points, no bisection (as before powered points)
    "0",
    "--bisect",
    "0",
)
FULL = (
    "--points",
    "6",
    "--start",
    "2",
    "--growth",
    "2",
    "--point-duration",
    "60s",
    "--warmup",
    "10s",
    "--budget",  # powered points (60-120 s) and bisection, bounded per system
    "15m",
)


def _ladder(scenario: str, ctx: RunContext) -> tuple[LadderVerdict, str]:
    root = ctx.out.parent
    folder = root / "runs" / f"capacity-{scenario}"
    path = folder / CAPACITY
    if not path.exists():
        ctx.progress(f"capacity ladder of {scenario} ({'quick' if ctx.quick else 'full'})")
        args = ["capacity", "--trace", str(replay_trace(root, ctx)), "--scenario", scenario,
                "--out", str(folder), *(QUICK if ctx.quick else FULL)]  # fmt: skip
        if not ctx.emulate:
            args.append("--no-emulation")
        child(args, root, ok=(0, 1, 2))  # 2: a refused search, its verdict still written
        if not path.exists():
            raise UserError(f"`pddbench capacity` for {scenario} wrote no {CAPACITY}; "
                            f"see {root / 'runs' / 'replay.log'}")  # fmt: skip
    return LadderVerdict.model_validate_json(path.read_text(encoding="utf-8")), str(
        Path(folder).relative_to(root)
    )


def run_e10(exp: Experiment, ctx: RunContext) -> Measurement:
    verdicts, rels, costs = {}, [], {}
    for s in SYSTEMS:
        verdicts[s], rel = _ladder(s, ctx)
        rels.append(rel)
        cost = load_scenario(s).cost_model
        costs[s] = cost.total if cost is not None else float("nan")
    base, pdd = verdicts["same-dc-pd"], verdicts["pdd"]
    g0 = base.capacity_goodput if base.capacity_goodput is not None else float("nan")
    g1 = pdd.capacity_goodput if pdd.capacity_goodput is not None else float("nan")
    c0, c1 = costs["same-dc-pd"], costs["pdd"]
    values = [
        Value(name="cost_change", value=c1 / c0 - 1, unit="fraction"),
        Value(name="goodput_same", value=g0, unit="req/s", low=base.capacity_low,
              high=base.capacity_high),
        Value(name="goodput_pdd", value=g1, unit="req/s", low=pdd.capacity_low,
              high=pdd.capacity_high),
        Value(name="goodput_change", value=g1 / g0 - 1 if g0 else float("nan"), unit="fraction"),
        Value(name="bcr_change", value=(g1 / c1) / (g0 / c0) - 1 if g0 else float("nan"),
              unit="fraction"),
        # 1 when both ladders found a capacity; 0: a load-bounded goodput, not a capacity
        Value(name="capacities_found", value=float(all(v.basis == "capacity"
                                                       for v in verdicts.values()))),
    ]  # fmt: skip
    emulated = ctx.emulate
    return Measurement(
        experiment=exp.id, quick=ctx.quick, values=values, runs=rels, wan_emulated=emulated,
        labels=[] if emulated else ["WAN not emulated (--no-emulation: servers on loopback)"],
        notes=[base.describe(), pdd.describe()],
    )  # fmt: skip
