"""BCR arithmetic and the published PDD cost table (PDD.md, E10), recomputed."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pddbench.errors import UserError
from pddbench.harness.config.cost import (
    CostModel,
    bcr,
    relative,
    relative_bcr,
)
from pddbench.harness.rundir.manifest import RunManifest

BASELINE = CostModel(unit_price={"A": 1.0}, gpus={"A": 88})


def pdd(b_price: float, line: float) -> CostModel:
    return CostModel(unit_price={"A": 1.0, "B": b_price}, gpus={"A": 43, "B": 32}, line_cost=line)


def test_published_cost_changes_with_the_line_at_0_3_a() -> None:
    low = relative(pdd(1.2, 0.3).total, BASELINE.total)
    high = relative(pdd(1.3, 0.3).total, BASELINE.total)
    assert low == pytest.approx((43 + 32 * 1.2 + 0.3) / 88 - 1)  # -7.16 %
    assert high == pytest.approx((43 + 32 * 1.3 + 0.3) / 88 - 1)  # -3.52 %
    # within 0.1 percentage point of the published -7.1 % and -3.5 %
    assert abs(low * 100 - (-7.1)) < 0.1
    assert abs(high * 100 - (-3.5)) < 0.1
    assert round(low * 100, 2) == -7.16 and round(high * 100, 2) == -3.52


def test_line_cost_consistent_with_every_published_figure() -> None:
    lines = np.round(np.arange(0.0, 1.0, 0.0001), 4)
    ok = [
        line
        for line in lines
        if round(relative(pdd(1.2, line).total, 88) * 100, 1) == -7.1
        and round(relative(pdd(1.3, line).total, 88) * 100, 1) == -3.5
        and round(relative_bcr(0.278, relative(pdd(1.2, line).total, 88)) * 100, 1) == 37.5
    ]
    assert ok, "no line cost reproduces the published figures"
    assert min(ok) >= 0.36 and max(ok) <= 0.365  # the documented 0.362-0.364 A


def test_published_bcr_from_goodput_and_cost() -> None:
    assert relative_bcr(0.278, -0.071) == pytest.approx(1.278 / 0.929 - 1)
    assert round(1.278 / 0.929, 3) == 1.376
    assert abs(relative_bcr(0.278, -0.071) * 100 - 37.5) < 0.1


def test_bcr_is_goodput_per_cost() -> None:
    assert bcr(8.8, BASELINE) == pytest.approx(0.1)
    assert math.isnan(bcr(8.8, None))
    assert "43×A + 32×B + line 0.3 = 81.7" in pdd(1.2, 0.3).describe()


def _manifest_cost(tmp_path, cost: object) -> CostModel | None:
    """A manifest's scenario cost, through the manifest's own loading."""
    (tmp_path / "manifest.json").write_text(
        json.dumps({"run_id": "r", "scenario": {"name": "s", "cost": cost}})
    )
    return RunManifest.load(tmp_path).scenario.cost


def test_cost_model_validation(tmp_path) -> None:
    with pytest.raises(UserError, match="unit_price"):
        _manifest_cost(tmp_path, {"unit_price": {"A": 1}, "gpus": {"A": 4, "B": 2}})
    with pytest.raises(UserError, match=r"manifest\.json: scenario\.cost"):
        _manifest_cost(tmp_path, {"unit_price": {"A": 1}, "gpus": {"A": -1}})
    assert _manifest_cost(tmp_path, {}) is None


# -- cost derived from the deployment ------------------------------------------------------
from pddbench.harness.config.cost import (  # noqa: E402
    Chips,
    CostSettings,
    derive_cost,
    sensitivity,
)

PRICES = CostSettings(unit_price={"A": 1.0, "B": 1.25}, line_cost=0.3)
PDD_CHIPS = [
    Chips("p0", "prefill", "A", 27),
    Chips("rld0", "relay-decode", "A", 16),
    Chips("md0", "main-decode", "B", 16),
    Chips("md1", "main-decode", "B", 16),
]


def test_cost_is_instances_times_chips_times_price_plus_line() -> None:
    cost = derive_cost(PRICES, PDD_CHIPS)
    assert cost.gpus == {"A": 43, "B": 32}
    assert cost.total == pytest.approx(43 + 32 * 1.25 + 0.3)
    assert [(i.role, i.instances, i.cost) for i in cost.breakdown] == [
        ("prefill", ["p0"], 27.0),
        ("relay-decode", ["rld0"], 16.0),
        ("main-decode", ["md0", "md1"], 40.0),
        ("line", [], 0.3),
    ]
    assert sum(i.cost for i in cost.breakdown) == pytest.approx(cost.total)
    assert "2×16 B (main-decode)" in cost.describe() and "line 0.3" in cost.describe()
    # written and read by the same class: the manifest form round-trips, total included
    dumped = cost.model_dump(mode="json")
    assert dumped["total"] == pytest.approx(83.3)
    assert CostModel.model_validate(dumped) == cost


def test_declared_counts_must_agree_with_the_instances() -> None:
    agree = PRICES.model_copy(update={"gpus": {"A": 43, "B": 32}})
    assert derive_cost(agree, PDD_CHIPS).total == pytest.approx(83.3)
    stale = PRICES.model_copy(update={"gpus": {"A": 48, "B": 32}})
    with pytest.raises(ValueError, match=r"cost\.gpus .*A = 48.* disagrees .*A = 43"):
        derive_cost(stale, PDD_CHIPS)
    with pytest.raises(ValueError, match="no price for 'C'"):
        derive_cost(PRICES, [Chips("x", "decode", "C", 8)])


def test_b_price_sensitivity_reprices_one_type() -> None:
    cost = derive_cost(PRICES, PDD_CHIPS)
    assert cost.priced_types() == ["B"]
    points = sensitivity(cost, "B", (0.8, 1.0, 1.25))
    assert [p.cost for p in points] == pytest.approx([43 + 25.6 + 0.3, 75.3, 83.3])
    repriced = cost.repriced("B", 0.8)
    assert sum(i.cost for i in repriced.breakdown) == pytest.approx(repriced.total)
