"""The Markdown report: the same sections as the HTML one, figures as PNG files beside it.

Owns Markdown syntax only: pipe tables (``|`` escaped), figures written to
``<report stem>_figures/<name>.png`` and linked relatively, manifests as fenced JSON.
The main job's verdict, when the run folders carry one, comes first under the title and
the banners (:func:`verdict_markdown`).
"""

from __future__ import annotations

import json
from pathlib import Path

from pddbench.harness.report.model import Report
from pddbench.harness.report.sections import Section
from pddbench.harness.report.tables import Table
from pddbench.harness.report.verdict_view import verdict_table
from pddbench.harness.rundir.main_verdict import MainVerdict


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _table(t: Table) -> str:
    lines = []
    if t.title:
        lines.append(f"**{_md(t.title)}**\n")
    lines.append("| " + " | ".join(_md(h) for h in t.headers) + " |")
    aligns = [
        "---:" if i >= t.numeric_from and (t.numeric_to is None or i < t.numeric_to) else "---"
        for i in range(len(t.headers))
    ]
    lines.append("| " + " | ".join(aligns) + " |")
    for row in t.rows:
        cells = []
        for c in row:
            text = _md(c.text)
            if c.sub:
                mark = {"better": " ✓", "worse": " ✗"}.get(c.cls, "")
                text += f" ({_md(c.sub)}{mark})"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    if t.note:
        lines.append(f"\n_{_md(t.note)}_")
    return "\n".join(lines) + "\n"


def verdict_markdown(v: MainVerdict) -> list[str]:
    """The main verdict's lines: the sentence, the table per system, the verdict's notes."""
    return [
        f"**Verdict:** {_md(v.sentence())}\n",
        _table(verdict_table(v)),
        *[f"> {_md(n)}\n" for n in v.notes],
    ]


def render_markdown(report: Report, sections: list[Section], out: Path) -> str:
    """Markdown text of the report; writes its figures into ``<out stem>_figures/``."""
    banners = [b for b in (report.wan_banner(), report.time_banner(), report.fault_banner()) if b]
    parts = [
        f"# {_md(report.title)}\n",
        *[f"> **{_md(b)}**\n" for b in banners],
        *(verdict_markdown(report.main_verdict) if report.main_verdict else []),
        f"Runs: {', '.join(_md(r.label) for r in report.runs)}. "
        f"Baseline: **{_md(report.baseline.label)}**. Generated {report.generated_at}.\n",
        f"SLA: **{_md(report.sla.describe())}** ({_md(report.sla_source)})\n",
    ]
    parts.extend(f"> {_md(n)}\n" for n in report.notes)
    return render_sections_markdown(parts, sections, out)


def render_sections_markdown(parts: list[str], sections: list[Section], out: Path) -> str:
    """``parts`` (the heading lines) followed by ``sections``; figures beside ``out``."""
    fig_dir = out.parent / f"{out.stem}_figures"
    for sec in sections:
        parts.append(f"\n## {sec.title}\n")
        if sec.intro:
            parts.append(f"_{_md(sec.intro)}_\n")
        for fig in sec.figures:
            fig_dir.mkdir(parents=True, exist_ok=True)
            (fig_dir / f"{fig.name}.png").write_bytes(fig.png)
            parts.append(
                f"![{_md(fig.title)}]({fig_dir.name}/{fig.name}.png)\n\n_{_md(fig.caption)}_\n"
            )
        if sec.missing:
            parts.append(f"_Not available: {_md(sec.missing)}._\n")
        parts.extend(_table(t) for t in sec.tables)
        for label, manifest in sec.manifests:
            text = json.dumps(manifest, indent=2, sort_keys=True, default=str)
            parts.append(
                f"<details><summary>{_md(label)}</summary>\n\n```json\n{text}\n```\n\n</details>\n"
            )
    return "\n".join(parts)
