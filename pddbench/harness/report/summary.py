"""The comparison that ends ``pddbench replay``: the full HTML report plus a headline table.

Everything is computed by the analysis registry (``pddbench.harness.analysis``) through
the report builder — this module only decides where the report goes and prints the
headline (Markdown, readable as plain text) and the paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import click

from pddbench.errors import UserError
from pddbench.harness.report.markdown import _table as markdown_table
from pddbench.harness.report.model import build_report
from pddbench.harness.report.tables import headline_table
from pddbench.harness.report.write import write_report
from pddbench.harness.rundir.folder import RunPaths


def print_comparison(
    runs: Sequence[RunPaths], out_root: Path | None = None, *, html: bool = True
) -> Path | None:
    """Write ``report-<time>.html`` next to the runs and print the headline; returns its path.

    ``html=False`` prints the same headline without writing the HTML report (no figures
    drawn); ``pddbench report RUN...`` writes it later."""
    usable = [p for p in runs if p.requests.exists()]
    if not usable:
        return None
    root = out_root or usable[0].root.parent
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = root / f"report-{stamp}.html"
    try:
        if html:
            report = write_report([p.root for p in usable], out)
        else:
            report = build_report([p.root for p in usable])
    except UserError as exc:
        click.echo(f"pddbench: no report: {exc}", err=True)
        return None
    click.echo(markdown_table(headline_table(report)))
    for p in usable:
        click.echo(f"run: {p.root}")
    if not html:
        click.echo("report: not written (--no-report); `pddbench report RUN...` writes it")
        return None
    click.echo(f"report: {out}")
    return out
