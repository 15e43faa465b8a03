"""Experiments: declarations, shape checks, verdicts, the runner loop and the report."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pddbench.cli import main
from pddbench.errors import UserError
from pddbench.harness.experiments import checks as c
from pddbench.harness.experiments.catalog import (
    EXPERIMENTS,
    REPLAY_COST,
    by_id,
    planned_costs,
    select,
)
from pddbench.harness.experiments.model import Measurement, Series, Value, Verdict
from pddbench.harness.experiments.report import judge_row
from pddbench.harness.experiments.runner import eta_s, run_experiments


def test_catalog_declares_e1_to_e12_with_pdd_wording() -> None:
    table = by_id()
    assert list(table) == [f"E{i}" for i in range(1, 13)]
    for e in EXPERIMENTS:
        assert e.expected and e.published and e.check_text
        assert e.run is not None or e.not_run_reason
    assert table["E6"].expected == "≈ 6%"
    assert "6.2%" in table["E6"].published


def test_select_all_and_unknown() -> None:
    assert [e.id for e in select(("e6", "E1"))] == ["E1", "E6"]
    assert len(select(("all",))) == 12
    with pytest.raises(UserError, match="unknown experiment"):
        select(("E13",))


def test_in_band_gap_and_direction() -> None:
    assert c.in_band("x", 0.75, 0.7, 0.8).passed
    r = c.in_band("x", 0.5, 0.7, 0.8)
    assert not r.passed and "0.2 below" in r.gap
    assert "above" in c.in_band("x", 0.9, 0.7, 0.8).gap
    assert c.direction("a", 1, "b", 2).passed
    r = c.direction("a", 3, "b", 2)
    assert not r.passed and "+50.0%" in r.gap
    assert "undefined" in c.direction("a", math.nan, "b", 2).gap
    assert "undefined" in c.in_band("x", math.nan, 0.7, 0.8).gap
    assert c.direction("a", 0, "b", 0, less=False).gap == "a − b = 0"


def test_dips_and_bathtub_and_trend() -> None:
    x = [i / 100 for i in range(100)]
    y = [1.0] * 100
    for d in (20, 70):
        y[d] = 0.8
    assert c.local_dips(x, y) == [0.2, 0.7]
    assert c.dips_near(x, y, (0.2, 0.4, 0.7), 0.03, need=2).passed
    assert not c.dips_near(x, y, (0.2, 0.4, 0.7), 0.03, need=3).passed
    assert c.dip_regions([0.1, 0.11, 0.12, 0.5]) == [[0.1, 0.11, 0.12], [0.5]]
    for d in (5, 10, 50, 90):  # four singular points where none was published
        y[d] = 0.8
    r = c.dips_near(x, y, (0.2, 0.4, 0.7), 0.03, need=2)
    assert not r.passed and "4 dips away" in r.gap
    tub = [2.0 - 4 * xi * (1 - xi) for xi in x]
    assert c.bathtub(x, tub).passed
    assert not c.bathtub(x, [1.0 + xi for xi in x]).passed  # rising, no lower end
    assert c.monotone("y", [1, 2, 3], increasing=True).passed
    assert not c.monotone("y", [3, 2, 1], increasing=True).passed


def test_bootstrap_interval_contains_the_statistic() -> None:
    v = np.random.default_rng(1).normal(10, 1, 500)
    low, high = c.bootstrap_ci(v, lambda a: float(np.median(a)))
    assert low < float(np.median(v)) < high and high - low < 0.5


def _e6(share: float, wan: bool | None = False) -> Measurement:
    return Measurement(
        experiment="E6",
        quick=True,
        wan_emulated=wan,
        values=[Value(name="rld_share", value=share, low=share - 0.01, high=share + 0.01)],
    )


def test_verdicts() -> None:
    e6, e5 = by_id()["E6"], by_id()["E5"]
    assert e6.judge(_e6(0.062, wan=True))[0] is Verdict.REPRODUCED
    assert e6.judge(_e6(0.062))[0] is Verdict.INCONCLUSIVE  # routing needs the WAN
    verdict, result = e6.judge(_e6(0.30, wan=True))
    assert verdict is Verdict.NOT_REPRODUCED and "above the band" in result.gap
    m5 = Measurement(
        experiment="E5",
        quick=True,
        wan_emulated=False,
        values=[
            Value(name="p50_change", value=-0.5),
            Value(name="pdd_p99", value=1.0),
            Value(name="cross_p99", value=10.0),
        ],
    )
    assert e5.judge(m5)[0] is Verdict.INCONCLUSIVE  # WAN-dependent, WAN not emulated
    m5.wan_emulated = True
    assert e5.judge(m5)[0] is Verdict.REPRODUCED
    gone = Measurement(experiment="E5", quick=True, not_run="failed: x")
    assert e5.judge(gone)[0] is Verdict.NOT_RUN
    row = judge_row(e6, None)
    assert row.verdict == "not run" and "experiment run E6" in row.detail
    assert "experiment run E12" in judge_row(by_id()["E12"], None).detail


def test_costs_charge_a_shared_replay_once_and_eta_rescales() -> None:
    e4, e5, e6 = select(("E4", "E5", "E6"))
    rep = REPLAY_COST.quick_s
    # E4 replays same-dc-pd and cross-dc-pd; E5 only adds pdd; E6 then replays nothing
    assert planned_costs([e4, e5, e6], True, set()) == [
        e4.cost.quick_s + 2 * rep,
        e5.cost.quick_s + rep,
        e6.cost.quick_s,
    ]
    assert planned_costs([e6], True, {"pdd"}) == [e6.cost.quick_s]
    assert eta_s([e6], [], True, set()) == e6.cost.quick_s + rep
    assert eta_s([e6], [(100.0, 200.0)], True, set()) == pytest.approx(2 * (e6.cost.quick_s + rep))
    assert eta_s([e6], [(100.0, 1.0)], True, set()) == pytest.approx(0.5 * (e6.cost.quick_s + rep))


def test_run_and_report_from_folder_alone(tmp_path) -> None:
    exps = select(("E7", "E12"))
    lines: list[str] = []
    run_experiments(exps, tmp_path, quick=True, echo=lines.append)
    assert any("ETA" in x for x in lines)
    m = Measurement.load(tmp_path / "E7")
    assert m.get("kv_bytes") > 1e6 and "model-priced" in m.labels[0]
    # a figure-bearing measurement, written by hand, is rendered too
    Measurement(experiment="E2", quick=True, series=[Series(label="a", x=[0, 1], y=[1, 2])]).save(
        tmp_path / "E2"
    )
    assert main(["experiment", "report", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    rows = {r["id"]: r for r in report["rows"]}
    assert len(rows) == 12
    assert rows["E7"]["verdict"] in ("reproduced in shape", "not reproduced")
    assert rows["E2"]["verdict"] == "not run"
    nan = Measurement(experiment="E6", quick=True, values=[Value(name="rld_share", value=math.nan)])
    nan.save(tmp_path / "E6")  # an undefined statistic survives the file and the report
    assert math.isnan(Measurement.load(tmp_path / "E6").get("rld_share"))
    assert main(["experiment", "report", str(tmp_path)]) == 0
    assert rows["E12"]["verdict"] == "not run" and "needs the emulated WAN" in rows["E12"]["detail"]
    assert rows["E10"]["verdict"] == "not run" and "experiment run E10" in rows["E10"]["detail"]
    assert all(r["verdict"] != "not run" or r["detail"] for r in rows.values())
    assert rows["E2"]["verdict"] == "not run" and "incomplete" in rows["E2"]["detail"]
    html = (tmp_path / "report.html").read_text()
    assert "<script" not in html and "data:image/png;base64" in html and "4.6 MB" in html
    assert (tmp_path / "report_figures" / "e2.png").exists()


def test_cli_list_and_bad_name(capsys) -> None:
    assert main(["experiment", "list"]) == 0
    out = capsys.readouterr().out
    for i in range(1, 13):
        assert f"E{i} " in out
    assert "6.2%" in out and "−51.5%" in out
    assert main(["experiment", "run", "E99", "--out", "/tmp/nowhere-e17"]) == 2
    assert "unknown experiment" in capsys.readouterr().err


def test_trace_experiments_on_a_given_trace(tmp_path) -> None:
    from pddbench.workloads.synth import synthesise
    from pddbench.workloads.synth_profile import load_profile
    from pddbench.workloads.traceio import write_trace

    path = write_trace(synthesise(load_profile("smoke")).table, tmp_path / "t.parquet")
    run_experiments(
        select(("E1", "E3")), tmp_path / "o", quick=True, trace=path, echo=lambda _m: None
    )
    e1, e3 = Measurement.load(tmp_path / "o" / "E1"), Measurement.load(tmp_path / "o" / "E3")
    assert e1.labels == ["trace t.parquet"]
    shares = [s.y for s in e1.series]
    assert len(shares) == 7 and abs(sum(col[0] for col in shares) - 1) < 1e-9
    hit = e3.get("token_weighted_hit")
    assert 0 < hit < 1 and e3.get("reduction") == pytest.approx(1 / (1 - hit), rel=1e-6)
