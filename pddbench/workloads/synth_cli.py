"""The ``synth`` command (mounted as ``pddbench trace synth``): write a synthetic trace.

Owns option parsing and what the command prints: a one-line summary and, unless
``--quiet``, the E1 calibration figures (unbounded prefix cache). Generation lives in
:mod:`pddbench.workloads.synth`, profiles in :mod:`pddbench.workloads.synth_profile`.
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import numpy as np

from pddbench.errors import UserError
from pddbench.workloads.inspect import HitStats
from pddbench.workloads.synth import Calibration, SynthOptions, SynthTrace, calibration, synthesise
from pddbench.workloads.synth_profile import builtin_profiles, load_profile
from pddbench.workloads.traceio import write_trace


def _duration(seconds: float) -> str:
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def summary_line(path: Path, trace: SynthTrace, seconds: float) -> str:
    """``wrote <path>: N requests in S sessions over D days, ...`` (one line)."""
    table = trace.table
    inputs = table.column("input_length").to_numpy()
    arrival = table.column("arrival_s").to_numpy()
    bs = int(table.column("block_size")[0].as_py()) if table.num_rows else 0
    blocks = int(np.sum(-(-inputs.astype(np.int64) // max(bs, 1))))
    span = float(arrival.max()) if arrival.size else 0.0
    return (
        f"wrote {path}: {table.num_rows:,} requests in {trace.sessions:,} sessions over "
        f"{_duration(span)} from {trace.epoch}, {blocks:,} block hashes (block {bs}), "
        f"mean input {inputs.mean() if inputs.size else 0:,.0f} tokens, {seconds:.1f} s"
    )


def figures_line(stats: HitStats) -> str:
    """The calibration figures on one line (hit rates in an unbounded prefix cache)."""
    return (
        f"hit (unbounded cache): >=95%: {stats.share_ge_95 or 0:.1%}  "
        f"<50%: {stats.share_lt_50 or 0:.1%}  mean: {stats.mean_per_request or 0:.1%}"
    )


def weekly_table(cal: Calibration) -> str:
    """Shares of the published hit-rate bins per week of arrival, as a text table."""
    labels = [b.label for b in cal.overall.bins]
    lines = ["week  requests " + " ".join(f"{b:>7}" for b in labels) + "    mean"]
    for week, stats in cal.weeks:
        shares = " ".join(f"{b.share or 0:7.1%}" for b in stats.bins)
        lines.append(f"{week:>4}  {stats.requests:8,} {shares}  {stats.mean_per_request or 0:6.1%}")
    return "\n".join(lines)


@click.command("synth")
@click.option(
    "--profile",
    "profile_name",
    default="jan-feb",
    show_default=True,
    help=f"built-in profile ({', '.join(builtin_profiles())}) or a profile .toml path",
)
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="trace file to write (parquet)",
)
@click.option("--sessions", type=int, help="exact number of sessions (agent tasks)")
@click.option("--days", type=float, help="length of the arrival period in days (may be < 1)")
@click.option("--rate", type=float, help="mean session arrivals per second")
@click.option("--requests", type=int, help="exact number of requests (sessions are thinned)")
@click.option("--seed", type=int, help="random seed (default: the profile's)")
@click.option("--block-size", type=int, help="tokens per hashed block (default: the profile's)")
@click.option("--weekly", is_flag=True, help="also print the hit-rate bin shares per week")
@click.option("-q", "--quiet", is_flag=True, help="print only the summary line")
def synth(
    profile_name: str,
    output: Path,
    sessions: int | None,
    days: float | None,
    rate: float | None,
    requests: int | None,
    seed: int | None,
    block_size: int | None,
    weekly: bool,
    quiet: bool,
) -> None:
    """Generate a synthetic agentic multi-turn trace (seeded, deterministic)."""
    profile = load_profile(profile_name)
    options = SynthOptions(
        sessions=sessions,
        days=days,
        rate=rate,
        requests=requests,
        seed=seed,
        block_size=block_size,
    )
    started = time.perf_counter()
    trace = synthesise(profile, options)
    try:
        write_trace(trace.table, output, source=trace.source, epoch=trace.epoch)
    except OSError as exc:
        raise UserError(f"{output}: cannot write the trace ({exc.strerror or exc})") from None
    click.echo(summary_line(output, trace, time.perf_counter() - started))
    if quiet:
        return
    cal = calibration(trace)
    click.echo(figures_line(cal.overall))
    if weekly:
        click.echo(weekly_table(cal))
