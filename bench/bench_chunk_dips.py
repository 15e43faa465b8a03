"""Where the chunked-prefill throughput dips land, with and without chunk packing.

    .venv/bin/python bench/bench_chunk_dips.py [--prompts 16]

A saturated prefill instance (16 x H800, the flagship, 8192-token chunks) gets a batch of
prompts at one prefix hit rate; the real scheduler (:class:`pddbench.servers.engine.Engine`)
runs them and the script prints uncached prompt tokens computed per second against the hit
rate (the prefill instance's useful throughput),
for prompts of exactly 64K tokens and for the jan-feb trace's length mix, each without
packing (one sequence per step: a small last chunk is a step of its own) and with SGLang's
default packing across sequences. A *dip* is a hit rate whose throughput falls more than 3 %
below the median of its neighbours (±3 points).
"""

from __future__ import annotations

import argparse

import numpy as np

from pddbench.harness.experiments.checks import local_dips
from pddbench.harness.experiments.compute_model import CHUNK, prefill_machine, uncached_per_s
from pddbench.workloads.synth import SynthOptions, synthesise
from pddbench.workloads.synth_profile import load_profile


def dips(hits: list[float], rps: list[float]) -> list[int]:
    return [round(h * 100) for h in local_dips(hits, rps)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=16)
    args = ap.parse_args()
    m = prefill_machine()
    trace = synthesise(load_profile("jan-feb"), SynthOptions(requests=4000, seed=1))
    mix = np.asarray(trace.table.column("input_length"))
    rng = np.random.default_rng(0)
    sample = [int(x) for x in rng.choice(mix, args.prompts)]
    fixed = [65536] * args.prompts
    hits = [h / 100 for h in range(0, 99)]
    cols = {
        "64K unpacked": [uncached_per_s(m, fixed, h, False) for h in hits],
        "64K packed": [uncached_per_s(m, fixed, h, True) for h in hits],
        "mix unpacked": [uncached_per_s(m, sample, h, False) for h in hits],
        "mix packed": [uncached_per_s(m, sample, h, True) for h in hits],
    }
    print(
        f"jan-feb length mix: median {int(np.median(mix))} tokens, p10 "
        f"{int(np.percentile(mix, 10))}, p90 {int(np.percentile(mix, 90))}; "
        f"{args.prompts} prompts per point, chunk {CHUNK}"
    )
    print("hit%  " + "  ".join(f"{k:>13}" for k in cols) + "   (uncached K tokens/s)")
    for i, h in enumerate(hits):
        if i % 5 == 0 or any(round(h * 100) in dips(hits, v) for v in cols.values()):
            print(f"{h * 100:4.0f}  " + "  ".join(f"{v[i] / 1e3:13.1f}" for v in cols.values()))
    print()
    for k, v in cols.items():
        print(f"dips {k:13}: {dips(hits, v) or 'none'}")


if __name__ == "__main__":
    main()
