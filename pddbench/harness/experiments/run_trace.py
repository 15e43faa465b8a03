"""Experiments computed from a trace alone: E1 (hit-rate bins over time), E3 (WAN need).

Owns turning a trace (the user's ``--trace``, else the built-in jan-feb profile
synthesised in-process, as ``pddbench trace synth --profile jan-feb`` makes it) into a
:class:`Measurement`: hits come from :func:`pddbench.workloads.hitrate.prefix_hits`
(an unbounded prefix cache replayed over the block hashes), not from the generator's own
bookkeeping, and the bin figures from :mod:`pddbench.workloads.inspect`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from pddbench.errors import UserError
from pddbench.harness.experiments.model import (
    Experiment,
    Measurement,
    RunContext,
    Series,
    Value,
)
from pddbench.workloads.hitrate import HitResult, prefix_hits
from pddbench.workloads.inspect import WEEK_S, grouped_hit_stats
from pddbench.workloads.schema import Col

QUICK_REQUESTS = 100_000
# KV bytes per token named by PDD.md: the range 10–80 KB, typical 50 KB, micro-benchmark 46.5 KB
KV_SIZES_KB = (10.0, 46.5, 80.0)


def load_trace(ctx: RunContext) -> tuple[pa.Table, str]:
    """The trace of a trace experiment and a label saying where it came from."""
    if ctx.trace is not None:
        from pddbench.workloads.traceio import read_trace

        try:
            trace = read_trace(ctx.trace)
        except (OSError, ValueError) as exc:
            raise UserError(f"{ctx.trace}: cannot read the trace: {exc}") from None
        return trace.table, f"trace {Path(ctx.trace).name}"
    from pddbench.workloads.synth import SynthOptions, synthesise
    from pddbench.workloads.synth_profile import load_profile

    options = SynthOptions(requests=QUICK_REQUESTS) if ctx.quick else SynthOptions()
    synth = synthesise(load_profile("jan-feb"), options)
    n = synth.table.num_rows
    return synth.table, f"synthetic jan-feb profile ({n} requests)"


def _hits(table: pa.Table) -> tuple[HitResult, np.ndarray]:
    return prefix_hits(table), table.column(Col.INPUT_LENGTH).to_numpy().astype(np.int64)


def run_e1(exp: Experiment, ctx: RunContext) -> Measurement:
    """Share of requests per published hit bin, overall and per week of arrival."""
    table, source = load_trace(ctx)
    ctx.progress(f"E1: prefix hits of {table.num_rows} requests")
    hits, inputs = _hits(table)
    zeros = np.zeros(inputs.size, dtype=np.int64)
    overall = grouped_hit_stats(zeros, 1, hits, inputs)[0]
    week = np.floor(table.column(Col.ARRIVAL).to_numpy() / WEEK_S).astype(np.int64)
    present, group = np.unique(week, return_inverse=True)
    weekly = grouped_hit_stats(group, present.size, hits, inputs)

    def ranged(name: str, attr: str) -> Value:
        per_week = [getattr(w, attr) for w in weekly if w.requests and getattr(w, attr) is not None]
        value = getattr(overall, attr)
        return Value(name=name, value=float(value), low=min(per_week), high=max(per_week))

    values = [
        ranged("share_ge_95", "share_ge_95"),
        ranged("share_lt_50", "share_lt_50"),
        ranged("mean_hit", "mean_per_request"),
        Value(name="token_weighted_hit", value=float(overall.token_weighted or 0.0)),
        Value(name="requests", value=float(overall.requests)),
        Value(name="weeks", value=float(present.size)),
    ]
    x = [float(w + 1) for w in present]
    series = [
        Series(
            label=b.label,
            x=x,
            y=[float(w.bins[i].share or 0.0) for w in weekly],
            x_name="week",
            y_name="share of requests",
        )
        for i, b in enumerate(overall.bins)
    ]
    return exp.measured(
        ctx,
        values,
        series=series,
        labels=[source],
        notes=["intervals: the lowest and highest week"],
    )


def run_e3(exp: Experiment, ctx: RunContext) -> Measurement:
    """WAN bandwidth with and without a decode-side prefix cache, per KV size and hit rate."""
    table, source = load_trace(ctx)
    ctx.progress(f"E3: prefix hits of {table.num_rows} requests")
    hits, inputs = _hits(table)
    arrival = table.column(Col.ARRIVAL).to_numpy().astype(np.float64)
    span = float(arrival.max() - arrival.min()) if arrival.size > 1 else 1.0
    total = float(inputs.sum())
    uncached = float((inputs - hits.cached_tokens).sum())
    reduction = total / uncached if uncached > 0 else float("inf")
    values = [
        Value(name="reduction", value=reduction, unit="x"),
        Value(name="token_weighted_hit", value=hits.token_weighted(inputs)),
        Value(name="mean_hit", value=float(np.mean(hits.hit_rate)) if inputs.size else 0.0),
    ]
    for kb in KV_SIZES_KB:
        bps = 8 * kb * 1e3 / span
        values.append(Value(name=f"gbps_full_kv_{kb:g}KB", value=total * bps / 1e9, unit="Gbit/s"))
        values.append(
            Value(name=f"gbps_suffix_{kb:g}KB", value=uncached * bps / 1e9, unit="Gbit/s")
        )
    grid = [h / 100 for h in range(0, 100, 5)] + [0.97, 0.99]
    series = [
        Series(
            label=f"{kb:g} KB/token",
            x=grid,
            y=[total * (1 - h) * 8 * kb * 1e3 / span / 1e9 for h in grid],
            x_name="token-weighted hit rate",
            y_name="mean WAN need (Gbit/s)",
        )
        for kb in KV_SIZES_KB
    ]
    return exp.measured(
        ctx,
        values,
        series=series,
        labels=[source],
        notes=[
            f"mean over the trace's {span / 86400:.1f} days; the x-axis scales the trace's "
            "input tokens by (1 - hit)"
        ],
    )
