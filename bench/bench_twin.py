"""Replays a slice of the jan-feb trace through the virtual-time twin; prints its speed.

Synthesises the jan-feb profile in-process (``pddbench trace synth --profile jan-feb``, the
first ``--days`` of it, ``--full`` for all 59; or reads ``--trace``), plans it as
``pddbench replay`` does (:func:`pddbench.harness.plan.sessions.plan_requests`,
``--speedup``), gives each request the servers' block hashes
(:func:`pddbench.twin.prompts.table_hashes`) and replays it through
:func:`pddbench.twin.run.run_twin` for ``--scenario`` (default pdd), streaming the records
(``on_record``: only the figures below are kept, so the whole trace fits in memory).
Prints simulated requests per wall second (the issue's bar: the whole trace at x10 in
<= 15 min, >= 1,026/s; goal 3,000), peak memory (bar: <= 8 GiB for the whole trace), each
as a ratio to its bar, a progress line every ``--progress`` records, and the run's TTFT /
TPOT percentiles, pipeline mix and RLD share, so a change in speed or figures shows.
Figures only; no pass/fail.

    .venv/bin/python bench/bench_twin.py [--days 0.5 | --full] [--speedup 10] [--scenario pdd]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from pddbench.harness.config.replay import Selection
from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.plan.sessions import plan_requests
from pddbench.harness.rundir.records import RequestRecord
from pddbench.twin.prompts import table_hashes
from pddbench.twin.run import run_twin
from pddbench.workloads.synth import SynthOptions, synthesise
from pddbench.workloads.synth_profile import load_profile

# issue 27's bars: the whole jan-feb trace at x10 through pdd in <= 15 min, <= 8 GiB
WHOLE_TRACE = 923_288  # requests in jan-feb.parquet
BAR_RPS = 1_026  # WHOLE_TRACE / 900 s
GOAL_RPS = 3_000
BAR_GIB = 8.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=0.5, help="days of the jan-feb profile")
    ap.add_argument("--full", action="store_true", help="the whole profile (59 days)")
    ap.add_argument("--trace", type=Path, help="a canonical trace instead of the profile")
    ap.add_argument("--speedup", type=float, default=10.0)
    ap.add_argument("--scenario", default="pdd")
    ap.add_argument("--max-requests", type=int)
    ap.add_argument("--progress", type=int, default=100_000, help="records per progress line")
    args = ap.parse_args()

    t0 = time.perf_counter()
    if args.trace is not None:
        from pddbench.workloads.traceio import read_trace

        table = read_trace(args.trace).table
    else:
        profile = load_profile("jan-feb")
        days = 59.0 if args.full else args.days
        table = synthesise(profile, SynthOptions(days=days)).table
    sc = load_scenario(args.scenario).model_copy(update={"emulation_scale": 1.0})
    dep, net = sc.deployment_config, sc.network_config()
    planned = plan_requests(table, Selection(speedup=args.speedup, max_requests=args.max_requests))
    hashes = table_hashes(table, dep.block_size)
    t1 = time.perf_counter()
    print(f"trace + plan: {len(planned)} requests in {t1 - t0:.1f} s", flush=True)

    ttft: list[float] = []
    tpot: list[float] = []
    pipelines: Counter[str | None] = Counter()
    n = ok = out = relay = 0
    span = 0.0

    def take(r: RequestRecord) -> None:
        nonlocal n, ok, out, relay, span
        n += 1
        span = max(span, r.end_s or 0.0)
        if r.status == "ok":
            ok += 1
            if r.ttft_s is not None:
                ttft.append(r.ttft_s)
            if r.tpot_s is not None:
                tpot.append(r.tpot_s)
            out += r.output_tokens
            relay += r.relay_tokens or 0
            pipelines[r.pipeline] += 1
        if n % args.progress == 0:
            wall = time.perf_counter() - t1
            print(
                f"  {n} records, {span:.0f} s virtual, {wall:.0f} s wall: {n / wall:,.0f}/s, "
                f"peak memory {peak_gib():.2f} GiB",
                flush=True,
            )

    run_twin(dep, net, planned, hashes, on_record=take)
    wall = time.perf_counter() - t1
    print(
        f"{args.scenario}: {n} records ({ok} ok) in {wall:.1f} s wall, "
        f"{span:.0f} s virtual: {n / wall:,.0f} simulated requests per wall second; "
        f"peak memory {peak_gib():.2f} GiB"
    )
    rate = n / wall if wall > 0 else 0.0
    print(
        f"against issue 27's bars: {rate / BAR_RPS:.2f}x the speed bar ({BAR_RPS:,} req/s: "
        f"the whole trace, {WHOLE_TRACE:,} requests, in <= 15 min; at this rate it takes "
        f"{WHOLE_TRACE / max(rate, 1e-9) / 60:.0f} min), {rate / GOAL_RPS:.2f}x the goal "
        f"({GOAL_RPS:,}/s); peak memory {peak_gib() / BAR_GIB:.2f}x its bar ({BAR_GIB:g} GiB)"
    )
    if ok:
        print(
            "TTFT P50/P90/P99 "
            + "/".join(f"{np.percentile(ttft, q):.3f}" for q in (50, 90, 99))
            + " s; TPOT P50/P99 "
            + "/".join(f"{np.percentile(tpot, q) * 1e3:.1f}" for q in (50, 99))
            + f" ms; RLD share {relay / max(out, 1):.1%}; pipelines "
            + ", ".join(f"{k} {v}" for k, v in pipelines.most_common())
        )
    return 0


def peak_gib() -> float:
    """This process's peak resident memory (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


if __name__ == "__main__":
    sys.exit(main())
