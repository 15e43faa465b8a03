"""The self-contained static HTML report: one file, no scripts, no network.

Renders :class:`~pddbench.harness.report.sections.Section` objects: figures embedded as
base64 PNG ``<img>``, tables, run manifests in collapsible ``<details>``. Every piece of
text from the runs (labels, manifests, error classes) is HTML-escaped. Owns markup and
style only. When the run folders carry the main job's verdict, the page opens with it
(:func:`verdict_html`: the sentence, ``#verdict-sentence``, then the verdict table and its
notes), right under the title and the banners.
"""

from __future__ import annotations

import base64
import json
from html import escape

from pddbench.harness.report.model import Report
from pddbench.harness.report.sections import Section
from pddbench.harness.report.tables import Table
from pddbench.harness.report.verdict_view import verdict_table
from pddbench.harness.rundir.main_verdict import MainVerdict

CSS = """
:root { --fg:#1d232a; --muted:#6b7480; --line:#d9dee4; --bg:#ffffff; --head:#f3f5f7;
        --good:#17753a; --bad:#b42318; }
* { box-sizing: border-box; }
body { font: 15px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--fg); background: var(--bg); margin: 0; }
main { max-width: 1360px; margin: 0 auto; padding: 24px 32px 64px; }
h1 { font-size: 26px; margin: 0 0 6px; }
h2 { font-size: 21px; margin: 40px 0 10px; padding-top: 12px; border-top: 2px solid var(--line); }
h3 { font-size: 16px; margin: 18px 0 6px; }
.meta { color: var(--muted); margin: 2px 0; }
.sla { font-weight: 600; }
nav { margin: 14px 0 4px; columns: 4; font-size: 14px; }
nav a { display: block; color: #1f5fa8; text-decoration: none; }
figure { margin: 12px 0 18px; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption, .note, .intro { color: var(--muted); font-size: 13.5px; margin-top: 4px; }
.missing { color: var(--muted); font-style: italic; background: var(--head);
           padding: 8px 12px; border-left: 3px solid var(--line); }
.tablewrap { overflow-x: auto; margin: 6px 0 14px; }
table { border-collapse: collapse; font-size: 13.5px; }
th, td { border: 1px solid var(--line); padding: 4px 8px; vertical-align: top; }
th { background: var(--head); text-align: left; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td .sub { display: block; font-size: 12px; color: var(--muted); }
td.better .sub { color: var(--good); font-weight: 600; }
td.worse .sub { color: var(--bad); font-weight: 600; }
td.muted { color: var(--muted); }
ul.notes li { color: var(--bad); }
p.banner { background: var(--bad); color: #fff; font-weight: 700; padding: .6em .9em; }
details { margin: 6px 0; border: 1px solid var(--line); border-radius: 4px; padding: 4px 10px; }
summary { cursor: pointer; font-weight: 600; }
pre { font-size: 12.5px; overflow-x: auto; background: var(--head); padding: 8px; }
"""
VERDICT_CSS = """
p.verdict { font-size: 20px; line-height: 1.4; font-weight: 600; margin: 14px 0 8px;
            padding: 12px 16px; background: var(--head); border-left: 5px solid #1f5fa8; }
"""


def _table(t: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in t.headers)
    body = []
    for row in t.rows:
        cells = []
        for i, c in enumerate(row):
            classes = [c.cls] if c.cls else []
            if i >= t.numeric_from and (t.numeric_to is None or i < t.numeric_to):
                classes.append("num")
            cls = f' class="{" ".join(classes)}"' if classes else ""
            sub = f'<span class="sub">{escape(c.sub)}</span>' if c.sub else ""
            cells.append(f"<td{cls}>{escape(c.text)}{sub}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    title = f"<h3>{escape(t.title)}</h3>" if t.title else ""
    note = f'<p class="note">{escape(t.note)}</p>' if t.note else ""
    tid = f' id="{escape(t.id)}"' if t.id else ""
    table = (
        f'<div class="tablewrap"><table{tid}><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>{note}"
    )
    if t.collapsed:
        return f"<details><summary>{escape(t.title)}</summary>{table}</details>"
    return title + table


def _section(sec: Section) -> str:
    parts = [f'<section id="{escape(sec.id)}"><h2>{escape(sec.title)}</h2>']
    if sec.intro:
        parts.append(f'<p class="intro">{escape(sec.intro)}</p>')
    for fig in sec.figures:
        data = base64.b64encode(fig.png).decode("ascii")
        parts.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{escape(fig.title)}" '
            f'data-figure="{escape(fig.name)}"><figcaption>{escape(fig.caption)}</figcaption>'
            "</figure>"
        )
    if sec.missing:
        parts.append(f'<p class="missing">Not available: {escape(sec.missing)}.</p>')
    parts.extend(_table(t) for t in sec.tables)
    for label, manifest in sec.manifests:
        text = json.dumps(manifest, indent=2, sort_keys=True, default=str)
        parts.append(
            f"<details><summary>{escape(label)}</summary><pre>{escape(text)}</pre></details>"
        )
    parts.append("</section>")
    return "\n".join(parts)


def _notes(notes: list[str]) -> str:
    if not notes:
        return ""
    return '<ul class="notes">' + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>"


def verdict_html(v: MainVerdict) -> str:
    """The main verdict block: the sentence, the table per system, the verdict's notes."""
    return (
        f'<div id="main-verdict"><p class="verdict" id="verdict-sentence">'
        f"{escape(v.sentence())}</p>{_table(verdict_table(v))}{_notes(v.notes)}</div>"
    )


def render_html(report: Report, sections: list[Section]) -> str:
    """The whole report as one HTML document."""
    nav = "".join(f'<a href="#{escape(s.id)}">{escape(s.title)}</a>' for s in sections)
    notes = _notes(report.notes)
    runs = ", ".join(escape(r.label) for r in report.runs)
    wan = report.wan_banner()
    banner = f'<p class="banner" id="wan-banner">{escape(wan)}</p>' if wan else ""
    virtual = report.time_banner()
    if virtual:
        banner += f'<p class="banner" id="time-banner">{escape(virtual)}</p>'
    faults = report.fault_banner()
    if faults:
        banner += f'<p class="banner" id="fault-banner">{escape(faults)}</p>'
    verdict = report.main_verdict
    head = (
        f"<h1>{escape(report.title)}</h1>{banner}"
        f"{verdict_html(verdict) if verdict is not None else ''}"
        f'<p class="meta">Runs: {runs}. Baseline: <b>{escape(report.baseline.label)}</b>. '
        f"Generated {escape(report.generated_at)} by pddbench.</p>"
        f'<p class="meta sla">SLA: {escape(report.sla.describe())} '
        f'<span class="meta">({escape(report.sla_source)})</span></p>'
        f"{notes}<nav>{nav}</nav>"
    )
    css = CSS + VERDICT_CSS if verdict is not None else CSS
    return render_document(report.title, head, sections, css=css)


def render_document(title: str, head_html: str, sections: list[Section], *, css: str = CSS) -> str:
    """One self-contained HTML document: ``head_html`` (already escaped) then ``sections``."""
    body = "\n".join(_section(s) for s in sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{css}</style></head>"
        f"<body><main>{head_html}\n{body}</main></body></html>\n"
    )
