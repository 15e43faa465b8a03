"""Time trace validation and inspection on a large synthetic trace; prints the figures.

Builds a canonical trace of ``--sessions`` sessions × ``--turns`` turns (default
100,000 × 10 = 1,000,000 requests, ~127.5 hashes each ≈ 128M hashes), writes it to a
temporary parquet file, then times reading + validating it (``read_trace``), the
validation rules alone, the hit model, the summary, the plot series and the plot.

    .venv/bin/python bench/bench_trace_inspect.py [--sessions N] [--turns K] [--keep PATH]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from pddbench.workloads.hitrate import prefix_hits
from pddbench.workloads.inspect import hit_share_series, summarize
from pddbench.workloads.inspect_plot import plot_hit_bins
from pddbench.workloads.schema import Col
from pddbench.workloads.traceio import build_table, hashes_from_flat, read_trace, write_trace
from pddbench.workloads.validate import validate_table

BLOCK = 64
SHARED_BLOCKS = 20  # a system prompt common to every session


def synthetic(sessions: int, turns: int, seed: int = 1) -> pa.Table:
    """Multi-turn sessions whose turn t carries 123 + (t mod 10) position-chained blocks."""
    rng = np.random.default_rng(seed)
    n = sessions * turns
    session = np.repeat(np.arange(sessions, dtype=np.int64), turns)
    turn = np.tile(np.arange(turns, dtype=np.int64), sessions)
    start = np.sort(rng.uniform(0, 14 * 86400.0, sessions))
    arrival = start[session] + turn * 30.0 + rng.uniform(0, 5, n)
    arrival[turn == 0] = start
    arrival = np.maximum.accumulate(arrival.reshape(sessions, turns), axis=1).ravel()
    n_blocks = 123 + turn % 10
    input_length = n_blocks * BLOCK - rng.integers(0, BLOCK, n)  # last block partial
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(n_blocks, out=offsets[1:])
    pos = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1], n_blocks)
    owner = np.repeat(session, n_blocks)
    values = np.where(pos < SHARED_BLOCKS, pos + 1, (owner << 20) + pos + (1 << 40))
    del pos, owner
    order = np.argsort(arrival, kind="stable")
    ids = np.char.add("r", np.arange(n).astype(str))
    sids = np.char.add("s", session.astype(str))
    parent = np.where(turn > 0, np.char.add("r", (np.arange(n) - 1).astype(str)), None)
    table = build_table(
        request_id=pa.array(ids),
        session_id=pa.array(sids),
        parent_request_id=pa.array(parent.tolist(), type=pa.string()),
        turn_index=turn.astype(np.int32),
        arrival_s=arrival,
        input_length=input_length.astype(np.int32),
        output_length=rng.integers(50, 2000, n).astype(np.int32),
        block_size=BLOCK,
        block_hashes=hashes_from_flat(offsets, values.astype(np.uint64)),
    )
    return table.take(pa.array(order))


def timed(label: str, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    print(f"{label:<34} {time.perf_counter() - t0:8.2f} s", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=100_000)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--keep", type=Path, default=None, help="write the trace here and keep it")
    args = ap.parse_args()
    table = timed("generate", synthetic, args.sessions, args.turns)
    n_hashes = table.column(Col.BLOCK_HASHES).combine_chunks().values.__len__()
    print(f"rows {table.num_rows:,}  hashes {n_hashes:,}")
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "bench.parquet"
        timed("write_trace", write_trace, table, path, epoch="2026-01-05T00:00:00+00:00")
        print(f"file size {path.stat().st_size / 1e6:,.0f} MB")
        total = time.perf_counter()
        trace = timed("read_trace (read+conform+validate)", read_trace, path)
        timed("validate_table alone", validate_table, trace.table, file=str(path))
        hits = timed("prefix_hits (unbounded)", prefix_hits, trace.table)
        summary = timed("summarize", summarize, trace, hits)
        series = timed("hit_share_series", hit_share_series, trace, hits)
        timed("plot_hit_bins", plot_hit_bins, series, Path(tmp) / "bench.png")
        print(f"{'inspect total':<34} {time.perf_counter() - total:8.2f} s")
        print(
            f"token-weighted hit {summary.hit.token_weighted:.4f}  "
            f">=95% share {summary.hit.share_ge_95:.4f}  weeks {len(summary.weeks)}"
        )


if __name__ == "__main__":
    main()
