"""BCR only from capacity: a run whose goodput is measured below capacity is load-bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pddbench.harness.analysis.synthetic import SynthRun
from pddbench.harness.analysis.verdict import BcrVerdict, bcr_verdict
from pddbench.harness.config.cost import CostModel
from pddbench.harness.plan.ladder import LadderSearch, PointMeasure
from pddbench.harness.plan.ladder_points import LadderSettings
from pddbench.harness.report.markdown import _table as markdown_table
from pddbench.harness.report.tables import headline_table
from pddbench.harness.report.write import Format, write_report
from tests.analysis.runs import write_synth

LOOSE = {"ttft_s": 1000.0, "tpot_s": 10.0, "e2e_s": 100000.0, "target_pct": 50.0}
COST = CostModel(unit_price={"A": 1.0}, gpus={"A": 88})


def _ladder(mets: list[int], n: int = 500):  # type: ignore[no-untyped-def]
    search = LadderSearch(LadderSettings(), target_pct=99.0, origin_s=0.0, base_speedup=1.0)
    for met in mets:
        w = search.next_window()
        assert w is not None
        search.record(PointMeasure(w, n, met, {"ttft": met}, 4, 60.0, n / 60.0 * w.load))
    return search.verdict("same-dc-pd")


def test_bcr_only_from_a_capacity_verdict() -> None:
    at_cap = bcr_verdict("same-dc-pd", COST, _ladder([500, 500, 450]), 1.0)
    # offered 8.33, 12.5 and 18.75 req/s at 100 %, 100 % and 90 %: attainment crosses 99 %
    # a tenth of the way (in log rate) from 12.5 to 18.75; 99 % of that rate meets the SLA
    capacity = 500 / 60 * 1.5 * 1.5**0.1 * 0.99
    assert at_cap.basis == "capacity" and at_cap.goodput == pytest.approx(capacity)
    assert at_cap.bcr == pytest.approx(capacity / 88)
    assert at_cap.goodput_low is not None and at_cap.goodput_low < capacity
    assert "(capacity)" in at_cap.bcr_text()
    bounded = bcr_verdict("same-dc-pd", COST, _ladder([500] * 6), 1.0)
    assert bounded.basis == "load-bounded" and bounded.bcr is None
    assert bounded.load_bounded_bcr == pytest.approx(500 / 60 / 88)
    assert bounded.bcr_text().startswith("load-bounded")
    plain = bcr_verdict("same-dc-pd", COST, None, 0.88)
    assert plain.basis == "load-bounded" and plain.bcr is None
    assert plain.load_bounded_bcr == pytest.approx(0.01)


def test_meeting_the_target_at_the_offered_load_is_load_bounded_everywhere(
    tmp_path: Path,
) -> None:
    specs = [
        ("same", SynthRun(system="same-dc-pd", requests=800, seed=1)),
        ("pdd", SynthRun(system="pdd", requests=800, seed=1)),
    ]
    runs = [write_synth(tmp_path / name, spec) for name, spec in specs]
    out, js = tmp_path / "r.html", tmp_path / "r.json"
    report = write_report(runs, out, json_out=js, sla_overrides=LOOSE)
    # the SLA is met at the offered load: goodput ≈ offered load, far below capacity
    for run in report.runs:
        assert run.metrics.value("sla_attainment") >= 0.5
    headline = markdown_table(headline_table(report))
    bcr_row = next(line for line in headline.splitlines() if line.startswith("| BCR"))
    assert bcr_row.count("load-bounded") == 2 and "(capacity)" not in bcr_row
    html = out.read_text()
    assert html.count("load-bounded &gt;=") + html.count("load-bounded >=") >= 4  # both tables
    data = json.loads(js.read_text())
    for label in (r.label for r in report.runs):
        assert data["headline"][label]["bcr"]["text"].startswith("load-bounded")
        assert data["headline"][label]["bcr"]["delta"] is None
        assert data["verdicts"][label]["basis"] == "load-bounded"
        assert data["verdicts"][label]["bcr"] is None
    assert {c["bcr_basis"] for c in data["costs"]} == {"load-bounded"}
    md = tmp_path / "r.md"
    write_report(runs, md, fmt=Format.MD, sla_overrides=LOOSE)
    assert md.read_text().count("load-bounded >=") >= 4


def test_a_run_with_a_capacity_verdict_shows_the_bcr(tmp_path: Path) -> None:
    run = write_synth(tmp_path / "same", SynthRun(system="same-dc-pd", requests=400, seed=1))
    (run / "capacity.json").write_text(_ladder([500, 500, 450]).model_dump_json())
    out, js = tmp_path / "r.html", tmp_path / "r.json"
    report = write_report([run], out, json_out=js)
    data = json.loads(js.read_text())
    label = report.runs[0].label
    v = data["verdicts"][label]
    assert v["basis"] == "capacity" and v["bcr"] == pytest.approx(v["goodput"] / v["cost"])
    assert v["goodput_low"] is not None and data["headline"][label]["bcr"]["text"].endswith(
        "(capacity)"
    )


def test_main_job_verdict_table(tmp_path: Path) -> None:
    from pddbench.harness.jobs.main_job import verdict_table
    from pddbench.harness.rundir.folder import RunPaths

    run = write_synth(tmp_path / "same", SynthRun(system="same-dc-pd", requests=300, seed=1))
    cap, bounded = _ladder([500, 500, 450]), _ladder([500] * 6)
    rows = [
        (bcr_verdict("same-dc-pd", COST, cap, 1.0), cap, RunPaths(run)),
        (bcr_verdict("pdd", COST, bounded, 1.0), bounded, None),
        (
            BcrVerdict(
                system="cross-dc-pd",
                basis="failed",
                goodput=None,
                reason="link probes are off the configuration",
            ),
            None,
            None,
        ),
    ]
    text = markdown_table(verdict_table(rows))
    same, pdd = (line for line in text.splitlines() if line.startswith(("| same", "| pdd")))
    assert "(capacity)" in same and "x1:" in same and "88×A" in same
    assert "load-bounded" in pdd and "(capacity)" not in pdd
    failed = next(line for line in text.splitlines() if line.startswith("| cross"))
    assert "failed: link probes are off" in failed
