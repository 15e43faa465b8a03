"""The BCR verdict of one system: BCR = SLA goodput at capacity ÷ cost, and its basis.

Owns :class:`BcrVerdict` and :func:`bcr_verdict`. A BCR is a BCR only when the goodput
comes from a capacity search that found the capacity (a ladder point missed the target
above one that met it); the capacity is the walk's crossing of the target
(:func:`~pddbench.harness.analysis.crossing.walk_capacity`, the one reading every verdict
uses), not the ladder's highest met point. Goodput measured at whatever load was
offered — an ordinary replay, or a ladder that met the target at every point — is below
capacity, so the ratio is labelled **load-bounded** (a lower bound on the BCR) and never
shown as the BCR. Pure: no files, no registry.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

from pddbench.harness.analysis.crossing import walk_capacity
from pddbench.harness.config.cost import CostModel
from pddbench.harness.rundir.ladder import LadderVerdict

VerdictBasis = Literal["capacity", "load-bounded", "refused", "failed"]
CAPACITY_READING = "capacity: where SLA attainment, fitted in offered rate, crosses the target"


class BcrVerdict(BaseModel):
    """One system's goodput, cost and BCR with the basis they stand on (report JSON form)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str
    basis: VerdictBasis
    goodput: float | None  # req/s meeting the SLA: at capacity, or at the offered load
    goodput_low: float | None = None  # the capacity's interval (capacity basis only)
    goodput_high: float | None = None  # None: open above
    confidence: float | None = None
    capacity_load_scale: float | None = None
    cost: float | None = None
    cost_text: str = ""
    bcr: float | None = None  # only with basis "capacity"
    load_bounded_bcr: float | None = None  # goodput below capacity ÷ cost: a lower bound
    reason: str = ""

    def bcr_text(self) -> str:
        if self.bcr is not None:
            return f"{self.bcr:.4g} (capacity)"
        if self.load_bounded_bcr is not None:
            return f"load-bounded >= {self.load_bounded_bcr:.4g} (not the BCR)"
        return self.basis if self.basis in ("refused", "failed") else "-"


def _ratio(goodput: float | None, cost: CostModel | None) -> float | None:
    if goodput is None or cost is None or cost.total <= 0 or math.isnan(goodput):
        return None
    return goodput / cost.total


def bcr_verdict(
    system: str, cost: CostModel | None, ladder: LadderVerdict | None, offered_goodput: float
) -> BcrVerdict:
    """The verdict from a ladder when one ran, else from the goodput at the offered load."""
    common = dict(
        system=system,
        cost=cost.total if cost else None,
        cost_text=cost.describe() if cost else "no cost model in the scenario",
    )
    if ladder is None:
        good = None if math.isnan(offered_goodput) else offered_goodput
        return BcrVerdict(
            basis="load-bounded",
            goodput=good,
            load_bounded_bcr=_ratio(good, cost),
            reason="goodput at the offered load (no capacity search)",
            **common,  # type: ignore[arg-type]
        )
    if ladder.basis == "refused":
        return BcrVerdict(basis="refused", goodput=None, reason=ladder.reason, **common)  # type: ignore[arg-type]
    cap = walk_capacity(ladder)
    if cap.basis == "capacity":
        return BcrVerdict(
            basis="capacity",
            goodput=cap.capacity,
            goodput_low=cap.capacity_low,
            goodput_high=cap.capacity_high,
            confidence=ladder.confidence,
            capacity_load_scale=ladder.capacity_load_scale,
            bcr=_ratio(cap.capacity, cost),
            reason=f"{CAPACITY_READING}; {ladder.reason}" if ladder.reason else CAPACITY_READING,
            **common,  # type: ignore[arg-type]
        )
    if cap.basis in ("below the walk", "no counted point"):
        return BcrVerdict(
            basis="refused",
            goodput=None,
            reason=f"no point met the target once attainment is fitted in rate ({cap.basis})",
            **common,  # type: ignore[arg-type]
        )
    return BcrVerdict(  # no miss: the goodput the walk measured is a lower bound
        basis="load-bounded",
        goodput=ladder.capacity_goodput,
        confidence=ladder.confidence,
        capacity_load_scale=ladder.capacity_load_scale,
        load_bounded_bcr=_ratio(ladder.capacity_goodput, cost),
        reason=ladder.reason,
        **common,  # type: ignore[arg-type]
    )
