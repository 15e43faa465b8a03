"""Nightly regression verdicts: planted regressions are flagged, pure noise is not.

Noise model of the synthetic histories: every run's value is ``level · exp(N(0, 3 %))``
(3 % relative noise per run); nights hold 1 or 3 repeated runs. Measured rates at the
default settings (alpha 1e-4 per metric and test; see ``verdict``'s docstring) over many
seeds: false alarms ≈ 0.06 % of verdicts with one run per night and none seen with 3;
a 10 % step is flagged the first night ≈ 86 % of the time with 3 repeats (≈ 98 % within
two nights), and with one run per night within four nights ≈ 82 % of the time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from pddbench.cli import cli, main
from pddbench.harness.analysis.registry import Direction
from pddbench.harness.cli.report import regress_command
from pddbench.harness.regress.verdict import RegressConfig, Verdict, judge
from tests.analysis.runs import write_history

NOISE = 0.03


def series(
    seed: int, nights: int, reps: int, step_at: int | None = None, step: float = 1.10
) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(nights):
        f = step if step_at is not None and i >= step_at else 1.0
        out.append(list(2.0 * f * np.exp(rng.normal(0, NOISE, reps))))
    return out


def verdict_at(
    s: list[list[float]], k: int, direction: Direction = Direction.LOWER, min_change: float = 0.0
) -> Verdict:
    names = [f"2026-03-{i + 1:02d}" for i in range(k)]
    return judge("ttft.p99", names, s[:k], s[k], direction=direction, min_change=min_change).verdict


def test_planted_ttft_p99_regression_with_repeats_is_flagged() -> None:
    s = series(0, 21, 3, step_at=20)  # 20 nights of history, tonight +10 %
    v = judge("ttft.p99", [f"n{i}" for i in range(20)], s[:20], s[20], direction=Direction.LOWER)
    assert v.verdict is Verdict.REGRESSION
    assert v.rel_change == pytest.approx(0.10, abs=0.04)
    first = within2 = 0
    seeds = 60
    for seed in range(seeds):
        s = series(100 + seed, 22, 3, step_at=20)
        hits = [verdict_at(s, k) is Verdict.REGRESSION for k in (20, 21)]
        first += hits[0]
        within2 += any(hits)
    assert first / seeds >= 0.75
    assert within2 / seeds >= 0.93


def test_single_run_nights_catch_a_step_within_a_few_nights() -> None:
    s = series(7, 21, 1, step_at=17)  # the step landed three nights before tonight
    v = judge(
        "ttft.p99", [f"n{i:02d}" for i in range(20)], s[:20], s[20], direction=Direction.LOWER
    )
    assert v.verdict is Verdict.REGRESSION
    assert v.step_since == "n17"
    caught = 0
    seeds = 60
    for seed in range(seeds):
        s = series(300 + seed, 24, 1, step_at=20)
        caught += any(verdict_at(s, k) is Verdict.REGRESSION for k in range(20, 24))
    assert caught / seeds >= 0.65


def test_pure_noise_across_20_nights_raises_no_false_alarm() -> None:
    alarms = tests = 0
    for seed in range(80):
        s = series(1000 + seed, 21, 1)
        for k in range(5, 21):  # every night judged against the nights before it
            tests += 1
            alarms += verdict_at(s, k) is Verdict.REGRESSION
    assert alarms <= 4, f"{alarms} false alarms in {tests} verdicts"
    for seed in range(20):  # with repeats: none at all
        s = series(2000 + seed, 21, 3)
        assert verdict_at(s, 20) is not Verdict.REGRESSION


def test_direction_decides_regression_or_improvement() -> None:
    s = series(5, 21, 3)
    faster = [x * 0.85 for x in s[20]]
    names = [f"n{i}" for i in range(20)]
    assert (
        judge("ttft.p99", names, s[:20], faster, direction=Direction.LOWER).verdict
        is Verdict.IMPROVEMENT
    )
    assert (
        judge("goodput", names, s[:20], faster, direction=Direction.HIGHER).verdict
        is Verdict.REGRESSION
    )


def test_small_changes_and_identical_values_are_noise() -> None:
    flat = [[1.0]] * 20
    names = [f"n{i}" for i in range(20)]
    assert judge("k", names, flat, [1.01], direction=Direction.LOWER).verdict is Verdict.NOISE
    assert judge("k", names, flat, [1.2], direction=Direction.LOWER).verdict is Verdict.REGRESSION
    zeros = [[0.0]] * 20  # an error rate that is always 0
    assert (
        judge(
            "error_rate", names, zeros, [0.001], direction=Direction.LOWER, min_change=0.005
        ).verdict
        is Verdict.NOISE
    )
    assert (
        judge(
            "error_rate", names, zeros, [0.02], direction=Direction.LOWER, min_change=0.005
        ).verdict
        is Verdict.REGRESSION
    )


def test_too_little_history_or_no_value() -> None:
    v = judge("k", ["a", "b"], [[1.0], [1.0]], [5.0], direction=Direction.LOWER)
    assert v.verdict is Verdict.INSUFFICIENT
    v = judge("k", ["a"] * 0, [], [float("nan")], direction=Direction.LOWER)
    assert v.verdict is Verdict.NO_DATA
    cfg = RegressConfig(min_history=2)
    v = judge("k", ["a", "b"], [[1.0], [1.0]], [5.0], direction=Direction.LOWER, config=cfg)
    assert v.verdict is Verdict.REGRESSION


# ------------------------------------------------------------------ end to end (CLI)


@pytest.fixture(scope="module")
def planted(  # one draw of the noise (seed 0); the rates are tested above
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, list[Path]]:
    return write_history(
        tmp_path_factory.mktemp("planted"), nights=12, repeats=3, plant=1.10, seed=0
    )


@pytest.fixture(scope="module")
def noisy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    return write_history(tmp_path_factory.mktemp("noisy"), nights=12, repeats=3, seed=2)


def test_cli_flags_the_planted_regression(planted: tuple[Path, list[Path]], tmp_path: Path) -> None:
    hist, tonight = planted
    args = [
        "--history",
        str(hist),
        "--json",
        str(tmp_path / "v.json"),
        "--report",
        str(tmp_path / "r.html"),
    ]
    for t in tonight:
        args += ["--current", str(t)]
    res = CliRunner().invoke(regress_command, args)
    assert res.exit_code == 1, res.output
    data = json.loads((tmp_path / "v.json").read_text())
    by = {v["metric"]: v for v in data["verdicts"]}
    assert by["ttft.p99"]["verdict"] == "regression"
    assert by["ttft.p99"]["rel_change"] == pytest.approx(0.10, abs=0.04)
    assert by["tpot.p50"]["verdict"] == "noise"
    assert "ttft.p99" in res.output and "regression" in res.output
    html = (tmp_path / "r.html").read_text()
    assert "data:image/png;base64," in html and "<script" not in html


def test_cli_noise_history_exits_0(noisy: tuple[Path, list[Path]], tmp_path: Path) -> None:
    hist, tonight = noisy
    res = CliRunner().invoke(
        regress_command,
        [
            "--history",
            str(hist),
            "--current",
            str(tonight[0].parent),
            "--metric",
            "ttft.p99",
            "--metric",
            "goodput",
            "--report",
            str(tmp_path / "r.md"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "no regression" in res.output
    assert (tmp_path / "r_figures").is_dir()


@pytest.fixture
def mounted() -> Iterator[None]:
    cli.add_command(regress_command, "regress")
    try:
        yield
    finally:
        cli.commands.pop("regress", None)


def test_bad_input_exits_2_with_one_line(
    mounted: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    noisy: tuple[Path, list[Path]],
) -> None:
    hist, tonight = noisy
    cases = [
        ["regress", "--history", str(tmp_path / "none"), "--current", str(tonight[0])],
        ["regress", "--history", str(hist), "--current", str(tmp_path)],
        ["regress", "--history", str(hist), "--current", str(tonight[0]), "--metric", "ttft"],
        ["regress", "--history", str(hist), "--current", str(tonight[0]), "--metric", "nope.p9"],
        ["regress", "--history", str(hist), "--current", str(tonight[0]), "--alpha", "2"],
    ]
    for args in cases:
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("pddbench: "), err


def test_a_broken_history_run_is_skipped_with_a_note(
    noisy: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    import shutil

    hist, tonight = noisy
    copy = tmp_path / "h"
    shutil.copytree(hist, copy)
    (sorted(copy.iterdir())[0] / "pdd-r0" / "requests.parquet").unlink()
    res = CliRunner().invoke(
        regress_command,
        ["--history", str(copy), "--current", str(tonight[0]), "--metric", "ttft.p99"],
    )
    assert res.exit_code == 0, res.output
    assert "skipped history run" in res.output and "requests.parquet: missing" in res.output


def test_tonight_inside_the_history_is_left_out_of_it(noisy: tuple[Path, list[Path]]) -> None:
    hist, _ = noisy
    last = sorted(p for p in hist.iterdir())[-1]
    res = CliRunner().invoke(
        regress_command, ["--history", str(hist), "--current", str(last), "--metric", "ttft.p99"]
    )
    assert res.exit_code == 0, res.output
    assert "over 11 night(s) of history" in res.output


def test_first_night_with_an_empty_history_is_not_a_failure(
    noisy: tuple[Path, list[Path]], tmp_path: Path
) -> None:
    _, tonight = noisy
    (tmp_path / "history").mkdir()
    res = CliRunner().invoke(
        regress_command, ["--history", str(tmp_path / "history"), "--current", str(tonight[0])]
    )
    assert res.exit_code == 0, res.output
    assert "insufficient-history" in res.output and "no history for this scenario" in res.output
