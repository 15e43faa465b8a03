"""Shared figure plumbing: one style, one size, PNG bytes out.

Every report figure is drawn on a ``matplotlib.figure.Figure`` (Agg canvas: no pyplot,
no global backend switch, no display) inside seaborn's whitegrid style, and leaves as
PNG bytes with a title and a caption. Owns only that plumbing, and the colour and line
style each system's runs are drawn in (:func:`system_colors`, :func:`line_styles`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from io import BytesIO

from matplotlib.figure import Figure

from pddbench.harness.analysis.summary import RunAnalysis

DPI = 110
WIDTH_IN = 12.0


@dataclass(frozen=True)
class FigureOut:
    """A rendered figure: file stem, title, caption and PNG bytes."""

    name: str
    title: str
    caption: str
    png: bytes


@contextmanager
def styled() -> Iterator[None]:
    import seaborn as sns

    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=1.05):
        yield


def new_figure(height_in: float = 4.6, width_in: float = WIDTH_IN) -> Figure:
    return Figure(figsize=(width_in, height_in), dpi=DPI, layout="constrained")


def to_png(fig: Figure) -> bytes:
    buf = BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def finish(fig: Figure, name: str, title: str, caption: str) -> FigureOut:
    return FigureOut(name, title, caption, to_png(fig))


def system_colors(runs: Sequence[RunAnalysis]) -> dict[str, str]:
    """One hue per scenario (system); several runs of one scenario get shades of it."""
    import seaborn as sns
    from matplotlib.colors import to_hex

    scenarios = list(dict.fromkeys(r.scenario for r in runs))
    base = sns.color_palette("colorblind", max(len(scenarios), 1))
    colors: dict[str, str] = {}
    for i, scenario in enumerate(scenarios):
        group = [r for r in runs if r.scenario == scenario]
        if len(group) == 1:
            colors[group[0].label] = to_hex(base[i % len(base)])
        else:
            shades = sns.dark_palette(base[i % len(base)], len(group) + 2)[2:]
            for run, shade in zip(group, shades, strict=True):
                colors[run.label] = to_hex(shade)
    return colors


def line_styles(runs: Sequence[RunAnalysis]) -> dict[str, str]:
    """Solid for a scenario's first run, then dashed, dotted, dash-dot."""
    styles = ("-", "--", ":", "-.")
    seen: dict[str, int] = {}
    out = {}
    for run in runs:
        i = seen.get(run.scenario, 0)
        seen[run.scenario] = i + 1
        out[run.label] = styles[i % len(styles)]
    return out
