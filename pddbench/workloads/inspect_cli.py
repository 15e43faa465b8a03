"""The ``trace validate`` and ``trace inspect`` commands (mounted under ``pddbench trace``).

Owns the command-line edge of trace checking and inspection: reading the file, turning
:class:`~pddbench.errors.UserError` into lines on stderr and an exit status, and
rendering a :class:`~pddbench.workloads.inspect.TraceSummary` as text (rich tables on a
terminal, plain aligned text otherwise) or JSON. Computes nothing itself: validation is
``validate``'s, hit rates ``hitrate``'s, figures ``inspect``'s, drawing ``inspect_plot``'s.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from pddbench.errors import TraceError, UserError
from pddbench.workloads.inspect import (
    Distribution,
    HitStats,
    TraceSummary,
    hit_share_series,
    summarize,
    summary_to_json,
)
from pddbench.workloads.traceio import Trace, read_trace


def _fail(exc: UserError) -> None:
    """Print a user error as lines on stderr and exit with its status."""
    if isinstance(exc, TraceError):  # its lines start with the file name already
        for line in exc.details or [str(exc)]:
            click.echo(line, err=True)
    else:
        click.echo(f"pddbench: {exc}", err=True)
    click.get_current_context().exit(exc.exit_code)


def _load(file: Path, *, for_replay: bool = False) -> Trace:
    try:
        return read_trace(file, for_replay=for_replay)
    except UserError as exc:
        _fail(exc)
        raise AssertionError("unreachable") from exc


def _count_sessions(trace: Trace) -> int:
    return len(trace.table.column("session_id").unique())


@click.command("validate")
@click.argument("file", type=click.Path(path_type=Path))
def validate_command(file: Path) -> None:
    """Check that FILE is a well-formed canonical trace that a replay can run.

    Prints "ok: N requests, M sessions" and exits 0, or prints one line per problem
    on stderr ("FILE: row N: FIELD: message", N counted from 0) and exits 2.
    """
    trace = _load(file, for_replay=True)
    click.echo(f"ok: {trace.num_requests} requests, {_count_sessions(trace)} sessions")


# ----------------------------------------------------------------------- rendering


@dataclass(frozen=True)
class TextTable:
    """A titled table of strings: the one layout both renderers draw."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def _span(seconds: float) -> str:
    human = _duration(seconds)
    return human if human.endswith(" s") else f"{human} ({seconds:,.1f} s)"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}/s"


def _dist_row(name: str, d: Distribution, digits: int = 0) -> tuple[str, ...]:
    return (name, _num(d.mean, 1), _num(d.p50, digits), _num(d.p90, digits),
            _num(d.p99, digits), _num(d.max, digits))


def _cache_name(hit: HitStats) -> str:
    if hit.capacity_blocks is None:
        return "unbounded prefix cache"
    return f"LRU prefix cache of {hit.capacity_blocks:,} blocks"


def summary_tables(s: TraceSummary) -> list[TextTable]:
    """The text layout of a summary: overview, distributions, hits, bins, weeks."""
    overview = (
        ("file", s.file or "-"),
        ("epoch", s.epoch or "-"),
        ("requests", f"{s.requests:,}"),
        ("sessions", f"{s.sessions:,}"),
        ("sub-agent sessions", f"{s.subagent_sessions:,}"),
        ("time span", _span(s.time_span_s)),
        ("request rate", _rate(s.request_rate_per_s)),
        ("session rate", _rate(s.session_rate_per_s)),
        *((("prefix hashes", s.hashes),) if s.hashes else ()),
    )
    dists = (
        _dist_row("turns per session", s.turns_per_session, 1),
        _dist_row("input tokens", s.input_length),
        _dist_row("output tokens", s.output_length),
    )
    hit = s.hit
    hits = (
        ("token-weighted hit rate", _pct(hit.token_weighted)),
        ("mean per-request hit rate", _pct(hit.mean_per_request)),
        ("requests with hit >= 95%", _pct(hit.share_ge_95)),
        ("requests with hit < 50%", _pct(hit.share_lt_50)),
        ("cached / input tokens", f"{hit.cached_tokens:,} / {hit.input_tokens:,}"),
    )
    bins = tuple((b.label, f"{b.requests:,}", _pct(b.share)) for b in hit.bins)
    coarse = tuple((b.label, f"{b.requests:,}", _pct(b.share)) for b in hit.coarse_bins)
    week_rows = tuple(
        (w.label, f"{w.hit.requests:,}", _pct(w.hit.token_weighted), _pct(w.hit.share_ge_95),
         _pct(w.hit.share_lt_50), *(_pct(b.share) for b in w.hit.bins))
        for w in s.weeks
    )
    week_headers = ("week", "requests", "token hit", ">=95%", "<50%",
                    *(b.label for b in hit.bins))
    return [
        TextTable("Trace", ("", ""), overview),
        TextTable("Distributions", ("", "mean", "p50", "p90", "p99", "max"), dists),
        TextTable(f"Prefix hits ({_cache_name(hit)})", ("", ""), hits),
        TextTable("Hit-rate bins (share of requests)", ("bin", "requests", "share"), bins),
        TextTable("Coarse hit-rate bins", ("bin", "requests", "share"), coarse),
        TextTable("Hit rate by week", week_headers, week_rows),
    ]


