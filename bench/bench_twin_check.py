"""Side by side: an emulated run folder and the twin replaying the same plan.

Reads ``requests.parquet`` of an emulated ``pddbench replay`` run (``--run``), plans the same
trace with the same selection (``--trace``, ``--speedup``, ``--max-requests``) through
:func:`pddbench.twin.backend`'s hashes and :func:`pddbench.twin.run.run_twin` for the
run's scenario, and prints TTFT P50/P90/P99, TPOT P50/P99, E2E P99, RLD share of output
tokens, relayed requests, WAN bytes, P's reported hit rate and the TTFT parts' means for
both. Figures only (the issue's tolerances are for the main job's first rung; this is the
first look).

    .venv/bin/python bench/bench_twin_check.py --run RUN --trace T --speedup 10 --max-requests 120
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from pddbench.harness.analysis.ttft_parts import PARTS
from pddbench.harness.config.replay import Selection
from pddbench.harness.config.scenario import load_scenario
from pddbench.harness.plan.player import PlannedRequest
from pddbench.harness.plan.sessions import plan_requests
from pddbench.harness.rundir.manifest import RunManifest
from pddbench.twin.prompts import server_hashes
from pddbench.twin.run import run_twin
from pddbench.workloads.traceio import read_trace


def figures(df: pd.DataFrame) -> dict[str, float]:
    ok = df[df.status == "ok"]
    out = {f"TTFT P{q} s": float(np.percentile(ok.ttft_s, q)) for q in (50, 90, 99)}
    out |= {f"TPOT P{q} ms": float(np.nanpercentile(ok.tpot_s, q) * 1e3) for q in (50, 99)}
    out["E2E P99 s"] = float(np.percentile(ok.e2e_s, 99))
    out["RLD share %"] = 100 * float(ok.relay_tokens.fillna(0).sum() / ok.output_tokens.sum())
    out["relayed"] = float((ok.pipeline == "P->RLD->MD").sum())
    out["WAN GB"] = float(ok.wan_bytes.fillna(0).sum() / 1e9)
    out["P hit %"] = 100 * float(ok.cached_tokens_reported.sum() / ok.input_tokens.sum())
    for p in PARTS:
        out[f"{p} mean s"] = float(ok[f"ttft_{p}_s"].mean())
    out["ok"] = float(len(ok))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True)
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--speedup", type=float, default=1.0)
    ap.add_argument("--max-requests", type=int)
    args = ap.parse_args()
    manifest = RunManifest.load(args.run)
    emulated = pd.read_parquet(args.run / "requests.parquet")
    table = read_trace(args.trace).table
    sc = load_scenario(manifest.scenario_name).model_copy(update={"emulation_scale": 1.0})
    dep, net = sc.deployment_config, sc.network_config()
    planned = plan_requests(table, Selection(speedup=args.speedup, max_requests=args.max_requests))
    lists = table.column("block_hashes").to_pylist()
    sizes = table.column("block_size").to_pylist()

    def hashes(r: PlannedRequest) -> list[int]:
        return server_hashes(lists[r.row], sizes[r.row], dep.block_size, r.input_length, r.row)

    virtual = pd.DataFrame([vars(r) for r in run_twin(dep, net, planned, hashes)])
    e, v = figures(emulated), figures(virtual)
    print(f"{manifest.scenario_name}: {len(emulated)} emulated, {len(virtual)} virtual records")
    print(f"{'':20} {'emulated':>10} {'virtual':>10} {'v/e':>7}")
    for k in e:
        ratio = v[k] / e[k] if e[k] else float("nan")
        print(f"{k:20} {e[k]:10.3f} {v[k]:10.3f} {ratio:7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
