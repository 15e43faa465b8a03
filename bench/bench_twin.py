"""Replays a slice of the jan-feb trace through the virtual-time twin; prints its speed.

Synthesises the jan-feb profile in-process (``pddbench trace synth --profile jan-feb``, the
first ``--days`` of it; or reads ``--trace``), plans it as ``pddbench replay`` does
(:func:`pddbench.harness.plan.sessions.plan_requests`, ``--speedup``), gives each request
the servers' block hashes (:func:`pddbench.twin.prompts.server_hashes`) and replays it
through :func:`pddbench.twin.run.run_twin` for ``--scenario`` (default pdd). Prints
simulated requests per wall second (the issue's goal: >= 3,000), peak memory (goal:
<= 8 GiB for the whole trace), and the run's TTFT / TPOT percentiles, pipeline mix and
RLD share, so a change in speed or figures shows. Figures only; no pass/fail.

    .venv/bin/python bench/bench_twin.py [--days 0.5] [--speedup 10] [--scenario pdd]
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
from pddbench.harness.plan.player import PlannedRequest
from pddbench.harness.plan.sessions import plan_requests
from pddbench.twin.prompts import server_hashes
from pddbench.twin.run import run_twin
from pddbench.workloads.synth import SynthOptions, synthesise
from pddbench.workloads.synth_profile import load_profile


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=0.5, help="days of the jan-feb profile")
    ap.add_argument("--trace", type=Path, help="a canonical trace instead of the profile")
    ap.add_argument("--speedup", type=float, default=10.0)
    ap.add_argument("--scenario", default="pdd")
    ap.add_argument("--max-requests", type=int)
    args = ap.parse_args()

    t0 = time.perf_counter()
    if args.trace is not None:
        from pddbench.workloads.traceio import read_trace

        table = read_trace(args.trace).table
    else:
        table = synthesise(load_profile("jan-feb"), SynthOptions(days=args.days)).table
    sc = load_scenario(args.scenario).model_copy(update={"emulation_scale": 1.0})
    dep, net = sc.deployment_config, sc.network_config()
    bs = dep.block_size
    planned = plan_requests(table, Selection(speedup=args.speedup, max_requests=args.max_requests))
    lists = table.column("block_hashes").to_pylist()
    sizes = table.column("block_size").to_pylist()

    def hashes(r: PlannedRequest) -> list[int]:
        return server_hashes(lists[r.row], sizes[r.row], bs, r.input_length, r.row)

    t1 = time.perf_counter()
    print(f"trace + plan: {len(planned)} requests in {t1 - t0:.1f} s", flush=True)

    recs = run_twin(dep, net, planned, hashes)
    wall = time.perf_counter() - t1
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20

    ok = [r for r in recs if r.status == "ok"]
    span = max((r.end_s or 0.0) for r in recs) if recs else 0.0
    print(
        f"{args.scenario}: {len(recs)} records ({len(ok)} ok) in {wall:.1f} s wall, "
        f"{span:.0f} s virtual: {len(recs) / wall:,.0f} simulated requests per wall second; "
        f"peak memory {peak_gib:.2f} GiB"
    )
    if ok:
        ttft = np.array([r.ttft_s for r in ok if r.ttft_s is not None])
        tpot = np.array([r.tpot_s for r in ok if r.tpot_s is not None])
        out = sum(r.output_tokens for r in ok)
        relay = sum(r.relay_tokens or 0 for r in ok)
        print(
            "TTFT P50/P90/P99 "
            + "/".join(f"{np.percentile(ttft, q):.3f}" for q in (50, 90, 99))
            + " s; TPOT P50/P99 "
            + "/".join(f"{np.percentile(tpot, q) * 1e3:.1f}" for q in (50, 99))
            + f" ms; RLD share {relay / max(out, 1):.1%}; pipelines "
            + ", ".join(f"{k} {v}" for k, v in Counter(r.pipeline for r in ok).most_common())
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
