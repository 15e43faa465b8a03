"""The reproduction report: one row per declared experiment, from the run folders alone.

Owns reading ``<out>/<id>/measurement.json`` for every experiment of the catalogue,
judging each (the declaration's check, see :meth:`Experiment.judge`), and writing
``report.html`` (self-contained), ``report.md`` (figures beside it) and ``report.json``
into ``<out>``. Rendering goes through the comparison report's renderers
(:func:`pddbench.harness.report.html.render_document`, ``render_sections_markdown``) and
figure plumbing (``figstyle``); this module only says what the sections hold.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from pddbench.harness.experiments.catalog import EXPERIMENTS, planned_costs
from pddbench.harness.experiments.decomposition import decompose_run, decomposition_table
from pddbench.harness.experiments.model import (
    MEASUREMENT_FILE,
    Experiment,
    Measurement,
    Verdict,
)
from pddbench.harness.experiments.run_capacity import bcr_table
from pddbench.harness.report.figstyle import FigureOut, finish, new_figure, styled
from pddbench.harness.report.html import render_document
from pddbench.harness.report.markdown import render_sections_markdown
from pddbench.harness.report.sections import Section
from pddbench.harness.report.tables import Table, TCell
from pddbench.harness.report.write import write_text
from pddbench.harness.rundir.folder import RunPaths
from pddbench.harness.rundir.manifest import RunManifest

REPORT_FORMAT = "pddbench.reproduction-report"
REPORT_VERSION = 1


@dataclass
class Row:
    """One experiment's line of the report."""

    id: str
    title: str
    published: str
    expected: str
    check: str
    measured: str
    verdict: str
    detail: str  # what the check saw, how far it missed, or why it did not run
    labels: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    quick: bool | None = None
    elapsed_s: float | None = None


def judge_row(exp: Experiment, m: Measurement | None) -> Row:
    """The row of ``exp`` given its measurement (None: absent from the folder); pure."""
    base = dict(
        id=exp.id,
        title=exp.title,
        published=exp.published,
        expected=exp.expected,
        check=exp.check_text,
    )
    if m is None:
        reason = (
            exp.not_run_reason
            or f"not part of this run (run it with `pddbench experiment run {exp.id} --out DIR`)"
        )
        return Row(**base, measured="—", verdict=Verdict.NOT_RUN.value, detail=reason)
    verdict, result = exp.judge(m)
    measured = "; ".join(v.text() for v in m.values) or "—"
    if verdict is Verdict.NOT_RUN:
        detail = m.not_run or (result.gap if result is not None else "")
    else:
        assert result is not None
        detail = result.seen if result.passed else f"{result.seen} — {result.gap}"
        if verdict is Verdict.INCONCLUSIVE:
            shape = "shape seen" if result.passed else "shape not seen"
            where = "; ".join(m.labels) or "WAN not emulated, measured on loopback"
            detail = f"{where}: {shape}; {detail}"
    return Row(
        **base,
        measured=measured,
        verdict=verdict.value,
        detail=detail,
        labels=list(m.labels),
        runs=list(m.runs),
        quick=m.quick,
        elapsed_s=m.elapsed_s,
    )


def load_measurement(out: Path, exp_id: str) -> Measurement | None:
    folder = out / exp_id
    if not (folder / MEASUREMENT_FILE).exists():
        return None
    return Measurement.load(folder)


def build_rows(out: Path) -> tuple[list[Row], dict[str, Measurement]]:
    rows, found = [], {}
    for exp in EXPERIMENTS:
        m = load_measurement(out, exp.id)
        if m is not None:
            found[exp.id] = m
        rows.append(judge_row(exp, m))
    return rows, found


def _figure(exp: Experiment, m: Measurement) -> FigureOut | None:
    """The row's figure: one panel per x axis (a sweep's dimensions each get their own)."""
    if not m.series:
        return None
    axes_names = list(dict.fromkeys(s.x_name for s in m.series))
    with styled():
        fig = new_figure(height_in=3.8, width_in=max(9.0, 4.5 * len(axes_names)))
        for i, x_name in enumerate(axes_names):
            ax = fig.add_subplot(1, len(axes_names), i + 1)
            lines = [s for s in m.series if s.x_name == x_name]
            for s in lines:
                ax.plot(
                    s.x,
                    s.y,
                    label=s.label,
                    drawstyle="steps-post" if "CDF" in exp.figure else "default",
                    marker="" if len(s.x) > 30 else "o",
                )
            ys = [y for s in lines for y in s.y if math.isfinite(y)]
            if any(s.log_y for s in lines) and ys and min(ys) > 0:
                ax.set_yscale("log")
            ax.set_xlabel(x_name)
            ax.set_ylabel(lines[0].y_name)
            ax.legend(fontsize=8)
        fig.suptitle(f"{exp.id}: {exp.title}")
        return finish(
            fig,
            f"{exp.id.lower()}",
            f"{exp.id} {exp.figure or exp.title}",
            f"{exp.id}: {exp.figure or 'measured series'}"
            + (f" ({', '.join(m.labels)})" if m.labels else ""),
        )


