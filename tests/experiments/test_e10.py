"""E10: the equal-cost BCR ratio per workload and inter-DC line rate on the twin (issue 29
item 6): the 64K/1K profile's mix, the check (which fails on a missing rate or a ladder
without a capacity), and the run itself on a small trace with a tiny ladder."""

from __future__ import annotations

import math

import numpy as np

from pddbench.cli import main
from pddbench.harness.experiments import run_capacity as rc
from pddbench.harness.experiments.catalog import E10_RATES_GBIT, by_id
from pddbench.harness.experiments.model import Measurement, RunContext, Value, Verdict
from pddbench.harness.experiments.report import judge_row
from pddbench.workloads.schema import Col
from pddbench.workloads.synth import SynthOptions, synthesise
from pddbench.workloads.synth_profile import load_profile
from pddbench.workloads.traceio import write_trace


def _mix(name: str, options: SynthOptions | None = None) -> dict[str, float]:
    s = synthesise(load_profile(name), options)
    inputs = s.table.column(Col.INPUT_LENGTH).to_numpy()
    hit = s.cached_tokens / inputs
    return {
        "input": float(inputs.mean()),
        "output": float(s.table.column(Col.OUTPUT_LENGTH).to_numpy().mean()),
        "ge95": float(np.mean(hit >= 0.95)),
        "lt50": float(np.mean(hit < 0.5)),
        "mean_hit": float(hit.mean()),
    }


def test_e10_profile_is_64k_in_1k_out_with_jan_febs_skew() -> None:
    e10 = _mix("e10-64k1k")
    jan = _mix("jan-feb", SynthOptions(requests=50_000))
    assert 56_000 <= e10["input"] <= 72_000  # ~64K in
    assert 850 <= e10["output"] <= 1_250  # ~1K out (jan-feb: ~300)
    assert jan["output"] < 500
    # the skew: most requests hit >= 95 %, a few % hit < 50 %, mean ~90 % (as jan-feb)
    assert abs(e10["ge95"] - jan["ge95"]) < 0.10 and e10["ge95"] > 0.6
    assert abs(e10["lt50"] - jan["lt50"]) < 0.015 and 0.01 < e10["lt50"] < 0.10
    assert abs(e10["mean_hit"] - jan["mean_hit"]) < 0.03


def test_e10_rates_are_the_declared_points() -> None:
    exp = by_id()["E10"]
    for quick in (True, False):
        declared = sorted(r / 1000 for r in exp.sweep_points(quick)["rate_mbit"])
        assert tuple(declared) == E10_RATES_GBIT
    assert exp.scenarios == rc.SYSTEMS


def _full(ratio: float = 1.3) -> Measurement:
    values = [Value(name="cost_change:pdd", value=-0.05)]
    for w in rc.WORKLOADS:
        for s in rc.CROSS_DC:
            for r in E10_RATES_GBIT:
                values.append(Value(name=rc.value_name("bcr_ratio", w, s, r), value=ratio))
    return Measurement(experiment="E10", quick=True, values=values, wan_emulated=False)


def test_e10_check_needs_every_rate_on_both_workloads() -> None:
    check = by_id()["E10"].check
    assert check(_full()).passed
    assert not check(_full(0.6)).passed  # the published shape: pdd's best BCR change
    for gone in ("bcr_ratio:jan-feb:pdd:25G", "bcr_ratio:e10-64k1k:cross-dc-pd:10G"):
        m = _full()
        m.values = [v for v in m.values if v.name != gone]
        result = check(m)
        _, workload, system, rate = gone.split(":")
        assert not result.passed and f"{system} on {workload} at {rate[:-1]} Gbit/s" in result.gap
    bounded = _full()  # a load-bounded ladder: no capacity, no BCR, no ratio
    bounded.values[1] = Value(name=bounded.values[1].name, value=math.nan)
    assert not check(bounded).passed
    # virtual time: the WAN is modelled, so the verdict is inconclusive by rule
    m = _full()
    m.labels = [rc.TIME_LABEL]
    verdict, _ = by_id()["E10"].judge(m)
    assert verdict is Verdict.INCONCLUSIVE
    assert "VIRTUAL TIME" in judge_row(by_id()["E10"], m).detail


