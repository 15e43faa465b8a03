"""The file form of a ladder search (``capacity.json``): every point and the verdict.

Owns :class:`LadderPoint` and :class:`LadderVerdict` (pydantic, read back by reports), how
a verdict describes itself in one line, and its way across the disk boundary
(:meth:`LadderVerdict.save` into a run folder, :func:`read_verdict`). The search that
fills them is :class:`~pddbench.harness.plan.ladder.LadderSearch`; the reports read them
through :mod:`pddbench.harness.analysis.rundir`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pddbench.errors import UserError, first_problem
from pddbench.harness.rundir.folder import CAPACITY
from pddbench.workloads.inspect import bin_index
from pddbench.workloads.schema import COARSE_HIT_BINS, bin_label

# the hit-rate bins a point's mix is shown in (the trace summary's coarse bins)
MIX_BINS = COARSE_HIT_BINS
MIX_BIN_LABELS: tuple[str, ...] = tuple(bin_label(lo, hi) for lo, hi in MIX_BINS)

Basis = Literal["capacity", "load-bounded", "refused"]


def hit_bin_shares(hit_rate: np.ndarray) -> list[float]:
    """Share of requests per :data:`MIX_BINS` bin (fractions; NaN: unknown, left out)."""
    rate = np.asarray(hit_rate, dtype=np.float64)
    known = rate[np.isfinite(rate)]
    counts = np.bincount(bin_index(known, MIX_BINS), minlength=len(MIX_BINS))
    return [float(c / known.size) if known.size else 0.0 for c in counts]


class RequestMix(BaseModel):
    """What kind of requests a set is: its turn-0 share and its shares per hit-rate bin
    (:data:`MIX_BINS`, the trace summary's coarse bins, by the inspect module's rule)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    requests: int
    turn0_share: float  # of requests, in [0, 1]
    hit_bins: list[float]  # share of requests per MIX_BINS bin (unknown hit rates left out)

    @classmethod
    def of(cls, turns: np.ndarray, hit_rate: np.ndarray) -> RequestMix:
        """The mix of requests with these turn indices and hit rates (fractions; NaN:
        unknown, left out of the bins' denominator)."""
        turns = np.asarray(turns)
        n = int(turns.size)
        return cls(
            requests=n,
            turn0_share=float(np.mean(turns == 0)) if n else 0.0,
            hit_bins=hit_bin_shares(hit_rate),
        )

    def text(self) -> str:
        """``"turn 0 2.7 %, hit <50 % 4.0 / 50-90 % 16.4 / ..."``."""
        bins = " / ".join(
            f"{lab} {share:.1%}" for lab, share in zip(MIX_BIN_LABELS, self.hit_bins, strict=True)
        )
        return f"turn 0 {self.turn0_share:.1%}; hit {bins}"


