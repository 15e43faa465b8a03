"""Benchmark of the analysis: every metric and breakdown of a 1,000,000-request run.

Prints (does not assert): seconds and peak RSS to read ``requests.parquet``, compute all
registered metrics, all breakdowns (hit-rate bin, pipeline, turn; every group through
the registry) and the figure curves — bar: <= 10 s and <= 4 GiB — then a few of the
numbers, and the time of one comparison report's figures over a smaller run.

    .venv/bin/python bench/bench_analysis.py [--requests N] [--token-times-share F]

The records file is synthesised by a child process (so its memory does not count),
with ``pddbench.harness.analysis.synthetic`` (a PDD-like run; ``--token-times-share``
of the ok requests carry per-token times, default 0 as in a default replay).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB


def _write(path: Path, requests: int, share: float) -> None:
    import pyarrow.parquet as pq

    from pddbench.harness.analysis.synthetic import SynthRun, synth_table

    table = synth_table(SynthRun(system="pdd", requests=requests, seed=7, token_times_share=share))
    pq.write_table(table, path, compression="zstd")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--token-times-share", type=float, default=0.0)
    parser.add_argument("--write", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        _write(args.write, args.requests, args.token_times_share)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-analysis-") as tmp:
        path = Path(tmp) / "requests.parquet"
        t0 = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--write",
                str(path),
                "--requests",
                str(args.requests),
                "--token-times-share",
                str(args.token_times_share),
            ],
            check=True,
        )
        print(
            f"synthesised {args.requests:,} requests in {time.perf_counter() - t0:.1f} s "
            f"({path.stat().st_size / 2**20:.0f} MiB parquet)"
        )
        from pddbench.harness.analysis.registry import default_registry
        from pddbench.harness.analysis.rundir import read_records
        from pddbench.harness.analysis.summary import analyze_records

        default_registry()  # imports, outside the timing
        rss0 = _peak_rss_gib()
        t0 = time.perf_counter()
        records = read_records(path)
        t_read = time.perf_counter() - t0
        analysis = analyze_records(records)
        total = time.perf_counter() - t0
        peak = _peak_rss_gib()
    m = analysis.metrics
    print(
        f"records: {records.n:,} ({'with' if records.token_times is not None else 'no'} "
        "token times)"
    )
    print(
        f"read: {t_read:.2f} s; all {len(list(m))} metrics + "
        f"{sum(len(b.groups) for b in analysis.breakdowns.values())} breakdown groups + "
        f"curves: {total:.2f} s total (bar <= 10 s)"
    )
    print(f"peak RSS: {peak:.2f} GiB (after imports: {rss0:.2f} GiB; bar <= 4 GiB)")
    for key in (
        "ttft.p50",
        "ttft.p99",
        "ttft.p99.9",
        "tpot.p50",
        "itl.p99",
        "itl_mean",
        "e2e.p99",
        "completed_rps",
        "goodput",
        "sla_attainment",
        "error_rate",
        "rld_token_share",
        "wan_bandwidth",
        "task_completion.p50",
    ):
        r = m[key.partition(".")[0]]
        print(f"  {key:22s} {m.shown(key):12.4g} {r.display_unit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
