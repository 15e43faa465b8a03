"""TTFT over time with the WAN's schedule drawn under it (E12: rate swings, loss, cross traffic).

Top panel: each ok request's TTFT at its send time, one colour per run. Below, on the
same time axis, each emulated WAN direction's line rate (configured units) as a step
line from the run's ``links.parquet`` change rows, with loss and cross-traffic flows
marked. Draws from a :class:`~pddbench.harness.report.model.Report` only.
"""

from __future__ import annotations

from typing import Any

from pddbench.harness.report.figstyle import FigureOut, finish, new_figure, styled
from pddbench.harness.report.model import Report


def _steps(rows: list[dict[str, Any]], key: str, end: float) -> tuple[list[float], list[float]]:
    xs: list[float] = []
    ys: list[float] = []
    for r in rows:
        if r.get(key) is None:
            continue
        xs.append(r["t_s"])
        ys.append(float(r[key]))
    if xs:
        xs.append(max(end, xs[-1]))
        ys.append(ys[-1])
    return xs, ys


def _down_spans(rows: list[dict[str, Any]], end: float) -> list[tuple[float, float]]:
    """(start, stop) of each stretch a direction was down (``up`` false), from its
    time-ordered state rows; one still down at the end lasts to ``end``."""
    spans: list[tuple[float, float]] = []
    since: float | None = None
    for r in rows:
        if r.get("up") is False and since is None:
            since = r["t_s"]
        elif r.get("up") is not False and since is not None:
            spans.append((since, r["t_s"]))
            since = None
    if since is not None:
        spans.append((since, max(end, since)))
    return spans


def ttft_timeline(report: Report) -> FigureOut | None:
    runs = [r for r in report.runs if r.series.ttft_timeline is not None]
    runs = [r for r in runs if r.series.ttft_timeline.x.size]
    if not runs:
        return None
    changed = [r for r in report.runs if r.link_changes]
    with styled():
        fig = new_figure(6.0 if changed else 3.6)
        axes = (
            fig.subplots(2, 1, sharex=True, height_ratios=[2, 1]) if changed else [fig.subplots()]
        )
        top = axes[0]
        end = 0.0
        for run in runs:
            tl = run.series.ttft_timeline
            end = max(end, float(tl.x.max()))
            top.scatter(tl.x, tl.y, s=8, color=report.colors[run.label], label=run.label, alpha=0.7)
        if report.sla.ttft_s is not None:
            top.axhline(report.sla.ttft_s, color="0.3", ls="--", lw=1)
        faults = [(label, f) for label, f in report.faults() if f.get("t_s") is not None]
        for label, f in faults:
            top.axvline(f["t_s"], color=report.colors[label], lw=1.2, ls="-")
            top.annotate(
                f"kill {f.get('instance')}", (f["t_s"], 1.0), xycoords=("data", "axes fraction"),
                fontsize="x-small", rotation=90, va="top", ha="right",
            )  # fmt: skip
        top.set(ylabel="TTFT (s)", title="TTFT at each request's send time")
        top.legend(loc="upper right", fontsize="small")
        if changed:
            low = axes[1]
            for run in changed:
                by_dir: dict[str, list[dict[str, Any]]] = {}
                for row in sorted(run.link_changes, key=lambda r: r["t_s"]):
                    by_dir.setdefault(f"{row['link']} {row['direction']}", []).append(row)
                for i, (name, rows) in enumerate(sorted(by_dir.items())):
                    xs, ys = _steps(
                        [r for r in rows if r.get("rate_mbit") is not None], "rate_mbit", end
                    )
                    if xs:
                        low.step(
                            xs,
                            [y / 1000 for y in ys],
                            where="post",
                            color=report.colors[run.label],
                            ls=("-", "--", ":")[i % 3],
                            label=f"{run.label}: {name}",
                        )
                    for start, stop in _down_spans(rows, end):
                        low.axvspan(start, stop, color="#b42318", alpha=0.15, lw=0)
                    for r in rows:
                        if r.get("loss_pct"):
                            low.axvline(r["t_s"], color="#b42318", lw=0.8, ls=":")
                        if r.get("cross_traffic_mbit"):
                            low.axvline(r["t_s"], color="0.4", lw=0.8, ls="-.")
            low.set(ylabel="line rate (Gbit/s)", xlabel="time since the run's start (s)")
            low.set_ylim(bottom=0)
            low.legend(loc="lower right", fontsize="x-small")
        else:
            top.set_xlabel("time since the run's start (s)")
        caption = (
            "Each ok request's TTFT at the moment it was sent"
            + (
                "; below, each emulated WAN direction's line rate over the same time (the"
                " run's [network.schedule], from links.parquet; configured, unscaled rates)."
                " Dotted red: a loss change; dash-dot grey: a cross-traffic flow starts; shaded"
            " red: the direction was down."
                if changed
                else "; no run had a WAN schedule."
            )
            + (". Solid vertical lines: an injected fault ([[faults]])." if faults else "")
        )
        return finish(fig, "ttft_timeline", "TTFT over time and the WAN", caption)
