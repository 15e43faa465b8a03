"""How precise the twin's capacity is: the main job's twin walks at several deployment seeds.

The twin is deterministic: one trace, scenario, options and seed give the same records. But
a seed is one draw of the servers' randomness (MTP acceptance, tokens), and near a pool's
saturation which instance a request lands on turns on events milliseconds apart, so a figure
of one seed is not necessarily a precise one. This replays what the main job's twin does
(``pddbench replay --trace jan-feb.parquet``: each system sized at the baseline's cost, then
the twin's walk on the placed ladder the emulated walk uses, :func:`twin_walk`) at deployment
seeds 0..N-1, and prints each system's capacity per seed (SLA goodput at the crossing, as
the verdict table shows it), its range and the spread's relative half-width. The sizing
comes from a main job's run folder (``--sizing DIR``: its
``sizing-<system>/sizing.json``) or is run here (about 5 min). Figures only; no pass/fail.

    .venv/bin/python bench/bench_twin_seeds.py --trace jan-feb.parquet [--seeds 5] \
        [--sizing MAIN_JOB_FOLDER] [--out twin-seeds]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from pddbench.harness.config.preflight import load_trace
from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.jobs.equal_cost import chosen_scenario, placed_ladder
from pddbench.harness.jobs.ladder import ladder_origin, trace_schedule
from pddbench.harness.jobs.main_job import TWIN_SEEDS, main_ladder
from pddbench.harness.jobs.main_steps import size, twin_walk
from pddbench.harness.jobs.replay import trace_manifest
from pddbench.harness.jobs.run_system import RunSettings
from pddbench.harness.plan.default_window import default_selection
from pddbench.harness.plan.ladder_rate import plan_point
from pddbench.harness.plan.steady import SteadyIndex
from pddbench.harness.sizing.result import SizingResult

SYSTEMS = ("same-dc-pd", "cross-dc-pd", "pdd")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--sizing", type=Path, help="a main job's folder: reuse its sizing")
    ap.add_argument("--out", type=Path, default=Path("twin-seeds"))
    args = ap.parse_args()
    templates = [load_scenario(s) for s in SYSTEMS]
    trace = load_trace(args.trace)
    options, _ = default_selection(trace.table, ReplayOptions(), trace.epoch)
    info = trace_manifest(trace, args.trace, None)
    settings = main_ladder(len(templates), twin_walks=TWIN_SEEDS)
    steady = SteadyIndex(trace.table, options.selection, warmup_s=settings.warmup_s)
    schedule = trace_schedule(trace, options, steady)
    first = plan_point(settings, schedule, ladder_origin(trace, options), settings.start)
    origin_rps = first.planned_rps if first.planned_requests else None
    if args.sizing is not None:
        sizing = [
            SizingResult.model_validate_json(
                (args.sizing / f"sizing-{t.name}" / "sizing.json").read_text()
            )
            for t in templates
        ]
    else:
        rs = RunSettings(out_root=args.out / "sizing", argv=sys.argv, virtual=True)
        got = size(templates, trace, options, info, rs, steady, False)
        if got is None:
            print("sizing refused (see above)")
            return 1
        sizing = got
    print(f"{'system':12} {'deployment':52} " + " ".join(f"{'seed ' + str(k):>8}" for k in
          range(args.seeds)) + f" {'min-max':>13} {'± %':>5}")  # fmt: skip
    for template, result in zip(templates, sizing, strict=True):
        scenario, twin = chosen_scenario(result, template)
        if twin is None:
            print(f"{template.name:12} no sized deployment")
            continue
        twin_rps = twin.capacity_rps or twin.capacity
        walk = placed_ladder(settings, origin_rps, twin_rps)
        caps: list[float | None] = []
        began = time.monotonic()
        for seed in range(args.seeds):
            seeded = scenario.with_seed(seed)
            rs = RunSettings(out_root=args.out / f"seed{seed}", argv=sys.argv, virtual=True)
            row = twin_walk(
                seeded, twin, trace, options, walk, template.full_sla(), info, rs, steady,
                schedule,
            ).row  # fmt: skip
            caps.append(row.capacity)  # SLA goodput at the crossing, as the verdict shows it
        got = [c for c in caps if c is not None]
        cells = " ".join(f"{c:8.3g}" if c is not None else f"{'-':>8}" for c in caps)
        lo, hi = (min(got), max(got)) if got else (float("nan"), float("nan"))
        half = 100 * (hi - lo) / (hi + lo) if got else float("nan")
        print(
            f"{template.name:12} {twin.deployment[:52]:52} {cells} {lo:6.3g}-{hi:<6.3g} "
            f"{half:5.1f}   ({time.monotonic() - began:.0f} s)",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
