"""Capacity search against synthetic attainment curves: few runs, right answer."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pddbench.harness.analysis.capacity import CapacityPoint, find_capacity, to_curve


def logistic(knee: float, width: float = 0.08, noise: float = 0.0, seed: int = 0):  # type: ignore[no-untyped-def]
    """Attainment falling from 1 to 0 around ``knee`` (relative width), optional noise."""
    rng = np.random.default_rng(seed)
    calls: list[float] = []

    def run_at(load: float) -> CapacityPoint:
        calls.append(load)
        a = 1.0 / (1.0 + math.exp((load - knee) / (width * knee)))
        a = min(1.0, max(0.0, a + rng.normal(0, noise)))
        return CapacityPoint(load_scale=load, attainment=a, goodput=load * a)

    return run_at, calls


def true_capacity(knee: float, target: float, width: float = 0.08) -> float:
    # 1 / (1 + e^x) = target  ->  x = ln(1/target - 1)
    return knee + width * knee * math.log(1.0 / target - 1.0)


@pytest.mark.parametrize("knee", [0.3, 1.0, 2.7, 9.0])
def test_finds_the_crossing_in_few_runs(knee: float) -> None:
    run_at, calls = logistic(knee)
    res = find_capacity(run_at, target_pct=99.0, rel_tol=0.05, max_runs=8)
    truth = true_capacity(knee, 0.99)
    assert res.bracketed and res.capacity is not None and res.estimate is not None
    assert res.capacity <= truth * 1.0001  # measured to meet: never above the truth
    assert res.capacity >= truth * 0.93  # and close to it
    assert abs(res.estimate - truth) / truth < 0.06
    assert len(calls) <= 8


def test_tolerates_noise() -> None:
    run_at, _ = logistic(2.0, noise=0.002, seed=3)
    res = find_capacity(run_at, target_pct=90.0, max_runs=10)
    assert abs(res.estimate - true_capacity(2.0, 0.90)) / true_capacity(2.0, 0.90) < 0.1


def test_never_fails_or_never_meets() -> None:
    res = find_capacity(lambda x: CapacityPoint(load_scale=x, attainment=1.0), max_load=8.0)
    assert not res.bracketed and res.capacity == 8.0 and "max_load" in res.reason
    res = find_capacity(lambda x: CapacityPoint(load_scale=x, attainment=0.5), min_load=0.25)
    assert not res.bracketed and res.capacity is None and "min_load" in res.reason


def test_curve_file_form_round_trips() -> None:
    run_at, _ = logistic(1.0)
    res = find_capacity(run_at)
    curve = to_curve(res, system="pdd", sla={"ttft_s": 5.0})
    again = type(curve).model_validate_json(curve.model_dump_json())
    assert again == curve
    loads = [p.load_scale for p in again.points]
    assert loads == sorted(loads)


def test_rejects_nonsense_parameters() -> None:
    run_at, _ = logistic(1.0)
    with pytest.raises(ValueError):
        find_capacity(run_at, growth=1.0)
    with pytest.raises(ValueError):
        find_capacity(run_at, target_pct=0)
