"""Hardware cost and BCR (benefit-cost ratio = SLA goodput ÷ hardware cost).

Owns the scenario's ``[cost]`` table (:class:`CostSettings`: unit prices per GPU type and
line costs, nothing else), the cost *derived from a deployment* (:class:`CostModel`: Σ
instances × chips × unit price + line costs, with its breakdown, in one currency — by
default "A-equivalents", the price of one GPU of type A), the BCR of one system, the
relative BCR and cost of a system against a baseline, and the cost at another price of
one GPU type (the B:A price sensitivity). Pure arithmetic; no files, no metrics registry.

A ``[cost]`` table may still list ``gpus`` (per-type counts, the old form); they must equal
the counts the deployment implies, or the scenario is refused (one line naming both).

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    computed_field,
    model_validator,
)

# B:A price ratios the report's sensitivity table uses (PDD.md: B costs 1.2-1.3 A)
SENSITIVITY_PRICES: tuple[float, ...] = (0.8, 1.0, 1.25)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_prices(unit_price: dict[str, float]) -> None:
    if any(p < 0 for p in unit_price.values()):
        raise ValueError("unit prices must be >= 0")


class CostSettings(_Strict):
    """A scenario's ``[cost]``: prices and line costs; the GPU counts come from the deployment."""

    currency: str = "A-equivalent"
    unit_price: dict[str, float] = Field(description="price of one GPU, per GPU type")
    line_cost: float = Field(default=0.0, ge=0, description="dedicated inter-DC line(s)")
    gpus: dict[str, int] | None = Field(
        default=None, description="deprecated: must equal the deployment's counts if given"
    )

    @model_validator(mode="after")
    def _check(self) -> CostSettings:
        _check_prices(self.unit_price)
        return self


@dataclass(frozen=True)
class Chips:
    """One instance as the cost sees it."""

    instance: str
    role: str
    hardware: str
    chips: int


class CostItem(_Strict):
    """One line of a cost breakdown: ``instances`` × ``chips`` × ``unit_price`` (or a line)."""

    role: str  # the instances' role, or "line"
    instances: list[str] = Field(default_factory=list)
    hardware: str | None = None
    chips: int = Field(0, ge=0)  # per instance
    unit_price: float = Field(0.0, ge=0)
    cost: float = Field(ge=0)

    def describe(self) -> str:
        if self.hardware is None:
            return f"{self.role} {self.cost:g}"
        return f"{len(self.instances)}×{self.chips} {self.hardware} ({self.role})"


class CostModel(_Strict):
    """What a deployment costs, in one currency (default: A-equivalents), with its breakdown.

    Written into a run's manifest (``scenario.cost``) and read back by the same class; a
    manifest from before the breakdown existed (``gpus`` only) still reads."""

    currency: str = "A-equivalent"
    unit_price: dict[str, float] = Field(description="price of one GPU, per GPU type")
    gpus: dict[str, int] = Field(description="number of GPUs, per GPU type")
    line_cost: float = Field(default=0.0, ge=0, description="dedicated inter-DC line(s)")
    breakdown: list[CostItem] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _drop_derived(cls, data: Any) -> Any:
        if isinstance(data, dict) and "total" in data:  # written by computed ``total``
            data = {k: v for k, v in data.items() if k != "total"}
        return data

    @model_validator(mode="after")
    def _check(self) -> CostModel:
        missing = sorted(set(self.gpus) - set(self.unit_price))
        if missing:
            raise ValueError(f"no unit_price for GPU type(s) {', '.join(missing)}")
        _check_prices(self.unit_price)
        if any(c < 0 for c in self.gpus.values()):
            raise ValueError("prices and GPU counts must be >= 0")
        return self

    @property
    def gpu_cost(self) -> float:
        return float(sum(self.unit_price[t] * n for t, n in self.gpus.items()))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> float:
        return self.gpu_cost + self.line_cost

    def describe(self) -> str:
        """``"2×22 h800-sxm (prefill) + … + line 0.3 = 83.3 A-equivalent"``; counts only
        (``"43×A + 32×B + line 0.3 = 81.7 A-equivalent"``) when there is no breakdown."""
        if self.breakdown:
            parts = [item.describe() for item in self.breakdown if item.cost or item.hardware]
        else:
            parts = [f"{n}×{t}" for t, n in self.gpus.items() if n]
            if self.line_cost:
                parts.append(f"line {self.line_cost:g}")
        return f"{' + '.join(parts) or 'nothing'} = {self.total:g} {self.currency}"

    def repriced(self, hardware: str, price: float) -> CostModel:
        """The same deployment with one GPU type at another unit price."""
        prices = dict(self.unit_price) | {hardware: price}
        items = [
            i.model_copy(update={"unit_price": price, "cost": price * i.chips * len(i.instances)})
            if i.hardware == hardware
            else i
            for i in self.breakdown
        ]
        return self.model_copy(update={"unit_price": prices, "breakdown": items})

    def priced_types(self) -> list[str]:
        """GPU types the deployment uses that are not the currency unit (priced ≠ 1)."""
        return sorted(t for t, n in self.gpus.items() if n and self.unit_price[t] != 1.0)


def derive_cost(settings: CostSettings, instances: Iterable[Chips]) -> CostModel:
    """Σ instances × chips × unit price + line costs, grouped by (role, hardware, chips).

    Raises ``ValueError`` (one line) for a GPU
    type without a price or declared ``gpus`` that disagree with the instances."""
    groups: dict[tuple[str, str, int], list[str]] = {}
    counts: dict[str, int] = {}
    for inst in instances:
        if inst.hardware not in settings.unit_price:
            raise ValueError(
                f"cost.unit_price has no price for {inst.hardware!r} (instance {inst.instance})"
            )
        groups.setdefault((inst.role, inst.hardware, inst.chips), []).append(inst.instance)
        counts[inst.hardware] = counts.get(inst.hardware, 0) + inst.chips
    if settings.gpus is not None:
        declared = {t: n for t, n in settings.gpus.items() if n}
        if declared != counts:
            raise ValueError(
                f"cost.gpus {_counts(declared)} disagrees with the deployment's instances "
                f"({_counts(counts)}); drop cost.gpus, the counts come from the instances"
            )
    items = [
        CostItem(
            role=role,
            instances=names,
            hardware=hw,
            chips=chips,
            unit_price=settings.unit_price[hw],
            cost=settings.unit_price[hw] * chips * len(names),
        )
        for (role, hw, chips), names in groups.items()
    ]
    line = settings.line_cost
    if line:
        items.append(CostItem(role="line", cost=line))
    return CostModel(
        currency=settings.currency,
        unit_price=settings.unit_price,
        gpus=counts,
        line_cost=line,
        breakdown=items,
    )


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{t} = {n}" for t, n in sorted(counts.items())) or "none"


@dataclass(frozen=True)
class PricePoint:
    """A system's cost with one GPU type at one price (a row of the sensitivity table)."""

    hardware: str
    price: float
    cost: float


def sensitivity(cost: CostModel, hardware: str, prices: Sequence[float]) -> list[PricePoint]:
    """The cost at each price of ``hardware`` (unchanged where the system does not use it)."""
    return [PricePoint(hardware, p, cost.repriced(hardware, p).total) for p in prices]


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
