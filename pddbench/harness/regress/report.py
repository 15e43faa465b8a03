"""Rendering nightly verdicts: a text table for the terminal, and an HTML/Markdown report
with one trend figure per scenario (history, fitted steps, baseline band, tonight).

Owns presentation only; the verdicts are ``verdict``'s.
"""

from __future__ import annotations

import base64
import math
from html import escape
from pathlib import Path

import numpy as np

from pddbench.harness.analysis.registry import default_registry, split_key
from pddbench.harness.analysis.units import fmt
from pddbench.harness.regress.check import RegressResult, ScenarioResult
from pddbench.harness.regress.verdict import MetricVerdict, Verdict
from pddbench.harness.report.figstyle import FigureOut, finish, new_figure, styled

COLORS = {
    Verdict.REGRESSION: "#b42318",
    Verdict.IMPROVEMENT: "#17753a",
    Verdict.NOISE: "#4a5562",
    Verdict.INSUFFICIENT: "#9aa3ad",
    Verdict.NO_DATA: "#9aa3ad",
}


def _shown(key: str, value: float) -> str:
    tag = split_key(key)[0]
    metric = default_registry()[tag]
    return f"{fmt(value * metric.scale)} {metric.shown_in}"


def rows(result: RegressResult) -> list[tuple[str, ...]]:
    out = []
    for scenario, v in result.all():
        change = "-" if not math.isfinite(v.rel_change) else f"{v.rel_change * 100:+.1f} %"
        z = "-" if not math.isfinite(v.z) else f"{v.z:+.1f}"
        out.append(
            (
                scenario,
                v.key,
                str(v.verdict),
                _shown(v.key, v.current),
                _shown(v.key, v.baseline),
                change,
                z,
                v.step_since or "",
                v.reason,
            )
        )
    return out


HEADERS = ("scenario", "metric", "verdict", "tonight", "baseline", "change", "z", "since", "reason")


def text_table(result: RegressResult) -> str:
    table = [HEADERS[:-1], *[r[:-1] for r in rows(result)]]
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    n = len(result.regressions)
    lines.append("")
    lines.append(
        f"{n} regression(s) over {len(result.nights)} night(s) of history"
        if n
        else f"no regression over {len(result.nights)} night(s) of history"
    )
    lines.extend(result.notes)
    return "\n".join(lines)


def trend_figure(scenario: ScenarioResult) -> FigureOut:
    verdicts = scenario.verdicts
    cols = 4
    nrows = max(1, math.ceil(len(verdicts) / cols))
    with styled():
        fig = new_figure(2.7 * nrows + 0.4, 14.0)
        axes = np.atleast_1d(fig.subplots(nrows, cols, squeeze=False)).ravel()
        for ax, v in zip(axes, verdicts, strict=False):
            _panel(ax, v)
        for ax in axes[len(verdicts) :]:
            ax.set_visible(False)
        fig.suptitle(
            f"{scenario.scenario}: nightly trend (dots: runs, line: fitted steps, "
            "band: baseline ± threshold, star: tonight)",
            fontsize="medium",
        )
        return finish(
            fig,
            f"trend_{scenario.scenario}",
            f"Trend — {scenario.scenario}",
            "History per night, the step fit, the rolling baseline band and tonight.",
        )