def render_plain(tables: list[TextTable]) -> str:
    """Tables as aligned plain text (first column left-aligned, the rest right)."""
    out: list[str] = []
    for table in tables:
        rows = [table.headers, *table.rows] if any(table.headers) else list(table.rows)
        widths = [max(len(r[c]) for r in rows) for c in range(len(table.headers))]
        out.append(table.title)
        out.append("-" * len(table.title))
        for k, row in enumerate(rows):
            cells = [row[0].ljust(widths[0])] + [v.rjust(w) for v, w in zip(row[1:], widths[1:],
                                                                            strict=True)]
            out.append("  ".join(cells).rstrip())
            if k == 0 and any(table.headers):
                out.append("  ".join("-" * w for w in widths))
        out.append("")
    return "\n".join(out)


def render_rich(tables: list[TextTable]) -> None:
    """Tables drawn with rich on the terminal."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for t in tables:
        show_header = any(t.headers)
        table = Table(title=t.title, title_justify="left", show_header=show_header)
        for k, h in enumerate(t.headers):
            table.add_column(h, justify="left" if k == 0 else "right",
                             style="bold" if k == 0 else None)
        for row in t.rows:
            table.add_row(*row)
        console.print(table)


@click.command("inspect")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as JSON (stable keys; see pddbench.workloads.inspect).")
@click.option("--plot", "plot_path", type=click.Path(path_type=Path, dir_okay=False),
              default=None, metavar="OUT.png",
              help="Also draw the hit-rate bin shares over time (per day, or per hour for "
                   "traces shorter than 3 days) as a PNG.")
@click.option("--capacity-blocks", type=click.IntRange(min=1), default=None, metavar="N",
              help="Model an LRU prefix cache of N blocks instead of an unbounded one.")
def inspect_command(
    file: Path, as_json: bool, plot_path: Path | None, capacity_blocks: int | None
) -> None:
    """Summarise a trace: sizes, rates, lengths and prefix-cache hit-rate bins."""
    from pddbench.workloads.hitrate import prefix_hits

    trace = _load(file)
    hits = prefix_hits(trace.table, capacity_blocks=capacity_blocks)
    summary = summarize(trace, hits)
    if plot_path is not None:
        from pddbench.workloads.inspect_plot import plot_hit_bins

        try:
            plot_hit_bins(hit_share_series(trace, hits), plot_path,
                          title=f"Prefix-cache hit-rate distribution over time: {file.name}")
        except UserError as exc:
            _fail(exc)
    if as_json:
        click.echo(json.dumps(summary_to_json(summary), indent=2))
    elif sys.stdout.isatty():
        render_rich(summary_tables(summary))
    else:
        click.echo(render_plain(summary_tables(summary)), nl=False)
    if plot_path is not None:
        click.echo(f"plot: {plot_path}", err=as_json)


# the names the root CLI mounts under ``pddbench trace``
validate = validate_command
inspect = inspect_command
