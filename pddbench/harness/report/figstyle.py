"""Shared figure plumbing: one style, one size, PNG bytes out.

Every report figure is drawn on a ``matplotlib.figure.Figure`` (Agg canvas: no pyplot,
no global backend switch, no display) inside seaborn's whitegrid style, and leaves as
PNG bytes with a title and a caption. Owns only that plumbing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from io import BytesIO

from matplotlib.figure import Figure

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