def test_e10_table_shows_a_refused_ladder_as_such() -> None:
    m = _full()
    gone = rc.value_name("bcr_ratio", "jan-feb", "cross-dc-pd", 10.0)
    m.values = [Value(name=v.name, value=math.nan) if v.name == gone else v for v in m.values]
    m.facts[rc.value_name("ladder", "jan-feb", "cross-dc-pd", 10.0)] = "refused: no capacity"
    m.facts[rc.value_name("binding", "jan-feb", "cross-dc-pd", 10.0)] = "WAN"
    table = rc.bcr_table(m)
    assert table.headers[-3:] == ("10 Gbit/s", "25 Gbit/s", "100 Gbit/s")
    row = next(r for r in table.rows if r[0].text == "jan-feb" and r[1].text == "cross-dc-pd")
    assert row[3].text == "—" and "refused" in row[3].sub and "WAN" in row[3].sub
    assert row[4].text == "1.300 (+30.0%)"
    assert "VIRTUAL TIME" in table.title


TINY = (
    "--backend", "virtual", "--points", "2", "--growth", "4", "--bisect", "0",
    "--descend", "0", "--min-requests", "0", "--point-duration", "20s", "--warmup", "2s",
)  # fmt: skip


def test_e10_runs_every_rate_and_workload_on_the_twin(tmp_path, monkeypatch) -> None:
    smoke = write_trace(synthesise(load_profile("smoke")).table, tmp_path / "smoke.parquet")

    def in_process(args: list[str], root, ok=(0, 1), timeout_s: float = 0) -> None:
        assert main(args) in ok

    monkeypatch.setattr(rc, "child", in_process)
    monkeypatch.setattr(rc, "QUICK", TINY)
    # jan-feb replaced by the small smoke trace (--trace); e10-64k1k synthesised as built
    lines: list[str] = []
    exp = by_id()["E10"]
    ctx = RunContext(out=tmp_path / "o" / "E10", quick=True, trace=smoke, progress=lines.append)
    m = rc.run_e10(exp, ctx)
    names = {v.name for v in m.values}
    for w in rc.WORKLOADS:
        assert rc.value_name("capacity", w, rc.BASELINE) in names
        for s in rc.CROSS_DC:
            for r in E10_RATES_GBIT:
                assert rc.value_name("bcr_ratio", w, s, r) in names
                assert rc.value_name("capacity", w, s, r) in names
    # one same-dc-pd ladder per workload, one per cross-DC system and rate
    assert len(m.runs) == len(rc.WORKLOADS) * (1 + len(rc.CROSS_DC) * len(E10_RATES_GBIT))
    assert m.labels == [rc.TIME_LABEL] and m.wan_emulated is False
    assert "the given trace smoke.parquet" in m.notes[0]
    assert (tmp_path / "o" / "runs" / "e10-64k1k.parquet").exists()
    scen = (tmp_path / "o" / "E10" / "scenarios" / "pdd.rate10000.toml").read_text()
    assert "rate_mbit = 10000.0" in scen and "wan_bandwidth_gbps = 10.0" in scen
    table = "\n".join(lines)
    assert "VIRTUAL TIME" in table and "10 Gbit/s" in table and "100 Gbit/s" in table
    # a ladder without a capacity shows as such, never as a ratio
    for w in rc.WORKLOADS:
        for s in rc.CROSS_DC:
            for r in E10_RATES_GBIT:
                ratio = m.get(rc.value_name("bcr_ratio", w, s, r))
                cap = m.get(rc.value_name("capacity", w, s, r))
                base = m.get(rc.value_name("capacity", w, rc.BASELINE))
                assert math.isfinite(ratio) == (math.isfinite(cap) and math.isfinite(base))
    m.save(ctx.out)
    assert main(["experiment", "report", str(tmp_path / "o")]) == 0
    md = (tmp_path / "o" / "report.md").read_text()
    assert "BCR ratio against same-dc-pd per inter-DC line rate" in md
    assert -0.2 < m.get("cost_change:pdd") < 0  # the built-ins' sizing (issue 14)
