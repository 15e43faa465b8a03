"""Step detection and the noise arithmetic behind the nightly verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from pddbench.harness.regress.noise import pooled_within, t_quantile
from pddbench.harness.regress.stepdetect import diff_sigma, fit_steps, fitted


def test_finds_planted_steps() -> None:
    rng = np.random.default_rng(1)
    y = np.r_[np.full(30, 10.0), np.full(20, 12.0), np.full(25, 9.0)] + rng.normal(0, 0.3, 75)
    segs = fit_steps(y)
    assert [s.start for s in segs] == [0, 30, 50]
    assert [round(s.level) for s in segs] == [10, 12, 9]
    assert fitted(segs, y.size).shape == (75,)


def test_flat_noise_has_no_steps() -> None:
    hits = 0
    for seed in range(200):
        y = np.random.default_rng(seed).normal(5.0, 1.0, 40)
        hits += len(fit_steps(y)) > 1
    assert hits <= 20  # default price (2 x BIC): spurious steps in ~3 % of series


def test_step_in_the_last_point_only_when_allowed() -> None:
    y = np.r_[np.zeros(20) + np.random.default_rng(0).normal(0, 0.1, 20), 5.0]
    assert fit_steps(y, min_size=3, min_last=1)[-1].start == 20
    assert fit_steps(y, min_size=3)[-1].start != 20


def test_weights_are_repeats() -> None:
    # a point that is the mean of 9 runs counts as 9 points
    y = np.array([0.0, 0.0, 0.0, 0.0, 1.0])
    w = np.array([1, 1, 1, 1, 9.0])
    assert fit_steps(y, w, sigma=0.2)[-1].level == pytest.approx(1.0)
    assert len(fit_steps(y, np.ones(5), sigma=2.0)) == 1


def test_diff_sigma_ignores_a_step() -> None:
    rng = np.random.default_rng(4)
    y = np.r_[np.zeros(200), np.full(200, 50.0)] + rng.normal(0, 1.0, 400)
    assert diff_sigma(y) == pytest.approx(1.0, rel=0.15)


@pytest.mark.parametrize(
    ("p", "df", "exact"),
    [
        (0.999, 10, 4.1437),
        (0.999, 20, 3.5518),
        (0.99, 5, 3.3649),
        (0.9999, 10, 5.6938),
        (0.9999, 20, 4.5385),
        (0.975, 30, 2.0423),
    ],
)
def test_t_quantile_matches_tables(p: float, df: int, exact: float) -> None:
    assert t_quantile(p, df) == pytest.approx(exact, rel=0.005)


def test_pooled_within_night_variance() -> None:
    var, df = pooled_within([np.array([1.0, 3.0]), np.array([5.0]), np.array([2.0, 4.0, 6.0])])
    assert df == 1 + 2
    assert var == pytest.approx((2.0 + 8.0) / 3)
