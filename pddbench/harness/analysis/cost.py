"""Hardware cost and BCR (benefit-cost ratio = SLA goodput ÷ hardware cost).

Owns the :class:`CostModel` (a unit price per GPU type, a count per type, and the cost
of a dedicated inter-datacenter line, all in one currency — by default "A-equivalents",
the price of one GPU of type A), the BCR of one system and the relative BCR and cost of
a system against a baseline. Pure arithmetic; no files, no metrics registry.

PDD's published comparison (PDD.md, E10), recomputed by ``tests/analysis/test_cost.py``:
the baseline is 88 × A; PDD is 43 × A + 32 × B + a line, with B costing 1.2-1.3 A.

* With the line at the stated ≈ 0.3 A: cost (43 + 32·1.2 + 0.3)/88 = 0.9284 (−7.16 %)
  and (43 + 32·1.3 + 0.3)/88 = 0.9648 (−3.52 %). Published: −7.1 % and −3.5 %.
  With 0.3 A, BCR = 1.278 / 0.9284 = +37.7 %.
* Each figure alone allows a range of line costs: −7.1 % needs 0.308-0.396 A, −3.5 %
  needs 0.276-0.364 A, BCR +37.5 % needs 0.362-0.422 A. The line cost that reproduces
  all three published one-decimal figures is 0.362-0.364 A (≈ 0.36 A); "≈ 0.3 A" is a
  rounded inference, off by at most 0.06 percentage points of cost.
* BCR with the published cost: 1.278 / 0.929 = 1.3757, i.e. +37.6 %; the published
  "+37.5 %" corresponds to a cost factor of 0.9291-0.9298.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pddbench.errors import UserError


class CostModel(BaseModel):
    """What a deployment costs, in one currency (default: A-equivalents)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    currency: str = "A-equivalent"
    unit_price: dict[str, float] = Field(description="price of one GPU, per GPU type")
    gpus: dict[str, int] = Field(description="number of GPUs, per GPU type")
    line_cost: float = Field(default=0.0, ge=0, description="dedicated inter-DC line(s)")

    @model_validator(mode="after")
    def _check(self) -> CostModel:
        missing = sorted(set(self.gpus) - set(self.unit_price))
        if missing:
            raise ValueError(f"no unit_price for GPU type(s) {', '.join(missing)}")
        if any(p < 0 for p in self.unit_price.values()) or any(c < 0 for c in self.gpus.values()):
            raise ValueError("prices and GPU counts must be >= 0")
        return self

    @property
    def gpu_cost(self) -> float:
        return float(sum(self.unit_price[t] * n for t, n in self.gpus.items()))

    @property
    def total(self) -> float:
        return self.gpu_cost + self.line_cost

    def describe(self) -> str:
        """``"43×A + 32×B + line 0.3 = 81.7 A-equivalent"``."""
        parts = [f"{n}×{t}" for t, n in self.gpus.items() if n]
        if self.line_cost:
            parts.append(f"line {self.line_cost:g}")
        return f"{' + '.join(parts) or 'nothing'} = {self.total:g} {self.currency}"


def cost_from_mapping(data: object, *, where: str) -> CostModel | None:
    """A cost model from a manifest/scenario table (``None`` stays ``None``)."""
    if data is None:
        return None
    try:
        return CostModel.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "cost"
        raise UserError(f"{where}: cost.{loc}: {first['msg']}") from None


def bcr(goodput_rps: float, cost: CostModel | None) -> float:
    """SLA goodput per unit of cost; NaN when the cost is unknown or zero."""
    if cost is None or cost.total <= 0 or math.isnan(goodput_rps):
        return math.nan
    return goodput_rps / cost.total


def relative(value: float, baseline: float) -> float:
    """``value / baseline - 1`` (e.g. −0.071 for −7.1 %); NaN when undefined."""
    if math.isnan(value) or math.isnan(baseline) or baseline == 0:
        return math.nan
    return value / baseline - 1.0


def relative_bcr(goodput_change: float, cost_change: float) -> float:
    """Relative BCR from relative goodput and cost: ``(1 + g) / (1 + c) - 1``."""
    if cost_change <= -1:
        return math.nan
    return (1.0 + goodput_change) / (1.0 + cost_change) - 1.0
