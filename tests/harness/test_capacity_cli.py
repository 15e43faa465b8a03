"""`pddbench capacity` end to end on loopback: real servers, two ladder points, the seam.

After each point the ladder waits for the servers to finish the point's work (the PDD
router's busy series) and records how long that took; the points table says so.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.traces import chain_trace

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(240)


def test_capacity_records_how_long_the_servers_took_after_each_point(tmp_path: Path) -> None:
    trace = chain_trace(tmp_path / "t.parquet", sessions=400, turns=2, session_gap_s=0.1)
    out = tmp_path / "o"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pddbench",
            "capacity",
            "--trace",
            str(trace),
            "--scenario",
            "pdd",
            "--no-emulation",
            "--start",
            "1",
            "--points",
            "2",
            "--bisect",
            "0",
            "--min-requests",
            "0",
            "--point-duration",
            "6s",
            "--warmup",
            "1s",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=220,
    )
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    (verdict,) = out.glob("*-ladder-*/capacity.json")
    points = json.loads(verdict.read_text())["points"]
    assert len(points) == 2, res.stderr[-3000:]
    for p in points:
        assert p["backlog"] is None and p["settle_s"] is not None and p["settle_s"] < 30
    manifests = [json.loads(m.read_text()) for m in out.glob("*-pdd-x*/manifest.json")]
    assert len(manifests) == 2
    assert all(m["ladder_point"]["settle_s"] is not None for m in manifests)
    assert all(m["ladder_point"]["backlog"] == "" for m in manifests)
    assert "servers after the point" in res.stdout and "idle after" in res.stdout
    # steady-state points: the second (two slices) primes the servers' caches over HTTP
    assert "caches primed with" in res.stderr, res.stderr[-3000:]
    primed = [
        json.loads(m.read_text())["ladder_point"].get("primed", "")
        for m in out.glob("*-pdd-x*/manifest.json")
    ]
    assert any(p.startswith("caches primed with") for p in primed), primed
    assert "planned / measured / window" in res.stdout
    assert all(p["trace_mix"] is not None and p["planned_mix"] is not None for p in points)
    for folder in out.glob("*-pdd-x*"):  # warm-up copies too: ids the servers accept
        status = pq.read_table(folder / "requests.parquet", columns=["status"]).column(0)
        assert set(status.to_pylist()) <= {"ok", "censored"}, folder
