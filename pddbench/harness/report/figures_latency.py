"""Latency figures: TTFT CDF/CCDF, percentile bars, TTFT by hit-rate bin, task completion.

Draws from a :class:`~pddbench.harness.report.model.Report` only (numbers come from the
analysis); returns :class:`FigureOut` or ``None`` when there is nothing to draw.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from pddbench.harness.analysis.recordset import HIT_BIN_LABELS
from pddbench.harness.report.figstyle import FigureOut, finish, new_figure, styled
from pddbench.harness.report.model import Report, hit_bin_groups


def ttft_cdf(report: Report) -> FigureOut | None:
    runs = [r for r in report.runs if r.series.ttft_cdf.x.size]
    if not runs:
        return None
    with styled():
        fig = new_figure(4.8)
        ax1, ax2 = fig.subplots(1, 2)
        for run in runs:
            c = run.series.ttft_cdf
            color = report.colors[run.label]
            ls = report.dashes[run.label]
            ax1.plot(c.x, c.y, color=color, lw=2, ls=ls, label=run.label)
            tail = 1.0 - c.y + 1.0 / max(run.metrics.value("ttft.count"), 1)
            ax2.plot(c.x, tail, color=color, lw=2, ls=ls, label=run.label)
        for ax in (ax1, ax2):
            ax.set(xscale="log", xlabel="TTFT (s, log scale)")
            if report.sla.ttft_s is not None:
                ax.axvline(report.sla.ttft_s, color="0.3", ls="--", lw=1)
        ax1.set_ylabel("share of ok requests ≤ x")
        ax1.set_ylim(0, 1.0)
        ax1.set_title("TTFT CDF")
        ax2.set(yscale="log", ylabel="share of ok requests > x", title="TTFT tail (1 − CDF)")
        for p in (0.1, 0.01, 0.001):
            ax2.axhline(p, color="0.75", lw=0.8, ls=":")
        ax1.legend(loc="lower right", fontsize="small")
        caption = (
            "Empirical CDF of TTFT over ok requests, one line per run (x on a log scale); "
            "right: the tail, where horizontal dotted lines mark P90, P99 and P99.9. "
            + (
                f"Dashed line: the SLA's TTFT target ({report.sla.ttft_s:g} s)."
                if report.sla.ttft_s is not None
                else ""
            )
        )
        return finish(fig, "ttft_cdf", "TTFT CDF", caption)


def latency_bars(report: Report) -> FigureOut | None:
    import seaborn as sns

    stats = [f"p{p:g}" for p in report.percentiles if p in (50.0, 90.0, 99.0)] or ["mean"]
    rows = []
    for run in report.runs:
        for tag, name in (("ttft", "TTFT (s)"), ("tpot", "TPOT (ms)"), ("e2e", "E2E (s)")):
            scale = 1e3 if tag == "tpot" else 1.0
            for stat in stats:
                v = run.metrics.value(f"{tag}.{stat}") * scale
                rows.append({"run": run.label, "metric": name, "stat": stat.upper(), "value": v})
    df = pd.DataFrame(rows)
    if df["value"].isna().all():
        return None
    with styled():
        fig = new_figure(4.6)
        axes = fig.subplots(1, 3)
        palette = {r.label: report.colors[r.label] for r in report.runs}
        for ax, name in zip(axes, ("TTFT (s)", "TPOT (ms)", "E2E (s)"), strict=True):
            sub = df[df["metric"] == name]
            sns.barplot(
                data=sub,
                x="stat",
                y="value",
                hue="run",
                palette=palette,
                ax=ax,
                legend=ax is axes[0],
            )
            ax.set(title=name, xlabel="", ylabel=name)
            if len(report.runs) <= 3:
                for container in ax.containers:
                    ax.bar_label(container, fmt="%.3g", fontsize="x-small", padding=1)
        if axes[0].get_legend() is not None:
            axes[0].legend(fontsize="small", title=None)
        return finish(
            fig,
            "latency_bars",
            "Latency percentiles",
            "P50 / P90 / P99 of TTFT, TPOT and E2E over ok requests, per run.",
        )


def ttft_by_hit_bin(report: Report) -> FigureOut | None:
    labels = list(HIT_BIN_LABELS)
    rows = [
        {
            "run": run.label,
            "bin": g.label,
            "share": g.share * 100.0,
            "p50": g.metrics.value("ttft.p50"),
            "p99": g.metrics.value("ttft.p99") if 99.0 in report.percentiles else math.nan,
        }
        for run, g in hit_bin_groups(report.runs)
    ]
    df = pd.DataFrame(rows)
    if df.empty or df[["p50"]].isna().all().all():
        return None
    with styled():
        fig = new_figure(6.2)
        ax, axs = fig.subplots(2, 1, height_ratios=[3, 1.2], sharex=True)
        x = np.arange(len(labels))
        for run in report.runs:
            sub = df[df["run"] == run.label].set_index("bin").reindex(labels)
            color = report.colors[run.label]
            ax.plot(x, sub["p50"], color=color, marker="o", lw=2, label=f"{run.label} P50")
            if not sub["p99"].isna().all():
                ax.plot(
                    x,
                    sub["p99"],
                    color=color,
                    marker="^",
                    lw=1.5,
                    ls="--",
                    label=f"{run.label} P99",
                )
        ax.set(
            yscale="log",
            ylabel="TTFT (s, log scale)",
            title="TTFT by prefix hit-rate bin (solid: P50, dashed: P99)",
        )
        if report.sla.ttft_s is not None:
            ax.axhline(report.sla.ttft_s, color="0.3", ls=":", lw=1)
        ax.legend(fontsize="x-small", ncol=max(1, len(report.runs)), loc="upper right")
        base = df[df["run"] == report.baseline.label].set_index("bin").reindex(labels)
        axs.bar(x, base["share"].fillna(0.0), color="0.55")
        axs.set_ylabel("requests (%)")
        axs.set_xticks(x, labels)
        axs.set_xlabel("prefix hit-rate bin (cached / input tokens)")
        for xi, v in zip(x, base["share"].fillna(0.0), strict=True):
            axs.annotate(f"{v:.1f}", (xi, v), ha="center", va="bottom", fontsize="x-small")
        return finish(
            fig,
            "ttft_by_hit_bin",
            "TTFT by hit-rate bin",
            "TTFT P50 (solid) and P99 (dashed) per published hit-rate bin; below, the share "
            f"of requests per bin in the baseline run ({report.baseline.label}). Low-hit "
            "requests must move most of their KV and make the tail.",
        )


def task_cdf(report: Report) -> FigureOut | None:
    runs = [r for r in report.runs if r.series.task_cdf.x.size]
    if not runs:
        return None
    with styled():
        fig = new_figure(4.2)
        ax = fig.subplots()
        for run in runs:
            c = run.series.task_cdf
            ax.plot(
                c.x,
                c.y,
                color=report.colors[run.label],
                lw=2,
                ls=report.dashes[run.label],
                label=run.label,
            )
        ax.set(
            xscale="log",
            xlabel="task completion time (s, log scale; tool/think time included)",
            ylabel="share of complete sessions ≤ x",
        )
        ax.set_ylim(0, 1)
        ax.legend(fontsize="small", loc="lower right")
        ax.set_title("Agent task completion time")
        return finish(
            fig,
            "task_cdf",
            "Task completion time",
            "CDF over complete sessions of last end − first intended send.",
        )