def _panel(ax: object, v: MetricVerdict) -> None:
    metric = default_registry()[split_key(v.key)[0]]
    k = metric.scale
    n = len(v.nights)
    for i, vals in enumerate(v.night_values):
        ax.scatter([i] * len(vals), np.asarray(vals) * k, s=9, color="0.55", zorder=2)
    if v.fit:
        ax.step(
            np.arange(n + 1) - 0.5,
            np.r_[v.fit, v.fit[-1]] * k,
            where="post",
            color="#1f5fa8",
            lw=1.5,
            zorder=3,
        )
    lo, hi = v.baseline_band
    if math.isfinite(lo) and math.isfinite(hi):
        ax.axhspan(lo * k, hi * k, color="#1f5fa8", alpha=0.10, lw=0)
    color = COLORS[v.verdict]
    if v.current_values:
        ax.scatter(
            [n] * len(v.current_values),
            np.asarray(v.current_values) * k,
            s=14,
            color=color,
            zorder=4,
        )
        ax.scatter([n], [v.current * k], marker="*", s=160, color=color, zorder=5)
    ax.set_title(f"{v.key} — {v.verdict}", fontsize="small", color=color)
    ax.set_ylabel(str(metric.shown_in), fontsize="x-small")
    ticks = sorted({0, n} | {t for t in range(0, n, max(1, n // 4)) if n - t >= 2})
    labels = [v.nights[t][-5:] if t < n else "tonight" for t in ticks]
    ax.set_xticks(ticks, labels, fontsize="x-small", rotation=30)
    ax.tick_params(axis="y", labelsize="x-small")


CSS = """
body { font: 15px/1.45 -apple-system, "Segoe UI", Roboto, Arial, sans-serif; color:#1d232a; }
main { max-width: 1400px; margin: 0 auto; padding: 20px 28px 60px; }
table { border-collapse: collapse; font-size: 13.5px; margin: 8px 0 16px; }
th, td { border: 1px solid #d9dee4; padding: 4px 8px; text-align: left; }
th { background: #f3f5f7; }
td.regression { color: #b42318; font-weight: 700; }
td.improvement { color: #17753a; font-weight: 700; }
td.muted, .muted { color: #6b7480; }
img { max-width: 100%; border: 1px solid #d9dee4; }
"""


def render_html(result: RegressResult) -> str:
    body = [
        f'<h1>pddbench nightly regression check</h1><p class="muted">History '
        f"{escape(str(result.history))}: {len(result.nights)} night(s) "
        f"({escape(result.nights[0] if result.nights else '-')} … "
        f"{escape(result.nights[-1] if result.nights else '-')}).</p>"
    ]
    n = len(result.regressions)
    body.append(f"<p><b>{n} regression(s).</b></p>" if n else "<p><b>No regression.</b></p>")
    body.append(
        "<table><thead><tr>"
        + "".join(f"<th>{escape(h)}</th>" for h in HEADERS)
        + "</tr></thead><tbody>"
    )
    for r in rows(result):
        cls = r[2] if r[2] in ("regression", "improvement") else "muted"
        cells = [f"<td>{escape(c)}</td>" for c in r]
        cells[2] = f'<td class="{cls}">{escape(r[2])}</td>'
        body.append("<tr>" + "".join(cells) + "</tr>")
    body.append("</tbody></table>")
    for note in result.notes:
        body.append(f'<p class="muted">{escape(note)}</p>')
    for sc in result.scenarios:
        fig = trend_figure(sc)
        data = base64.b64encode(fig.png).decode("ascii")
        body.append(
            f'<h2>{escape(sc.scenario)}</h2><p class="muted">SLA: '
            f"{escape(sc.sla.describe())}; tonight: {escape(', '.join(sc.current_runs))}"
            f'</p><figure><img src="data:image/png;base64,{data}" '
            f'alt="{escape(fig.title)}"></figure>'
        )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>pddbench '
        f"regress</title><style>{CSS}</style></head><body><main>{''.join(body)}</main>"
        "</body></html>\n"
    )


def render_markdown(result: RegressResult, out: Path) -> str:
    fig_dir = out.parent / f"{out.stem}_figures"
    lines = [
        "# pddbench nightly regression check",
        "",
        f"History `{result.history}`: {len(result.nights)} night(s).",
        "",
        "| " + " | ".join(HEADERS) + " |",
        "|" + "---|" * len(HEADERS),
    ]
    for r in rows(result):
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |")
    lines.append("")
    lines.extend(f"> {n}" for n in result.notes)
    for sc in result.scenarios:
        fig = trend_figure(sc)
        fig_dir.mkdir(parents=True, exist_ok=True)
        (fig_dir / f"{fig.name}.png").write_bytes(fig.png)
        lines += ["", f"## {sc.scenario}", "", f"![{fig.title}]({fig_dir.name}/{fig.name}.png)"]
    return "\n".join(lines) + "\n"
