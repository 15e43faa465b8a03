"""server_metrics.parquet is read: the servers' own prefix-cache and queue counters."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pddbench.harness.analysis.rundir import load_run
from pddbench.harness.analysis.server import server_counters
from pddbench.harness.drive.scrape import MetricRow, rows_table, write_server_metrics
from pddbench.harness.report.jsonout import report_json
from pddbench.harness.report.model import build_report
from pddbench.harness.report.sections import build_sections
from pddbench.harness.report.write import write_report
from pddbench.harness.rundir.folder import RunPaths
from tests.analysis.runs import write_rows

ROWS = [
    dict(request_id=f"r{i}", session_id="s", turn_index=i, intended_send_s=float(i),
         actual_send_s=float(i), input_tokens=100, cached_tokens_theoretical=50, ttft_s=0.1,
         e2e_s=0.5)
    for i in range(4)
]


def _metrics() -> list[MetricRow]:
    def row(t: float, inst: str, metric: str, value: float) -> MetricRow:
        return MetricRow(t, inst, metric, "raw_" + metric, "{}", value)

    out = []
    # instance a: 1000 tokens queried, 600 hit; instance b restarts (counter drops) mid-run
    for t, (qa, ha, qb, hb, wa, wb) in enumerate(
        [(0, 0, 0, 0, 0, 1), (500, 300, 200, 100, 3, 2), (1000, 600, 50, 50, 1, 0)]
    ):
        out += [
            row(t, "a", "prefix_cache_query_tokens_total", qa),
            row(t, "a", "prefix_cache_hit_tokens_total", ha),
            row(t, "b", "prefix_cache_query_tokens_total", qb),
            row(t, "b", "prefix_cache_hit_tokens_total", hb),
            row(t, "a", "requests_waiting", wa),
            row(t, "b", "requests_waiting", wb),
            row(t, "a", "queue_time_seconds_sum", 0.5 * t),
            row(t, "a", "queue_time_seconds_count", 10 * t),
        ]
    return out


def test_counters_are_run_increases_summed_over_instances() -> None:
    s = server_counters(rows_table(_metrics()))
    assert s is not None and (s.instances, s.scrapes) == (2, 3)
    # a: 1000 queried / 600 hit; b: 200 then a restart at 50 -> 250 queried / 150 hit
    assert s.prefix_hit_rate == pytest.approx(750 / 1250)
    assert s.waiting_mean == pytest.approx(7 / 6) and s.waiting_max == 3
    assert s.queue_time_mean_s == pytest.approx(1.0 / 20)
    assert math.isnan(s.prompt_tokens_computed)  # no instance exports it
    assert server_counters(None) is None


def test_report_shows_the_servers_counters_beside_the_clients(tmp_path: Path) -> None:
    run = write_rows(tmp_path / "run", ROWS)
    write_server_metrics(_metrics(), RunPaths(run).server_metrics)
    bare = write_rows(tmp_path / "bare", ROWS)  # a --target run: no server metrics
    assert load_run(run).server_metrics is not None
    report = build_report([run, bare])
    (section,) = [s for s in build_sections(report) if s.id == "server"]
    (table,) = section.tables
    (row,) = table.rows  # only the run that has server metrics
    cells = dict(zip(table.headers, (c.text for c in row), strict=True))
    assert cells["server prefix-cache hit"] == "60.0 %"
    assert cells["client token hit rate"] == "50.0 %"
    assert cells["waiting (peak)"] == "3.00"
    out = tmp_path / "r.html"
    write_report([run, bare], out)
    assert "own counters" in out.read_text()
    data = json.loads(json.dumps(report_json(report)))
    assert data["runs"][0]["server"]["prefix_hit_rate"] == pytest.approx(0.6)
    assert data["runs"][1]["server"] is None
