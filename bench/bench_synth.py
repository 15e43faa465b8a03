"""Benchmark of the synthetic trace generator: speed, memory and calibration figures.

Prints (does not assert): wall seconds and peak RSS for synthesising N requests of the
default ``jan-feb`` profile and writing them to a temporary parquet file (bar: 1,000,000
requests in <= 60 s and <= 4 GiB), then the E1 calibration figures of that trace —
share of requests hitting >= 95 %, share < 50 %, mean hit, the published bins, and the
same per week of arrival (the drift).

    .venv/bin/python bench/bench_synth.py [--requests N] [--profile jan-feb] [--check-hitrate]

``--check-hitrate`` also replays the trace through ``hitrate.prefix_hits`` (memory-hungry
at full size) and reports whether it agrees with the generator's own cached tokens.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from pddbench.workloads.synth import SynthOptions, calibration, synthesise
from pddbench.workloads.synth_profile import load_profile
from pddbench.workloads.traceio import write_trace


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is KiB


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--profile", default="jan-feb")
    parser.add_argument("--check-hitrate", action="store_true")
    args = parser.parse_args()

    profile = load_profile(args.profile)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synth.parquet"
        t0 = time.perf_counter()
        trace = synthesise(profile, SynthOptions(requests=args.requests))
        t1 = time.perf_counter()
        write_trace(trace.table, path, source=trace.source, epoch=trace.epoch)
        t2 = time.perf_counter()
        size = path.stat().st_size
    table = trace.table
    n_hashes = pc.sum(pc.list_value_length(table.column("block_hashes"))).as_py()
    inputs = table.column("input_length").to_numpy()
    outputs = table.column("output_length").to_numpy()
    print(
        f"profile {profile.name}: {table.num_rows:,} requests, {trace.sessions:,} sessions, "
        f"{n_hashes:,} block hashes, mean input {inputs.mean():,.0f} tokens, "
        f"outputs < 500: {np.mean(outputs < 500):.1%}"
    )
    print(
        f"synthesise {t1 - t0:.1f} s + write {t2 - t1:.1f} s = {t2 - t0:.1f} s wall "
        f"(bar 60 s); peak RSS {_peak_rss_gib():.2f} GiB (bar 4 GiB); "
        f"file {size / 2**20:,.0f} MiB"
    )

    cal = calibration(trace)
    fig = cal.overall
    print(
        f"calibration: >=95%: {fig.share_ge_95:.1%} (target 70-80%)  "
        f"<50%: {fig.share_lt_50:.1%} (target 2-5%)  "
        f"mean: {fig.mean_per_request:.1%} (target 85-92%)"
    )
    labels = [b.label for b in fig.bins]
    print("week  requests  " + "  ".join(f"{b:>7}" for b in labels) + "    >=95%   <50%   mean")
    for name, f in [("all", fig)] + [(str(w), f) for w, f in cal.weeks]:
        shares = "  ".join(f"{b.share:7.1%}" for b in f.bins)
        tail = f"{f.share_ge_95:6.1%} {f.share_lt_50:6.1%} {f.mean_per_request:6.1%}"
        print(f"{name:>4}  {f.requests:8,}  {shares}   {tail}")

    if args.check_hitrate:
        from pddbench.workloads.hitrate import prefix_hits

        t3 = time.perf_counter()
        replay = prefix_hits(table)
        same = bool(np.array_equal(replay.cached_tokens, trace.cached_tokens))
        print(
            f"hitrate.prefix_hits replay {time.perf_counter() - t3:.1f} s: "
            f"{'agrees' if same else 'DISAGREES'} with the generator's cached tokens; "
            f"peak RSS now {_peak_rss_gib():.2f} GiB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
