"""Cold against steady-state ladder points: what kind of requests each measures (no servers).

For the first ``--points`` windows of the main job's ladder (the busiest hour at x10, rate
rungs, every point meeting its target) prints, per point, the turn-0 share and the
hit-rate bins of the requests planned in its measured time beside its trace window's:

* cold (before issue 29): the ladder as it was (x4 first rung), a point replaying the
  sessions that *start* in its window, from turn 0, hit rates over the replayed subset
  (caches start empty);
* steady: the ladder as it is, a point replaying every request of its window
  (:mod:`pddbench.harness.plan.steady`), hit rates the trace's with its history (what the
  primed caches hold).

    .venv/bin/python bench/bench_steady_mix.py --trace /work/runs/jan-feb.parquet
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np

from pddbench.harness.config.replay import ReplayOptions
from pddbench.harness.drive.replay import prepare
from pddbench.harness.jobs.ladder import ladder_origin, trace_schedule
from pddbench.harness.plan.default_window import default_selection
from pddbench.harness.plan.ladder import LadderSearch, PointMeasure, window_selection
from pddbench.harness.plan.ladder_points import DEFAULT_LADDER, LadderSettings, PointWindow
from pddbench.harness.plan.steady import SteadyIndex
from pddbench.harness.rundir.ladder import RequestMix
from pddbench.workloads.traceio import Trace, read_trace

COLD = dataclasses.replace(DEFAULT_LADDER, start=4.0, steady=False, time_budget_s=None)
STEADY = dataclasses.replace(DEFAULT_LADDER, time_budget_s=None)


def windows(
    trace: Trace, options: ReplayOptions, settings: LadderSettings, n: int, steady: SteadyIndex
) -> list[PointWindow]:
    """The ladder's first ``n`` windows, every point meeting its target."""
    search = LadderSearch(
        settings,
        target_pct=99.0,
        origin_s=ladder_origin(trace, options),
        base_speedup=options.selection.speedup,
        schedule=trace_schedule(trace, options, steady if settings.steady else None),
    )
    out = []
    while len(out) < n and (w := search.next_window()) is not None:
        out.append(w)
        search.record(PointMeasure(w, 400, 400, {}, 0, w.measure_s, 400 / w.measure_s))
    return out


def cold_mix(trace: Trace, options: ReplayOptions, w: PointWindow) -> RequestMix:
    opts = dataclasses.replace(
        options, selection=window_selection(options.selection, w, options.selection.speedup)
    )
    plan = prepare(trace, opts)
    kept = [r for r in plan.requests if w.warmup_s <= r.arrival_s < w.send_s]
    return RequestMix.of(
        np.array([r.turn_index for r in kept]),
        np.array([plan.theoretical_cached[r.request_id] / max(1, r.input_length) for r in kept]),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=True)
    ap.add_argument("--points", type=int, default=3)
    args = ap.parse_args()
    began = time.monotonic()
    trace = read_trace(args.trace)
    options, _ = default_selection(trace.table, ReplayOptions(), trace.epoch)
    index = SteadyIndex(trace.table, options.selection, warmup_s=STEADY.warmup_s)
    for name, settings in (("cold", COLD), ("steady", STEADY)):
        for w in windows(trace, options, settings, args.points, index):
            window = index.mix(w.trace_start_s, w.trace_duration_s)
            if settings.steady:
                slices = options.selection.speedup * w.load
                p = index.point(w.trace_start_s, slices, w.send_s, point_index=w.index)
                kept = [r for r in p.requests if w.warmup_s <= r.arrival_s < w.send_s]
                point = RequestMix.of(
                    np.array([r.turn_index for r in kept]),
                    np.array([p.theoretical_cached[r.request_id] / r.input_length for r in kept]),
                )
            else:
                point = cold_mix(trace, options, w)
            print(
                f"{name:6s} point {w.index + 1} x{w.load:.3g} at {w.trace_start_s / 3600:.1f} h "
                f"+{w.trace_duration_s / 60:.0f} min, {w.planned_rps or 0:.3g} req/s planned, "
                f"{point.requests} requests measured\n"
                f"    point  {point.text()}\n    window {window.text()}"
            )
    print(f"({time.monotonic() - began:.0f} s)")


if __name__ == "__main__":
    main()
