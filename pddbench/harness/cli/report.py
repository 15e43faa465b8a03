"""The ``report`` and ``regress`` commands (mounted by the lead as ``pddbench report`` and
``pddbench regress``).

Owns the command-line edge of analysis: options, file formats, exit statuses. Bad input
raises :class:`~pddbench.errors.UserError` (one line, exit 2); ``regress`` exits 1 when
it finds a regression, 0 otherwise. Computes nothing itself.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.analysis.stats import DEFAULT_PERCENTILES, parse_percentiles
from pddbench.harness.cli.options import path_option
from pddbench.harness.config.sla import parse_sla_overrides


def _percentiles(text: str | None) -> tuple[float, ...]:
    """The --percentiles list (the report always adds 50, 90 and 99)."""
    if text is None:
        return DEFAULT_PERCENTILES
    try:
        return parse_percentiles(text)
    except ValueError as exc:
        raise UserError(f"--percentiles: {exc}") from None


def _format(fmt: str | None, as_json: bool, out: Path) -> str:
    if as_json:
        return "json"
    if fmt:
        return fmt
    return {".md": "md", ".json": "json"}.get(out.suffix.lower(), "html")


@click.command("report")
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@path_option(
    "-o",
    "--output",
    "output",
    help="Report file (default report.html / .md / .json by format; '-' for JSON on stdout).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["html", "md", "json"]),
    default=None,
    help="Output format (default: from the file suffix, else html).",
)
@click.option("--json", "as_json", is_flag=True, help="Same as --format json.")
@path_option("--json-out", help="Also write the machine-readable JSON here.")
@click.option(
    "--baseline",
    default=None,
    help="Run id, scenario name or 1-based position of the baseline (default: first).",
)
@click.option(
    "--sla",
    "sla_text",
    default=None,
    help="SLA override, e.g. ttft=2.0,tpot=30ms,e2e=30,target=99 (seconds unless ms).",
)
@click.option(
    "--percentiles",
    default=None,
    help="Extra percentiles, e.g. 50,90,95,99,99.9 (50/90/99 are always computed).",
)
@path_option(
    "--capacity", multiple=True, help="Capacity-curve JSON file(s) to draw in the load section."
)
@click.option("--title", default=None, help="Report title.")
def report_command(
    runs: tuple[Path, ...],
    output: Path | None,
    fmt: str | None,
    as_json: bool,
    json_out: Path | None,
    baseline: str | None,
    sla_text: str | None,
    percentiles: str | None,
    capacity: tuple[Path, ...],
    title: str | None,
) -> None:
    """Compare run folders RUN... (results/<run>/) in one report.

    The HTML report is a single self-contained file (figures embedded, no scripts, no
    network). Every run is judged by one SLA: --sla over the baseline's scenario SLA
    over the pddbench default.
    """
    from pddbench.harness.report.model import build_report
    from pddbench.harness.report.write import Format, check_writable, render, write_text

    chosen = Format(_format(fmt, as_json, output or Path("report.html")))
    out = output or Path(f"report.{chosen.value}")
    for target in (out, json_out):  # refused before the (long) build, in one line
        if target is not None and str(target) != "-":
            check_writable(target)
    report = build_report(
        list(runs),
        baseline=baseline,
        sla_overrides=parse_sla_overrides(sla_text) if sla_text else None,
        percentiles=_percentiles(percentiles),
        capacity_files=list(capacity),
        title=title,
    )
    if str(out) == "-":
        if chosen is not Format.JSON:
            raise UserError("-o -: only JSON can be written to stdout (add --json)")
        click.echo(render(report, Format.JSON, out), nl=False)
    else:
        write_text(out, render(report, chosen, out))
        click.echo(
            f"wrote {out} ({len(report.runs)} run(s), baseline {report.baseline.label})", err=True
        )
    if json_out is not None:
        write_text(json_out, render(report, Format.JSON, json_out))


def _positive(name: str, value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{name} must be a positive number, got {value}")
    return value


@click.command("regress")
@path_option(
    "--history",
    required=True,
    help="History folder: DIR/<night, e.g. 2026-03-01>/<run folders>.",
)
@path_option(
    "--current",
    multiple=True,
    required=True,
    help="Tonight's run folder(s), or a folder of run folders (repeatable).",
)
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    help="Metric key to judge, e.g. ttft.p99 (repeatable; default: a standard set).",
)
@click.option("--sla", "sla_text", default=None, help="SLA override, e.g. ttft=2,tpot=0.03.")
@click.option(
    "--alpha",
    type=float,
    default=1e-4,
    show_default=True,
    help="False-alarm probability per metric and test (one-sided).",
)
@click.option(
    "--min-change",
    type=float,
    default=5.0,
    show_default=True,
    help="Smallest relative change (%) ever flagged.",
)
@click.option(
    "--window", type=int, default=14, show_default=True, help="Nights in the rolling baseline."
)
@click.option(
    "--recent",
    type=int,
    default=7,
    show_default=True,
    help="A step is reported while it is at most this many nights old.",
)
@click.option(
    "--min-history",
    type=int,
    default=5,
    show_default=True,
    help="Nights needed before anything is judged.",
)
@path_option("--report", "report_path", help="Write a report with trend figures (.html or .md).")
@path_option("--json", "json_path", help="Write the verdicts as JSON.")
def regress_command(
    history: Path,
    current: tuple[Path, ...],
    metrics: tuple[str, ...],
    sla_text: str | None,
    alpha: float,
    min_change: float,
    window: int,
    recent: int,
    min_history: int,
    report_path: Path | None,
    json_path: Path | None,
) -> None:
    """Judge tonight's runs against the nightly history, metric by metric.

    Exit status: 1 if any metric regressed, 0 otherwise, 2 on bad input.
    """
    from pddbench.harness.regress.check import DEFAULT_KEYS, regress
    from pddbench.harness.regress.report import render_html, render_markdown, text_table
    from pddbench.harness.regress.verdict import RegressConfig
    from pddbench.harness.report.write import write_text

    if not 0 < alpha < 0.5:
        raise UserError(f"--alpha must be in (0, 0.5), got {alpha}")
    if min(window, recent, min_history) < 1:
        raise UserError("--window, --recent and --min-history must be >= 1")
    cfg = RegressConfig(
        window=window,
        alpha=alpha,
        min_rel_change=min_change / 100.0,
        recent=recent,
        min_history=min_history,
    )
    result = regress(
        history,
        list(current),
        keys=list(metrics) or list(DEFAULT_KEYS),
        config=cfg,
        sla_overrides=parse_sla_overrides(sla_text) if sla_text else None,
    )
    click.echo(text_table(result))
    if report_path is not None:
        text = (
            render_markdown(result, report_path)
            if report_path.suffix.lower() == ".md"
            else render_html(result)
        )
        write_text(report_path, text)
    if json_path is not None:
        write_text(json_path, json.dumps(verdicts_json(result), indent=2) + "\n")
    click.get_current_context().exit(result.exit_code)


def verdicts_json(result: object) -> dict[str, object]:
    from pddbench.harness.regress.check import RegressResult

    assert isinstance(result, RegressResult)

    def num(v: float) -> float | None:
        return v if math.isfinite(v) else None

    return {
        "format": "pddbench.regress",
        "version": 1,
        "history": str(result.history),
        "nights": result.nights,
        "regressions": len(result.regressions),
        "verdicts": [
            {
                "scenario": s,
                "metric": v.key,
                "verdict": str(v.verdict),
                "tonight": num(v.current),
                "baseline": num(v.baseline),
                "rel_change": num(v.rel_change),
                "z": num(v.z),
                "threshold": num(v.threshold),
                "step_since": v.step_since,
                "reason": v.reason,
            }
            for s, v in result.all()
        ],
        "notes": result.notes,
    }
