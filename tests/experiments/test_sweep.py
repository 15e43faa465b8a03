"""E12's WAN sweep: planning, per-point scenarios, the ratio interval and the trend check."""

from __future__ import annotations

import math
import tomllib

import numpy as np
import pytest

from pddbench.harness.config.scenario import parse_scenario, scenario_text
from pddbench.harness.experiments.catalog import REPLAY_COST, by_id
from pddbench.harness.experiments.model import Measurement, RunContext, Series, Verdict
from pddbench.harness.experiments.run_sweep import NEEDS_WAN, run_e12, trend_label
from pddbench.harness.experiments.sweep import (
    SweepPoint,
    base_link,
    dimension_points,
    dump_toml,
    override_scenario,
    plan_points,
    point_scenario_text,
    point_value,
    ratio_interval,
)

E12 = by_id()["E12"]


def _scenario(name: str) -> tuple[str, dict]:
    text = scenario_text(name)[0]
    return text, tomllib.loads(text)


def test_plan_starts_at_the_scenarios_own_line_and_changes_one_field_at_a_time() -> None:
    _, data = _scenario("cross-dc-pd")
    base = base_link(data)
    plan = plan_points({"rate_mbit": [100000, 25000, 10000], "loss_pct": [0, 0.1]}, base)
    assert [p.key for p in plan] == ["base", "rate25000", "rate10000", "loss0.1"]
    assert [p.key for p in dimension_points(plan, "loss_pct")] == ["base", "loss0.1"]
    assert [point_value(p, "rate_mbit", base) for p in plan] == [100000, 25000, 10000, 100000]
    assert point_value(plan[0], "jitter_ms", base) == 3.0
    with pytest.raises(ValueError, match="first point must be the scenario's own 100000"):
        plan_points({"rate_mbit": [50000, 25000]}, base)
    with pytest.raises(ValueError, match="unknown sweep dimension"):
        plan_points({"delay_ms": [15, 30]}, base)


def test_declared_points_plan_on_both_scenarios_and_cost_covers_their_replays() -> None:
    for quick in (True, False):
        plans = [plan_points(E12.sweep_points(quick), base_link(_scenario(s)[1]))
                 for s in E12.scenarios]  # fmt: skip
        assert [p.key for p in plans[0]] == [p.key for p in plans[1]]
        extra = (len(plans[0]) - 1) * len(E12.scenarios)  # the base point is E4/E5's replays
        assert E12.cost.of(quick) >= extra * REPLAY_COST.of(quick)
    assert len(E12.sweep_points(True)["rate_mbit"]) < len(E12.sweep_points(False)["rate_mbit"])


def test_point_scenarios_are_valid_and_override_the_wan_only() -> None:
    text, data = _scenario("pdd")
    rate = point_scenario_text(text, SweepPoint("rate_mbit", 2500.0))
    sc = parse_scenario(rate, "point")
    assert sc.name == "pdd.rate2500" and sc.network.links[0].rate_mbit == 2500.0
    assert sc.deployment.routing.wan_bandwidth_gbps == 2.5  # the router's prior
    assert sc.network.segment.model_dump(exclude_unset=True) == data["network"]["segment"]
    loss = override_scenario(data, SweepPoint("loss_pct", 0.1))
    assert loss["network"]["links"][0]["loss_pct"] == 0.1
    assert loss["deployment"]["routing"]["wan_bandwidth_gbps"] == 100.0
    assert data["network"]["links"][0].get("loss_pct") is None  # the input is not changed
    assert override_scenario(data, SweepPoint(None, None))["name"] == "pdd"
    shadowed = {"name": "s", "network": {"links": [
        {"name": "wan", "a": "x", "b": "y", "rate_mbit": 10.0, "a_to_b": {"rate_mbit": 9.0}},
    ]}}  # fmt: skip
    out = override_scenario(shadowed, SweepPoint("rate_mbit", 5.0))
    assert out["network"]["links"][0]["a_to_b"] == {"rate_mbit": 5.0}


def test_dump_toml_reads_back() -> None:
    data = {
        "name": 'a "q"',
        "n": 3,
        "x": 0.1,
        "on": True,
        "tags": ["a", "b"],
        "empty": {},
        "cost": {"unit_price": {"h800-sxm": 1.0, "odd key": 2}, "line": 0.3},
        "net": {"links": [{"a": "p", "b": "q", "sub": {"k": 1}}, {"a": "r", "b": "s"}]},
    }
    assert tomllib.loads(dump_toml(data)) == data
    with pytest.raises(ValueError):
        dump_toml({"x": math.inf})


def test_ratio_interval() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.normal(5, 0.5, 300), rng.normal(10, 1, 300)
    v, lo, hi = ratio_interval(a, b, 50)
    assert lo < v < hi and v == pytest.approx(0.5, abs=0.03)
    assert all(math.isnan(x) for x in ratio_interval(a, np.array([]), 50))


def _e12(rate: list[float], jitter: list[float]) -> Measurement:
    return Measurement(
        experiment="E12",
        quick=True,
        wan_emulated=True,
        series=[
            Series(label=trend_label("rate_mbit", 50), x=[10000, 2500][: len(rate)], y=rate),
            Series(label=trend_label("jitter_ms", 50), x=[3, 15][: len(jitter)], y=jitter),
        ],
    )


def test_e12_check_is_a_falling_ratio_along_rate_and_jitter() -> None:
    assert E12.judge(_e12([0.8, 0.5], [0.8, 0.6]))[0] is Verdict.REPRODUCED
    verdict, result = E12.judge(_e12([0.8, 0.5], [0.8, 0.9]))
    assert verdict is Verdict.NOT_REPRODUCED and "not falling" in result.gap
    verdict, result = E12.judge(_e12([0.8, math.nan], [0.8, 0.6]))
    assert verdict is Verdict.NOT_REPRODUCED and "undefined at 1 point" in result.gap
    m = _e12([0.8, 0.5], [0.8, 0.6])
    m.wan_emulated = False
    assert E12.judge(m)[0] is Verdict.INCONCLUSIVE


def test_e12_refuses_without_the_emulated_wan(tmp_path) -> None:
    m = run_e12(E12, RunContext(out=tmp_path / "E12", quick=True, emulate=False))
    assert m.not_run is not None and m.not_run.startswith(NEEDS_WAN)
    assert E12.judge(m)[0] is Verdict.NOT_RUN
    assert not (tmp_path / "runs").exists()  # nothing was replayed


def test_a_refused_replay_is_not_reused(tmp_path) -> None:
    from pddbench.harness.experiments.run_replay import _run_folders
    from pddbench.harness.rundir.manifest import RunManifest, RunStatus

    for name, status in (("a-failed", RunStatus.FAILED), ("b-done", RunStatus.COMPLETE)):
        m = RunManifest.begin(argv=["replay"], run_id=name)
        if status is RunStatus.FAILED:
            m.fail(status, "link probes are off the configuration")
        else:
            m.finish(status, records=1, unreadable_lines=0)
        (tmp_path / name).mkdir()
        m.save(tmp_path / name)
    assert [p.name for p in _run_folders(tmp_path)] == ["b-done"]
