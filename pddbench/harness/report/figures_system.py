"""System figures: load curves, cost/BCR, bathtub, hit-rate bins over time, handoff, WAN.

Draws from a :class:`~pddbench.harness.report.model.Report` only; each function returns a
:class:`FigureOut`, or ``None`` when the runs hold nothing to draw (the report then says
why in words).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from pddbench.harness.analysis.recordset import HIT_BIN_LABELS
from pddbench.harness.report.figstyle import FigureOut, finish, new_figure, styled
from pddbench.harness.report.model import Report, hit_bin_groups


def _scenario_color(report: Report, scenario: str) -> str:
    for run in report.runs:
        if run.scenario == scenario:
            return report.colors[run.label]
    return "0.3"


def load_curves(report: Report) -> FigureOut | None:
    if not report.load and not report.capacity:
        return None
    target = report.sla.target_pct
    with styled():
        fig = new_figure(4.6)
        ax1, ax2 = fig.subplots(1, 2)
        for scenario, pts in report.load.items():
            color = _scenario_color(report, scenario)
            x = [p.offered_rps for p in pts]
            ax1.plot(x, [p.goodput for p in pts], color=color, marker="o", lw=2, label=scenario)
            ax2.plot(
                x, [p.attainment * 100 for p in pts], color=color, marker="o", lw=2, label=scenario
            )
        xlabel = "offered load (req/s)"
        for curve in report.capacity:
            color = _scenario_color(report, curve.system)
            pts = sorted(curve.points, key=lambda p: p.load_scale)
            have_rps = all(p.offered_rps is not None for p in pts)
            x = [p.offered_rps if have_rps else p.load_scale for p in pts]
            if not have_rps:
                xlabel = "offered load (req/s) / load scale (capacity curves)"
            ax1.plot(
                x,
                [math.nan if p.goodput is None else p.goodput for p in pts],
                color=color,
                marker="s",
                ls="--",
                lw=1.5,
                label=f"{curve.system} (capacity search)",
            )
            ax2.plot(
                x,
                [p.attainment * 100 for p in pts],
                color=color,
                marker="s",
                ls="--",
                lw=1.5,
                label=f"{curve.system} (capacity search)",
            )
        ax2.axhline(target, color="0.3", ls=":", lw=1)
        ax2.annotate(
            f"target {target:g} %", (ax2.get_xlim()[0], target), fontsize="small", va="bottom"
        )
        ax1.set_xlabel(xlabel)
        ax2.set_xlabel(xlabel)
        ax1.set_ylabel("SLA goodput (req/s)")
        ax2.set_ylabel("SLA attainment (%)")
        ax1.set_title("Goodput vs offered load")
        ax2.set_title("SLA attainment vs offered load")
        ax1.legend(fontsize="small")
        return finish(
            fig,
            "load",
            "Goodput and attainment vs load",
            "One point per run of a scenario replayed at a different load (offered load = "
            "records / span of intended send times), and capacity-search curves when given. "
            f"Attainment target {target:g} %.",
        )


def bcr_bars(report: Report) -> FigureOut | None:
    rows = [
        {"run": c.label, "quantity": q, "change": v * 100.0}
        for c in report.costs
        for q, v in (
            ("cost", c.cost_change),
            ("SLA goodput", c.goodput_change),
            ("BCR", c.bcr_change),
        )
        if v is not None
    ]
    if not rows or all(c.cost is None for c in report.costs):
        return None
    import seaborn as sns

    df = pd.DataFrame(rows)
    with styled():
        fig = new_figure(4.4)
        ax1, ax2 = fig.subplots(1, 2, width_ratios=[2, 1.2])
        palette = {r.label: report.colors[r.label] for r in report.runs}
        sns.barplot(data=df, x="quantity", y="change", hue="run", palette=palette, ax=ax1)
        ax1.axhline(0, color="0.2", lw=1)
        ax1.set(
            ylabel=f"change vs {report.baseline.label} (%)",
            xlabel="",
            title="Cost, goodput and BCR relative to the baseline",
        )
        for container in ax1.containers:
            ax1.bar_label(container, fmt="%+.1f", fontsize="x-small", padding=1)
        ax1.legend(fontsize="small")
        bounded = [c.label for c in report.costs if not c.verdict or c.verdict.basis != "capacity"]
        labels = [
            f"{c.label} (load-bounded)" if c.label in bounded else c.label for c in report.costs
        ]
        values = [c.bcr for c in report.costs]
        colors = [report.colors[c.label] for c in report.costs]
        ax2.barh(labels, values, color=colors)
        ax2.invert_yaxis()
        ax2.set(
            xlabel="BCR (goodput req/s per cost unit)",
            title="BCR" if not bounded else "BCR; load-bounded = lower bound, not the BCR",
        )
        note = (
            " Load-bounded ("
            + ", ".join(bounded)
            + "): goodput measured below capacity, so the ratio is a lower bound, not the BCR."
            if bounded
            else ""
        )
        return finish(
            fig,
            "bcr",
            "Cost and BCR",
            "BCR = SLA goodput at capacity ÷ hardware cost (Σ instances × chips × unit price + "
            "line). Relative BCR = (1 + Δgoodput) / (1 + Δcost) − 1." + note,
        )


def bathtub(report: Report) -> FigureOut | None:
    runs = [r for r in report.runs if np.isfinite(r.series.bathtub.service_rate).any()]
    if not runs:
        return None
    with styled():
        multi = _run_level_bathtub(report)
        fig = new_figure(4.6)
        axes = fig.subplots(1, 2 if multi is not None else 1, squeeze=False)[0]
        ax = axes[0]
        for run in runs:
            b = run.series.bathtub
            mid = (b.low + b.high) / 2 * 100
            ax.plot(
                mid,
                b.service_rate / 1e3,
                color=report.colors[run.label],
                marker="o",
                ms=4,
                lw=2,
                ls=report.dashes[run.label],
                label=run.label,
            )
        ax.set(
            xlabel="prefix hit rate (%, 5 %-wide bins)",
            ylabel="token service rate (k tok/s per request)",
        )
        ax.set_xlim(0, 100)
        ax.set_title("Per-request token service rate by hit rate")
        ax.legend(fontsize="small")
        if multi is not None:
            ax2 = axes[1]
            for scenario, (hit, tput) in multi.items():
                ax2.plot(
                    hit,
                    tput,
                    marker="o",
                    lw=2,
                    color=_scenario_color(report, scenario),
                    label=scenario,
                )
            ax2.set(
                xlabel="run's token-weighted hit rate (%)",
                ylabel="token throughput (k tok/s)",
                title="Run-level throughput vs hit rate",
            )
            ax2.legend(fontsize="small")
        return finish(
            fig,
            "bathtub",
            "Bathtub",
            "Left: Σ(input + output tokens) ÷ Σ E2E of ok requests per 5 % hit-rate bin — the "
            "rate one request of that hit rate was served at. In a mixed run all bins share "
            "the servers, so this is a per-request view, not the published bathtub (cluster "
            "throughput at a fixed hit rate, E2); that needs one run per hit rate, drawn on "
            "the right when several runs of one scenario differ in hit rate.",
        )


def _run_level_bathtub(report: Report) -> dict[str, tuple[list[float], list[float]]] | None:
    out: dict[str, tuple[list[float], list[float]]] = {}
    by: dict[str, list[tuple[float, float]]] = {}
    for run in report.runs:
        hit = run.metrics.value("token_hit_rate") * 100
        tput = (run.metrics.value("input_tps") + run.metrics.value("output_tps")) / 1e3
        if math.isfinite(hit) and math.isfinite(tput):
            by.setdefault(run.scenario, []).append((hit, tput))
    for scenario, pts in by.items():
        hits = [h for h, _ in pts]
        if len(pts) >= 3 and max(hits) - min(hits) >= 5:
            pts.sort()
            out[scenario] = ([h for h, _ in pts], [t for _, t in pts])
    return out or None


def hit_shares(report: Report) -> FigureOut | None:
    import seaborn as sns

    seen: dict[str, object] = {}
    for run in report.runs:
        trace = run.manifest.trace.model_dump(exclude_unset=True) if run.manifest else {}
        key = json.dumps(trace, sort_keys=True, default=str)
        if key not in seen and run.series.hit_shares.shares.size:
            seen[key] = run
    panels = list(seen.values())[:3]
    if not panels:
        return None
    colors = sns.color_palette("Spectral", len(HIT_BIN_LABELS))
    with styled():
        fig = new_figure(4.2 * len(panels))
        axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
        for ax, run in zip(axes, panels, strict=True):
            hs = run.series.hit_shares  # type: ignore[attr-defined]
            x = (hs.start_s - hs.start_s[0] + hs.period_s / 2) / 60.0
            ax.stackplot(
                x, (hs.shares * 100).T, labels=hs.labels, colors=colors, alpha=0.95, linewidth=0
            )
            ax.set_ylim(0, 100)
            ax.set_xlim(x[0], x[-1] if x.size > 1 else x[0] + 1)
            ax.set(
                ylabel="requests (%)",
                xlabel="minutes since the first intended send",
                title=f"Hit-rate bins over time — {run.label}",  # type: ignore[attr-defined]
            )
        handles, labels = axes[0].get_legend_handles_labels()
        axes[0].legend(
            handles[::-1],
            labels[::-1],
            fontsize="x-small",
            loc="center left",
            bbox_to_anchor=(1.0, 0.5),
            title="hit rate",
        )
        return finish(
            fig,
            "hit_shares",
            "Hit-rate bins over time",
            "Share of requests per published hit-rate bin in 40 equal windows of the run "
            "(by intended send time); one panel per distinct trace.",
        )


def handoff(report: Report) -> FigureOut | None:
    timelines = [
        (r, r.series.handoff)
        for r in report.runs
        if r.series.handoff is not None and r.series.handoff.requests > 0
    ]
    spikes = [
        r
        for r in report.runs
        if r.metrics["handoff_itl_max"].dist and r.metrics["handoff_itl_max"].dist.count
    ]
    if not timelines and not spikes:
        return None
    with styled():
        fig = new_figure(4.8)
        axes = fig.subplots(1, 2 if timelines and spikes else 1, squeeze=False)[0]
        i = 0
        if timelines:
            ax = axes[i]
            i += 1
            for run, tl in timelines:
                color = report.colors[run.label]
                for ex in tl.examples:
                    ax.plot(ex.x, ex.y * 1e3, color=color, alpha=0.25, lw=0.8)
                ax.plot(
                    tl.offsets,
                    tl.median_s * 1e3,
                    color=color,
                    lw=2.2,
                    label=f"{run.label} median ({tl.requests} relayed)",
                )
                ax.fill_between(
                    tl.offsets, tl.median_s * 1e3, tl.p90_s * 1e3, color=color, alpha=0.15, lw=0
                )
                if math.isfinite(tl.direct_median_s):
                    ax.axhline(tl.direct_median_s * 1e3, color=color, ls=":", lw=1)
            ax.axvline(0, color="0.2", ls="--", lw=1)
            ax.set(
                yscale="log",
                xlabel="token index − relay tokens (0 = first MainDecode token)",
                ylabel="inter-token interval (ms, log)",
                title="Token timeline around the RLD→MD handoff",
            )
            ax.legend(fontsize="x-small")
        if spikes:
            ax = axes[i]
            rows = []
            for run in spikes:
                for tag, kind in (("handoff_itl_max", "relayed"), ("direct_itl_max", "direct")):
                    d = run.metrics[tag].dist
                    if d is not None and d.count:
                        for stat in ("p50", "p90", "p99"):
                            rows.append(
                                {
                                    "run": run.label,
                                    "kind": kind,
                                    "stat": stat,
                                    "ms": d.get(stat) * 1e3,
                                }
                            )
            df = pd.DataFrame(rows)
            xs = np.arange(len(spikes))
            width = 0.38
            for j, kind in enumerate(("direct", "relayed")):
                sub = df[(df["kind"] == kind) & (df["stat"] == "p50")].set_index("run")
                vals = [sub["ms"].get(r.label, np.nan) for r in spikes]
                ax.bar(
                    xs + (j - 0.5) * width,
                    vals,
                    width,
                    color=[report.colors[r.label] for r in spikes],
                    alpha=1.0 if kind == "relayed" else 0.45,
                    hatch="//" if kind == "relayed" else None,
                    label=f"{kind}, P50",
                )
            ax.set_xticks(xs, [r.label for r in spikes])
            ax.set(
                ylabel="per-request max ITL, P50 (ms)", title="Max ITL: relayed vs direct requests"
            )
            ax.legend(fontsize="small")
        return finish(
            fig,
            "handoff",
            "Handoff",
            "Left (needs token_times_s): inter-token intervals around the handoff seam of "
            "relayed requests — median, median-to-P90 band and five single requests; dotted: "
            "median interval of direct requests. Right: median per-request max ITL of "
            "relayed (hatched) and direct requests.",
        )


def wan(report: Report) -> FigureOut | None:
    rows = []
    for run, g in hit_bin_groups(report.runs):
        v = g.metrics.value("wan_bytes_req.mean")
        if math.isfinite(v):
            rows.append({"run": run.label, "bin": g.label, "MB": v / 1e6})
    bw = [
        (r.label, r.metrics.value("wan_bandwidth") / 1e9)
        for r in report.runs
        if math.isfinite(r.metrics.value("wan_bandwidth"))
    ]
    if not rows and not bw:
        return None
    with styled():
        fig = new_figure(4.6)
        ax1, ax2 = fig.subplots(1, 2, width_ratios=[2.2, 1])
        df = pd.DataFrame(rows)
        labels = list(HIT_BIN_LABELS)
        x = np.arange(len(labels))
        for run in report.runs:
            if df.empty:
                break
            sub = df[df["run"] == run.label].set_index("bin").reindex(labels)
            if sub["MB"].notna().any():
                ax1.plot(
                    x,
                    sub["MB"].where(sub["MB"] > 0),
                    marker="o",
                    lw=2,
                    ls=report.dashes[run.label],
                    color=report.colors[run.label],
                    label=run.label,
                )
        ax1.set_yscale("log")
        ax1.set_xticks(x, labels)
        ax1.set(
            xlabel="prefix hit-rate bin",
            ylabel="mean WAN MB per request (log)",
            title="WAN bytes per request by hit rate",
        )
        if ax1.get_legend_handles_labels()[0]:
            ax1.legend(fontsize="small")
        if bw:
            ax2.barh(
                [b[0] for b in bw], [b[1] for b in bw], color=[report.colors[b[0]] for b in bw]
            )
            ax2.invert_yaxis()
            for yi, (_, v) in enumerate(bw):
                ax2.annotate(f" {v:.3g}", (v, yi), va="center", fontsize="small")
        ax2.set(xlabel="Gbit/s", title="Effective WAN bandwidth")
        return finish(
            fig,
            "wan",
            "WAN traffic",
            "Left: mean wan_bytes per ok request in each hit-rate bin (servers that do not "
            "report wan_bytes are absent; zero is not drawn on the log axis). Right: "
            "8 × Σ wan_bytes ÷ run window.",
        )
