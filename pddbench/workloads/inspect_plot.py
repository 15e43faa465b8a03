"""The hit-rate-bins-over-time figure (like the published January–February figure).

Draws a :class:`~pddbench.workloads.inspect.HitShareSeries` as a stacked area: the
share of requests in each of the seven published hit-rate bins per period (day, or hour
for short traces), each period a flat band; a period without requests stays blank. Uses
matplotlib's Agg canvas through ``matplotlib.figure.Figure`` (no pyplot, no global
backend switch, no display) with seaborn's style and palette. Owns only drawing and
writing the PNG; all numbers come from ``inspect``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import numpy as np

from pddbench.errors import UserError
from pddbench.workloads.inspect import DAY_S, HOUR_S, HitShareSeries, parse_epoch


def _x_values(series: HitShareSeries) -> tuple[list[object] | np.ndarray, str]:
    """Period starts as datetimes (epoch known) or as hours/days since offset 0."""
    unit = "hour" if series.period_s <= HOUR_S else "day"
    if series.epoch:
        epoch = parse_epoch(series.epoch)
        times = [epoch + timedelta(seconds=float(s)) for s in series.start_s]
        return times, f"time (UTC, per {unit})"
    scale = HOUR_S if unit == "hour" else DAY_S
    return series.start_s / scale, f"{unit}s since trace start (per {unit})"


def plot_hit_bins(series: HitShareSeries, path: str | Path, *, title: str | None = None) -> Path:
    """Write the stacked-area PNG of ``series`` to ``path`` and return the path."""
    import seaborn as sns
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
    from matplotlib.figure import Figure

    path = Path(path)
    if series.start_s.size == 0:
        raise UserError(f"{path}: nothing to plot, the trace has no requests")
    if path.parent and not path.parent.exists():
        raise UserError(f"{path}: folder {path.parent} does not exist")
    x, xlabel = _x_values(series)
    # each period is drawn as a flat band over [start, start + period): one extra edge
    shares = series.shares * 100.0
    shares = np.vstack([shares, shares[-1:]])
    if series.epoch:
        x = [*x, x[-1] + timedelta(seconds=series.period_s)]
    else:
        step = series.period_s / (HOUR_S if series.period_s <= HOUR_S else DAY_S)
        x = np.append(x, x[-1] + step)
    colors = sns.color_palette("Spectral", len(series.labels))
    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=1.1):
        fig = Figure(figsize=(11, 5.5), dpi=150, layout="constrained")
        ax = fig.add_subplot()
        ax.stackplot(x, shares.T, labels=series.labels, colors=colors, alpha=0.95,
                     linewidth=0, step="post")
        ax.set_ylim(0, 100)
        ax.set_xlim(x[0], x[-1])
        ax.set_ylabel("share of requests (%)")
        ax.set_xlabel(xlabel)
        ax.set_title(title or "Prefix-cache hit-rate distribution over time")
        if series.epoch:
            locator = AutoDateLocator()
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        handles, labels = ax.get_legend_handles_labels()
        ax.legend(
            handles[::-1],
            labels[::-1],
            title="hit rate",
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            frameon=False,
        )
        try:
            fig.savefig(path, format="png")
        except OSError as exc:
            raise UserError(f"{path}: cannot write the plot ({exc.strerror or exc})") from None
    return path
