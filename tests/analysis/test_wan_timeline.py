"""The report draws a run's WAN schedule (links.parquet change rows) under its TTFT timeline."""

from __future__ import annotations

import json
from pathlib import Path

from pddbench.harness.analysis.synthetic import SynthRun
from pddbench.harness.report.model import build_report
from pddbench.harness.report.write import write_report
from pddbench.netem.probe import write_link_probes
from pddbench.netem.schedule import ChangeRecord
from tests.analysis.runs import write_synth

ORIGIN = 1000.0  # monotonic clock origin of the synthetic run


def record(at: float, direction: str, rate: float) -> ChangeRecord:
    return ChangeRecord(
        link="wan",
        direction=direction,
        changes={"rate_mbit": rate},
        backend="nfqueue",
        t_unix=1.7e9 + at,
        t_mono=ORIGIN + at + 0.01,
        at_s=at,
        lag_ms=10.0,
        rate_mbit=rate,
        delay_ms=15.0,
        jitter_ms=0.0,
        loss_pct=0.0,
        up=True,
    )


def swung_run(tmp_path: Path) -> Path:
    run = write_synth(tmp_path / "pdd", SynthRun(system="pdd", requests=400, seed=1))
    manifest_path = run / "manifest.json"
    m = json.loads(manifest_path.read_text())
    m["clock"] = {"kind": "monotonic", "origin_monotonic_s": ORIGIN, "origin_wall": None}
    manifest_path.write_text(json.dumps(m))
    records = [
        record(at, d, rate)
        for at, rate in ((0.0, 10_000.0), (5.0, 2_000.0), (10.0, 10_000.0))
        for d in ("a_to_b", "b_to_a")
    ]
    write_link_probes([], str(run / "links.parquet"), records)
    return run


def test_change_rows_become_the_timeline_and_not_probe_rows(tmp_path: Path) -> None:
    report = build_report([swung_run(tmp_path)])
    run = report.runs[0]
    assert run.links == []  # no probe rows: the links table stays empty
    rates = [(round(r["t_s"], 2), r["direction"], r["rate_mbit"]) for r in run.link_changes]
    assert (5.01, "a_to_b", 2000.0) in rates and (10.01, "b_to_a", 10000.0) in rates


def test_the_html_report_draws_the_swing_under_ttft(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    write_report([swung_run(tmp_path)], out)
    html = out.read_text()
    start = html.index('id="ttft-timeline"')
    section = html[start : html.index("</section>", start)]
    assert "<img" in section and "line rate over the same time" in section
