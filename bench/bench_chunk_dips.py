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
import statistics

import numpy as np

from pddbench.servers import profiles
from pddbench.servers.compute import Machine
from pddbench.servers.engine import Engine, SchedulerConfig, Seq
from pddbench.servers.radix import KvPool
from pddbench.servers.tokens import TokenStream
from pddbench.workloads.synth import SynthOptions, synthesise
from pddbench.workloads.synth_profile import load_profile

BLOCK = 64
CHUNK = 8192


def uncached_per_s(m: Machine, lengths: list[int], hit: float, packing: bool) -> float:
    pool = KvPool(10**9, BLOCK)
    e = Engine(m, pool, SchedulerConfig(chunk_tokens=CHUNK, prefill_packing=packing))
    for i, n in enumerate(lengths):
        hashes = [i * 10**7 + b for b in range(n // BLOCK)]
        cached_blocks = min(int(hit * n) // BLOCK, (n - 1) // BLOCK)
        if cached_blocks:
            pool.tree.insert(hashes[:cached_blocks])
        s = Seq(
            f"r{i}",
            n,
            hashes,
            TokenStream(0, f"r{i}", 1000),
            max_tokens=1,
            compute_prompt=True,
            decode_after_kv=False,
        )
        e.submit(s, 0.0)
    t = 0.0
    while (step := e.plan(t)) is not None:
        t += step.duration
        e.complete(step, t)
    return e.stats.prefill_tokens / t


def dips(hits: list[float], rps: list[float]) -> list[int]:
    out = []
    for i, v in enumerate(rps):
        around = rps[max(0, i - 3) : i] + rps[i + 1 : i + 4]
        if around and v < 0.97 * statistics.median(around):
            out.append(round(hits[i] * 100))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=16)
    args = ap.parse_args()
    m = Machine(profiles.hardware("h800-sxm"), 16, profiles.model("pdd-flagship-1t"))
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