class LadderPoint(BaseModel):
    """The file form of one point (``capacity.json`` ``points``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    load_scale: float
    trace_start_s: float
    trace_duration_s: float
    measure_s: float | None = None  # measured wall time (after the warm-up)
    bisect: bool = False  # a bisection point (between the highest met and lowest missed)
    descend: bool = False  # a step-down point (the first rung missed)
    # rate rungs: the rung's offered rate and what the trace's schedule planned at the
    # point's load scale (requests intended after the warm-up; per second of measured time)
    target_rps: float | None = None
    planned_rps: float | None = None
    planned_requests: int | None = None
    wall_s: float | None = None  # sending + draining
    requests: int
    met: int
    met_by: dict[str, int]
    warmup_excluded: int
    censored: int = 0
    attainment: float
    attainment_low: float
    attainment_high: float
    goodput: float
    offered_rps: float  # measured: requests intended after the warm-up ÷ measured time
    schedule_lag_p99_s: float | None = None
    excluded: str | None = None  # why the point does not count
    settle_s: float | None = None  # the servers' work after the last answer took this long
    backlog: str | None = None  # still busy after the wait: the load was not sustained
    settled: str | None = None  # why nothing was waited on (virtual time: the twin finished)
    # steady-state points: the measured requests' mix (their trace hit rates), the served
    # hit rates (the servers' reported cached tokens) and the trace window's own mix
    planned_mix: RequestMix | None = None  # planned in its measured time
    mix: RequestMix | None = None  # measured (intended in its measured time, sent)
    served_hit_bins: list[float] | None = None
    trace_mix: RequestMix | None = None
    primed_blocks: int | None = None  # trace blocks the caches were primed with

    def label(self) -> str:
        """``"x16"`` (load rungs) or ``"7.68 req/s (x16.3)"`` (rate rungs: planned rate)."""
        if self.planned_rps is None:
            return f"x{self.load_scale:.3g}"
        return f"{self.planned_rps:.3g} req/s (x{self.load_scale:.3g})"


class LadderVerdict(BaseModel):
    """The file form of a search: settings, every point, the capacity and its basis."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str
    target_pct: float = Field(gt=0, le=100)
    confidence: float
    warmup_s: float
    point_s: float
    max_lag_p99_s: float
    loads: list[float]  # the ladder's load scales (rate rungs: start and growth only)
    rungs_rps: list[float] | None = None  # rate rungs' offered rates (None: load rungs)
    min_requests: int = 0  # the power rule: see LadderSettings
    max_point_s: float | None = None
    bisect_points: int = 0
    descend_points: int = 0
    time_budget_s: float | None = None
    spent_s: float = 0.0  # wall time the points took (sending + draining)
    points: list[LadderPoint]
    basis: Basis
    reason: str
    capacity_load_scale: float | None = None
    capacity_planned_rps: float | None = None  # rate rungs: the capacity point's planned rate
    # req/s meeting the SLA: the most any point that met the target achieved (the trace's
    # own rate varies along the walk, so a higher load scale need not offer more)
    capacity_goodput: float | None = None
    capacity_low: float | None = None  # req/s; 0 when no point surely met
    capacity_high: float | None = None  # req/s; None when no point surely missed
    measured_requests: int = 0

    def save(self, folder: str | Path) -> Path:
        """Write ``<folder>/capacity.json``; its path."""
        path = Path(folder) / CAPACITY
        path.write_text(self.model_dump_json(indent=2))
        return path

    def _at(self) -> str:
        if self.capacity_planned_rps is None:
            return f"x{self.capacity_load_scale:g}"
        return f"{self.capacity_planned_rps:.3g} req/s offered (x{self.capacity_load_scale:.3g})"

    def describe(self) -> str:
        if self.basis == "refused":
            return f"{self.system}: refused: {self.reason}"
        if self.capacity_goodput is None:
            return f"{self.system}: {self.basis}: {self.reason}"
        if self.basis != "capacity":
            return (
                f"{self.system}: load-bounded (not a capacity) goodput "
                f"{self.capacity_goodput:.3g} req/s at {self._at()}; {self.reason}"
            )
        high = "open" if self.capacity_high is None else f"{self.capacity_high:.3g}"
        return (
            f"{self.system}: capacity goodput {self.capacity_goodput:.3g} req/s at "
            f"{self._at()} [{self.capacity_low or 0:.3g}, {high}] ({self.confidence:.0%}); "
            f"{self.reason}"
        )


# settings recorded in verdicts
RECORDED = ("min_requests", "max_point_s", "bisect_points", "descend_points", "time_budget_s")


def read_verdict(path: Path) -> LadderVerdict | None:
    """The ladder verdict in a capacity file (``None`` for an older curve file, one
    without ``basis``); :class:`UserError` naming the file when it is unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    if '"basis"' not in text:
        return None
    try:
        return LadderVerdict.model_validate_json(text)
    except ValidationError as exc:
        loc, msg = first_problem(exc)
        raise UserError(f"{path}: {loc}: {msg}") from None