_CLS = {Verdict.REPRODUCED.value: "better", Verdict.NOT_REPRODUCED.value: "worse"}

# an experiment's own table of its measurement, shown first in its section
TABLES: dict[str, Callable[[Measurement], Table]] = {"E10": bcr_table}


def _summary_table(rows: list[Row]) -> Table:
    return Table(
        title="Published vs measured",
        headers=("id", "experiment", "published (PDD.md)", "measured", "verdict", "wall time"),
        rows=tuple(
            (
                TCell(r.id),
                TCell(r.title),
                TCell(r.expected),
                TCell(r.measured),
                TCell(r.verdict, sub=r.detail, cls=_CLS.get(r.verdict, "muted")),
                TCell("—" if r.elapsed_s is None else f"{r.elapsed_s:.0f} s"),
            )
            for r in rows
        ),
        numeric_from=99,
        id="reproduction",
    )


def build_sections(out: Path, rows: list[Row], found: dict[str, Measurement]) -> list[Section]:
    sections = [
        Section(
            id="summary",
            title="Reproduction summary",
            tables=[_summary_table(rows)],
            intro="One row per experiment of PDD.md's table. Verdicts: reproduced "
            "in shape (the declared check passed), not reproduced (by how much), "
            "inconclusive (WAN-dependent, WAN not emulated), not run (why).",
        )
    ]
    by_id = {e.id: e for e in EXPERIMENTS}
    for r in rows:
        exp = by_id[r.id]
        m = found.get(r.id)
        facts = [
            ("published", exp.published),
            ("expected", exp.expected),
            ("workload", exp.workload),
            ("scenarios", ", ".join(exp.scenarios) or "—"),
            ("swept", exp.sweep or "—"),
            ("check", exp.check_text),
            (
                "declared cost",
                "quick {:g} s, full {:g} s (its replays included)".format(
                    *(planned_costs([exp], q, set())[0] for q in (True, False))
                ),
            ),
            ("verdict", f"{r.verdict}: {r.detail}"),
            ("measured", r.measured),
        ]
        facts += [("label", x) for x in r.labels] + [("note", x) for x in exp.notes]
        if m is not None:
            facts += [("note", x) for x in m.notes]
        facts += [("run manifest", str(RunPaths(Path(p)).manifest)) for p in r.runs]
        sec = Section(
            id=r.id.lower(),
            title=f"{r.id}: {r.title}",
            tables=[
                Table(
                    title="",
                    headers=("", ""),
                    numeric_from=99,
                    rows=tuple((TCell(k), TCell(v)) for k, v in facts),
                )
            ],
        )
        if m is not None:
            own = TABLES.get(r.id)
            if own is not None and m.not_run is None:
                sec.tables.insert(0, own(m))
            fig = _figure(exp, m)
            if fig is not None:
                sec.figures.append(fig)
            for rel in r.runs:
                d = decompose_run(out / rel)
                if d is not None and d.summary:
                    sec.tables.append(decomposition_table(rel, d))
                if RunPaths(out / rel).manifest.exists():
                    manifest = RunManifest.load(out / rel)
                    sec.manifests.append((f"manifest: {rel}", manifest.to_json()))
        else:
            sec.missing = r.detail
        sections.append(sec)
    return sections


def _finite(obj: object) -> object:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def report_json(rows: list[Row], found: dict[str, Measurement]) -> dict[str, object]:
    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "rows": [asdict(r) for r in rows],
        "measurements": {k: _finite(m.model_dump()) for k, m in found.items()},
    }


def write_reports(out: Path) -> list[Path]:
    """Write report.html, report.md and report.json into ``out``; return their paths."""
    rows, found = build_rows(out)
    sections = build_sections(out, rows, found)
    title = "PDD reproduction report"
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    counts = {v.value: sum(r.verdict == v.value for r in rows) for v in Verdict}
    tally = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    head = (
        f'<h1>{escape(title)}</h1><p class="meta">{escape(str(out))}: {escape(tally)}. '
        f"Generated {escape(when)} by pddbench.</p>"
    )
    html, md, js = out / "report.html", out / "report.md", out / "report.json"
    write_text(html, render_document(title, head, sections))
    write_text(
        md,
        render_sections_markdown(
            [f"# {title}\n", f"{out}: {tally}. Generated {when}.\n"], sections, md
        ),
    )
    write_text(js, json.dumps(report_json(rows, found), indent=2, allow_nan=False) + "\n")
    return [html, md, js]
